
# Copyright (c) 2026, delivery_outbox developers

# t/009_dump_schema_inflight.pl
#
# What t/001 leaves out about dumps:
#
# - the extension in a schema of its own: the dump restores the rows into
#   that schema's table, the sequence past the highest id, and the functions
#   work there with the schema off search_path;
# - a dump taken while relays hold claims (and a producer an enqueue) in
#   open transactions: the dump is a snapshot of what was committed, so the
#   claimed rows come back pending with the attempts they had, the
#   uncommitted row does not come back, and neither blocks the dump;
# - a payload larger than delivery_outbox.max_payload_size (as README says,
#   a restore needs the limit at least as large as the largest payload):
#   with the default limit the restore stops with 54000 naming the limit,
#   and with the limit raised for the restoring session it restores exactly.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $node = outbox_node('main', databases => ['src']);

my $tempdir = PostgreSQL::Test::Utils::tempdir;

$node->safe_psql(
	'src', q{
CREATE SCHEMA outbox;
CREATE EXTENSION delivery_outbox SCHEMA outbox;
SET search_path = outbox;
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:a', 'work', '\x02', 'tenant-1');
SELECT outbox_enqueue('agent:b', 'work', '\x03');
SELECT outbox_enqueue('agent:b', 'work', '\x04');
SELECT outbox_enqueue('agent:c', 'work', '\x05');
SELECT count(*) FROM outbox_claim(1, 'agent:b');
SELECT outbox_ack(3);
SELECT outbox_release(ARRAY(SELECT id FROM outbox_claim(10, 'agent:a')));
});

my $committed = rows_of($node, db => 'src', table => 'outbox.delivery_outbox');

# Open transactions while pg_dump runs: a relay's claims, a producer's
# enqueue.
my $relay = $node->background_psql('src');
$relay->query_safe('BEGIN');
is( $relay->query_safe(
		q{SELECT string_agg(id::text, ',') FROM outbox.outbox_claim(10)}),
	'1,2,4,5',
	'a relay holds every pending row claimed, uncommitted');
my $producer = $node->background_psql('src');
$producer->query_safe('BEGIN');
is( $producer->query_safe(
		q{SELECT outbox.outbox_enqueue('agent:d', 'work', '\x06')}),
	'6', 'a producer holds an uncommitted enqueue');

my $dump = "$tempdir/src.dump";
$node->command_checks_all(
	[ 'pg_dump', '-Fc', '-f', $dump, '-d', 'src' ],
	0, [qr/^$/], [qr/^$/],
	'pg_dump runs while claims and an enqueue are uncommitted');
$relay->query_safe('COMMIT');
$producer->query_safe('COMMIT');
$relay->quit;
$producer->quit;

$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_checks_all(
	[ 'pg_restore', '--exit-on-error', '-d', 'restored', $dump ],
	0, [qr/^$/], [qr/^$/], 'the dump restores without errors');

is(rows_of($node, db => 'restored', table => 'outbox.delivery_outbox'),
	$committed,
	'restored: exactly the rows committed when the dump started, in schema outbox');
is( $node->safe_psql(
		'restored', q{
SELECT string_agg(id || ':' || delivery_state || ':' || delivery_attempts,
                  ',' ORDER BY id)
FROM outbox.delivery_outbox}),
	'1:pending:1,2:pending:1,3:acked:1,4:pending:0,5:pending:0',
	'restored: the rows claimed in flight are pending with their attempts; no uncommitted row');
is( $node->safe_psql(
		'restored',
		q{SELECT extnamespace::regnamespace FROM pg_extension
		  WHERE extname = 'delivery_outbox'}),
	'outbox',
	'restored: the extension is in schema outbox');
is( $node->safe_psql(
		'restored',
		q{SELECT count(*) FROM pg_class WHERE relname = 'delivery_outbox'}),
	'1', 'restored: one outbox table, no copy elsewhere');

# The functions work, with the schema off search_path; the sequence is past
# the highest id of the source (the uncommitted enqueue took 6).
is( $node->safe_psql(
		'restored',
		q{SELECT outbox.outbox_enqueue('agent:e', 'work', '\x07')}),
	'7', 'restored: enqueue continues the source\'s sequence');
is( $node->safe_psql(
		'restored', q{
SELECT string_agg(id || ':' || delivery_attempts, ',' ORDER BY id)
FROM outbox.outbox_claim(10)}),
	'1:2,2:2,4:1,5:1,7:1',
	'restored: every pending row is claimable');
is( $node->safe_psql(
		'restored',
		q{SELECT outbox.outbox_ack(ARRAY[1, 2, 4, 5, 7]::bigint[])}),
	'5', 'restored: and ackable');
my ($ret, $stdout, $stderr) = $node->psql('restored',
	q{UPDATE outbox.delivery_outbox SET delivery_state = 'pending' WHERE id = 3},
	extra_params => [ '-v', 'VERBOSITY=sqlstate' ]);
like($stderr, qr/ERROR:\s+23514/, 'restored: the state guard is in force');

#
# A payload over the default limit
#
$node->safe_psql('postgres', 'CREATE DATABASE big');
$node->safe_psql(
	'big', q{
CREATE EXTENSION delivery_outbox;
SET delivery_outbox.max_payload_size = '4MB';
SELECT outbox_enqueue('agent:big', 'work',
       (SELECT decode(string_agg(md5(g::text), ''), 'hex')
        FROM generate_series(1, 100000) g));
SELECT outbox_enqueue('agent:small', 'work', '\x01');
});
my $big_rows = $node->safe_psql('big',
	q{SELECT id, length(payload), md5(payload) FROM delivery_outbox ORDER BY id});
like($big_rows, qr/^1\|1600000\|/, 'a 1.6MB payload, over the 1MB default');

my $big_dump = "$tempdir/big.dump";
$node->command_ok([ 'pg_dump', '-Fc', '-f', $big_dump, '-d', 'big' ],
	'pg_dump of the big payload');
$node->safe_psql('postgres', 'CREATE DATABASE big_default');
$node->command_checks_all(
	[ 'pg_restore', '--exit-on-error', '-d', 'big_default', $big_dump ],
	1,
	[qr/^$/],
	[
		qr/outbox payload of 1600000 bytes exceeds the limit of 1048576 bytes/
	],
	'with the default limit the restore stops, naming sizes and limit');

$node->safe_psql('postgres', 'CREATE DATABASE big_raised');
{
	local $ENV{PGOPTIONS} = '-c delivery_outbox.max_payload_size=2MB';
	$node->command_checks_all(
		[ 'pg_restore', '--exit-on-error', '-d', 'big_raised', $big_dump ],
		0, [qr/^$/], [qr/^$/],
		'with the limit raised for the restore, it restores');
}
is( $node->safe_psql(
		'big_raised',
		q{SELECT id, length(payload), md5(payload) FROM delivery_outbox ORDER BY id}
	),
	$big_rows,
	'... every payload exactly');

$node->stop;

done_testing();
