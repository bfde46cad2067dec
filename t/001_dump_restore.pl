
# Copyright (c) 2026, delivery_outbox developers

# t/001_dump_restore.pl
#
# pg_dump keeps the outbox.  The table is an extension configuration table,
# so a dump carries its rows; a restore re-inserts them through the state
# guard, which accepts a row in any state whose bookkeeping agrees with it
# and never rewrites it.  Rows in every state (pending, delivered, acked, a
# released row that is pending again with one attempt and a delivered_at, a
# row acked late after a resync), a TOASTed payload and gaps in the ids must
# all come back exactly as saved, from a plain dump restored with psql and
# from a custom-format dump restored with pg_restore, and the id sequence
# must come back past the highest id.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $node = outbox_node('main', databases => ['src'], extension => ['src']);

# Each row gets its own recipient, so that a per-recipient claim picks
# exactly that row.  Ids 5 and 8 are taken by rolled-back enqueues.
$node->safe_psql(
	'src', q{
SELECT outbox_enqueue('agent:pending', 'work', '\x00ff00'::bytea);
SELECT outbox_enqueue('agent:delivered', 'work', '\x02'::bytea, 'tenant-1');
SELECT outbox_enqueue('agent:acked', 'execution_event', '\x03'::bytea);
SELECT outbox_enqueue('agent:released', 'work', '\x04'::bytea);
BEGIN;
SELECT outbox_enqueue('agent:gap', 'work', '\x05'::bytea);
ROLLBACK;
SELECT outbox_enqueue('agent:late', 'work', '\x06'::bytea, 'tenant-2');
SELECT outbox_enqueue('exec_events:42', 'execution_event',
       (SELECT decode(string_agg(md5(g::text), ''), 'hex')
        FROM generate_series(1, 200) g));
BEGIN;
SELECT outbox_enqueue('agent:gap', 'work', '\x08'::bytea);
ROLLBACK;

SELECT count(*) FROM outbox_claim(1, 'agent:delivered');
SELECT count(*) FROM outbox_claim(1, 'agent:acked');
SELECT outbox_ack(3, 'agent:acked');
SELECT count(*) FROM outbox_claim(1, 'agent:released');
SELECT outbox_release(ARRAY[4]::bigint[]);
SELECT count(*) FROM outbox_claim(1, 'agent:late', 'tenant-2');
SELECT outbox_reclaim_recipient('agent:late', 'tenant-2');
SELECT outbox_ack(6);
});

# What the source holds, so that a mistake in building it shows up here and
# not as a confusing restore difference.
my $summary_sql = q{
SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s',
                         id, recipient, coalesce(tenant_id, '-'),
                         delivery_state, delivery_attempts,
                         delivered_at IS NOT NULL, acked_at IS NOT NULL,
                         length(payload)),
                  E'\n' ORDER BY id)
FROM delivery_outbox};
my $expected_summary = join("\n",
	'1|agent:pending|-|pending|0|f|f|3',
	'2|agent:delivered|tenant-1|delivered|1|t|f|1',
	'3|agent:acked|-|acked|1|t|t|1',
	'4|agent:released|-|pending|1|t|f|1',
	'6|agent:late|tenant-2|acked|2|t|t|1',
	'7|exec_events:42|-|pending|0|f|f|3200');
is($node->safe_psql('src', $summary_sql),
	$expected_summary, 'source rows are in the states under test');
# The full text of every row (every column, timestamps included), and the
# sequence.
my $src_rows = rows_of($node, db => 'src');
my $src_max = $node->safe_psql('src', 'SELECT max(id) FROM delivery_outbox');
is($src_max, '7', 'highest id in the source');

my $tempdir = PostgreSQL::Test::Utils::tempdir;
my $plain = "$tempdir/outbox.sql";
my $custom = "$tempdir/outbox.dump";

$node->command_checks_all(
	[ 'pg_dump', '-Fp', '-f', $plain, '-d', 'src' ],
	0, [qr/^$/], [qr/^$/], 'pg_dump -Fp runs without errors or warnings');
$node->command_checks_all(
	[ 'pg_dump', '-Fc', '-f', $custom, '-d', 'src' ],
	0, [qr/^$/], [qr/^$/], 'pg_dump -Fc runs without errors or warnings');

my $dump_text = slurp_file($plain);
like(
	$dump_text,
	qr/^COPY public\.delivery_outbox \(/m,
	'plain dump carries the outbox rows');
unlike($dump_text, qr/^CREATE TABLE public\.delivery_outbox/m,
	'plain dump does not recreate the table outside the extension');

$node->safe_psql('postgres', 'CREATE DATABASE restored_plain');
$node->command_checks_all(
	[
		'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
		'-d', 'restored_plain', '-f', $plain
	],
	0,
	[qr/.*/s],
	[qr/^$/],
	'plain dump restores with psql without errors');

$node->safe_psql('postgres', 'CREATE DATABASE restored_custom');
$node->command_checks_all(
	[ 'pg_restore', '--exit-on-error', '-d', 'restored_custom', $custom ],
	0, [qr/^$/], [qr/^$/],
	'custom dump restores with pg_restore without errors');

foreach my $db ('restored_plain', 'restored_custom')
{
	is(rows_of($node, db => $db),
		$src_rows, "$db: every row comes back exactly as saved");
	is($node->safe_psql($db, $summary_sql),
		$expected_summary, "$db: states and bookkeeping as saved");

	# The guard came back with the table: acked rows stay acked.
	my ($ret, $stdout, $stderr) = $node->psql($db,
		q{UPDATE delivery_outbox SET delivery_state = 'pending' WHERE id = 3},
		extra_params => [ '-v', 'VERBOSITY=sqlstate' ]);
	isnt($ret, 0, "$db: illegal transition still rejected");
	like($stderr, qr/ERROR:\s+23514/, "$db: ... with SQLSTATE 23514");

	# The sequence is past the highest id: a new enqueue neither collides
	# nor reuses an id.
	($ret, $stdout, $stderr) = $node->psql($db,
		q{SELECT outbox_enqueue('agent:new', 'work', '\x09'::bytea)});
	is($ret, 0, "$db: enqueue after restore succeeds")
	  or diag $stderr;
	cmp_ok($stdout, '>', $src_max, "$db: new id is past the highest id");
	is($stdout, '9',
		"$db: sequence position is the source's (id 8 stays a gap)");

	# The restored rows keep moving through the state machine.
	is( $node->safe_psql(
			$db,
			q{SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox_claim(10)}
		),
		'1,4,7,9',
		"$db: restored pending rows are claimable");
	is($node->safe_psql($db, q{SELECT outbox_ack(ARRAY[2, 4]::bigint[])}),
		'2', "$db: restored delivered rows are ackable");
	is( $node->safe_psql(
			$db, q{SELECT delivery_attempts FROM delivery_outbox WHERE id = 4}),
		'2',
		"$db: the released row's attempts continue from the saved count");
}

# The source is untouched by all this.
is(rows_of($node, db => 'src'), $src_rows, 'source rows unchanged');

$node->stop;

done_testing();
