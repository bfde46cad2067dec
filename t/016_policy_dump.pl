
# Copyright (c) 2026, delivery_outbox developers

# t/016_policy_dump.pl
#
# The delivery policy (1.2) across pg_dump + restore, and the dead-letter
# tables' lifecycle.
#
# Dump and restore ("src", restored from a plain dump with psql and from a
# custom-format dump with pg_restore, as t/001 does): three outboxes, the
# default one, one made by outbox_create() and a seed-shaped table taken
# over by outbox_attach() (timestamp columns, a channel of its own), each
# with max_attempts, backoff_base, backoff_max and ttl set, rows in every
# state (pending, delivered, acked, released with an error, backed off),
# rows scheduled for later (not_before in the future), rows with an
# expires_at and with a dedup_key, an id gap, and dead letters of every
# reason in each _dead table (outbox_reject, max_attempts on release, the
# expiry sweep by call).  After the restore:
#
# - every outbox row is identical (all 14 columns), every dead letter is
#   identical (all 16 columns);
# - the registry rows (settings, channel, disabled triggers, and "dead"
#   naming the restored dead tables), delivery_outbox_tables and every
#   outbox's sequence position are identical;
# - the policy works on the restored data: outbox_redrive of a restored
#   dead letter puts it back; a dedup_key a restored row holds is still
#   taken (outbox_enqueue returns that row's id and inserts nothing);
#   outbox_reject writes into the restored dead table; the restored
#   max_attempts dead-letters a row at its third delivery.
#
# The dead tables' lifecycle ("life", served by the worker):
#
# - outbox_detach leaves the dead table and its rows; outbox_attach of the
#   same table takes it up again (the same table), and outbox_redrive
#   brings its old rows back;
# - DROP TABLE of an outbox leaves its dead table and its rows; outbox_create
#   of the same name takes it up again;
# - a relation of the _dead name that is not a free dead table (a view, a
#   table of another shape, another outbox's dead table under that name)
#   makes outbox_create / outbox_attach fail with 42P07 and change nothing;
# - dropping a non-default outbox's dead table makes outbox_reject on it
#   fail with 55000, while the other outboxes keep working: their rejects,
#   and the background worker's reclaim and expiry sweep of them; the worker
#   logs a WARNING naming the broken outbox and leaves its rows alone.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $node = outbox_node(
	'main',
	preload => 1,
	conf => q{
delivery_outbox.database = 'life'
delivery_outbox.sweep_interval = '200ms'
delivery_outbox.reclaim_after = -1
delivery_outbox.retain_acked = -1
},
	databases => [ 'src', 'life' ],
	extension => [ 'src', 'life' ]);

# The SQLSTATE of the error $sql raises in $db, or '' when it succeeds.
sub sqlstate_of
{
	my ($db, $sql) = @_;
	my ($ret, $stdout, $stderr) = $node->psql($db, $sql,
		extra_params => [ '-v', 'VERBOSITY=sqlstate', '-v', 'ON_ERROR_STOP=1' ]);
	return '' if $ret == 0;
	return $stderr =~ /ERROR:\s+([0-9A-Z]{5})/ ? $1 : "unparsed: $stderr";
}

# The seed's migration 027 (table, indexes) and 028 (NOTIFY trigger) in
# schema $s, with one pending row, as t/014_outboxes.pl and
# sql/outboxes_seed.sql build it.
sub seed_table_sql
{
	my ($s) = @_;
	return qq{
CREATE SCHEMA $s;
CREATE TABLE $s.delivery_outbox (
    id BIGSERIAL PRIMARY KEY,
    recipient TEXT NOT NULL,
    kind TEXT NOT NULL,
    tenant_id TEXT NULL,
    payload BYTEA NOT NULL,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMP NOT NULL,
    delivered_at TIMESTAMP NULL,
    acked_at TIMESTAMP NULL);
CREATE INDEX idx_${s}_recipient_open
    ON $s.delivery_outbox (recipient, id) WHERE delivery_state <> 'acked';
CREATE FUNCTION $s.delivery_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS
  \$\$ BEGIN PERFORM pg_notify('delivery_outbox', NEW.id::text); RETURN NEW; END \$\$;
CREATE TRIGGER delivery_outbox_notify_trg AFTER INSERT ON $s.delivery_outbox
  FOR EACH ROW EXECUTE FUNCTION $s.delivery_outbox_notify();
INSERT INTO $s.delivery_outbox (recipient, kind, payload, delivery_state,
                                delivery_attempts, created_at)
VALUES ('agent:seed', 'work', '\\x01', 'pending', 0, now() AT TIME ZONE 'UTC');
};
}

my $outbox_cols =
  'id, recipient, kind, tenant_id, payload, delivery_state, delivery_attempts, '
  . 'created_at, delivered_at, acked_at, not_before, expires_at, dedup_key, last_error';
my $dead_cols = "$outbox_cols, dead_at, dead_reason";

# Every column of every row, one line per row in id order.
sub outbox_rows
{
	my ($db, $o) = @_;
	return $node->safe_psql($db,
		"SELECT $outbox_cols FROM $o ORDER BY id");
}

sub dead_rows
{
	my ($db, $dead) = @_;
	return $node->safe_psql($db, "SELECT $dead_cols FROM $dead ORDER BY id");
}

# The columns of a table, by name, in order.
sub columns_of
{
	my ($db, $t) = @_;
	return $node->safe_psql(
		$db, qq{
SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
 WHERE attrelid = '$t'::regclass AND attnum > 0 AND NOT attisdropped});
}

###########################################################################
# Part 1: dump and restore
###########################################################################

$node->safe_psql(
	'src', seed_table_sql('app') . q{
CREATE SCHEMA tenant_a;
SELECT outbox_create('tenant_a');
SELECT outbox_attach('app.delivery_outbox', channel => 'app_chan');
});

my %dead_of = (
	'delivery_outbox' => 'delivery_outbox_dead',
	'tenant_a.delivery_outbox' => 'tenant_a.delivery_outbox_dead',
	'app.delivery_outbox' => 'app.delivery_outbox_dead');
my @outboxes = sort keys %dead_of;

# Each row has a recipient of its own, so that a per-recipient claim picks
# exactly that row.
for my $o (@outboxes)
{
	$node->safe_psql(
		'src', qq{
SELECT outbox_configure('$o', max_attempts => 3, backoff_base => '2 s',
                        backoff_max => '1 min', ttl => '1 day');
SELECT outbox_enqueue('agent:pending', 'work', '\\x00ff00', 'tenant-1',
                      dedup_key => 'k-pending', outbox => '$o');
SELECT outbox_enqueue('agent:delivered', 'work', '\\x02',
                      expires_at => now() + interval '1 hour',
                      dedup_key => 'k-delivered', outbox => '$o');
SELECT count(*) FROM outbox_claim(1, 'agent:delivered', outbox => '$o');
SELECT outbox_enqueue('agent:acked', 'execution_event', '\\x03',
                      dedup_key => 'k-acked', outbox => '$o');
SELECT outbox_ack(id, outbox => '$o') FROM outbox_claim(1, 'agent:acked', outbox => '$o');
SELECT outbox_enqueue('agent:released', 'work', '\\x04', outbox => '$o');
SELECT outbox_release(array_agg(id), retry_after => '0', error => 'busy', outbox => '$o')
  FROM outbox_claim(1, 'agent:released', outbox => '$o');
-- released without retry_after: backed off (not_before from the backoff)
SELECT outbox_enqueue('agent:backoff', 'work', '\\x05', outbox => '$o');
SELECT outbox_release(array_agg(id), outbox => '$o')
  FROM outbox_claim(1, 'agent:backoff', outbox => '$o');
BEGIN;
SELECT outbox_enqueue('agent:gap', 'work', '\\x06', outbox => '$o');
ROLLBACK;
SELECT outbox_enqueue('agent:scheduled', 'work', '\\x07',
                      not_before => now() + interval '1 hour',
                      expires_at => now() + interval '2 hours',
                      dedup_key => 'k-scheduled', outbox => '$o');
SELECT outbox_enqueue('agent:expiring', 'work',
                      (SELECT decode(string_agg(md5(g::text), ''), 'hex')
                         FROM generate_series(1, 200) g),
                      expires_at => now() + interval '1 day', outbox => '$o');
-- dead letters: rejected, out of attempts, expired
SELECT outbox_enqueue('agent:rejected', 'work', '\\x08', 'tenant-2',
                      dedup_key => 'k-rejected', outbox => '$o');
SELECT outbox_reject(array_agg(id), error => 'refused', outbox => '$o')
  FROM outbox_claim(1, 'agent:rejected', outbox => '$o');
SELECT outbox_enqueue('agent:maxed', 'work', '\\x09', dedup_key => 'k-maxed', outbox => '$o');
SELECT outbox_release(array_agg(id), retry_after => '0', error => 'try 1', outbox => '$o')
  FROM outbox_claim(1, 'agent:maxed', outbox => '$o');
SELECT outbox_release(array_agg(id), retry_after => '0', error => 'try 2', outbox => '$o')
  FROM outbox_claim(1, 'agent:maxed', outbox => '$o');
SELECT outbox_release(array_agg(id), retry_after => '0', error => 'try 3', outbox => '$o')
  FROM outbox_claim(1, 'agent:maxed', outbox => '$o');
SELECT outbox_enqueue('agent:expired', 'work', '\\x0a',
                      expires_at => now() - interval '1 second', outbox => '$o');
SELECT outbox_expire(outbox => '$o');
});
}

# What the source holds, so that a mistake in building it shows up here.
my %expected_summary;
for my $o (@outboxes)
{
	my $seed = $o eq 'app.delivery_outbox' ? "agent:seed|pending|0|-|f|-\n" : '';
	$expected_summary{$o} = $seed . join("\n",
		'agent:pending|pending|0|-|f|k-pending',
		'agent:delivered|delivered|1|-|t|k-delivered',
		'agent:acked|acked|1|-|f|k-acked',
		'agent:released|pending|1|now|f|-',
		'agent:backoff|pending|1|later|f|-',
		'agent:scheduled|pending|0|later|t|k-scheduled',
		'agent:expiring|pending|0|-|t|-');
}
my $summary_sql = q{
SELECT string_agg(format('%s|%s|%s|%s|%s|%s', recipient, delivery_state,
                         delivery_attempts,
                         CASE WHEN not_before IS NULL THEN '-'
                              WHEN not_before > coalesce(delivered_at, created_at)
                                                + interval '0.9 s' THEN 'later'
                              ELSE 'now' END,
                         expires_at IS NOT NULL,
                         coalesce(dedup_key, '-')), E'\n' ORDER BY id)
  FROM TABLE};
my $dead_summary_sql = q{
SELECT string_agg(format('%s|%s|%s|%s|%s|%s', recipient, delivery_state,
                         delivery_attempts, dead_reason, coalesce(last_error, '-'),
                         coalesce(dedup_key, '-')), E'\n' ORDER BY id)
  FROM TABLE};
my $expected_dead = join("\n",
	'agent:rejected|delivered|1|rejected|refused|k-rejected',
	'agent:maxed|delivered|3|max_attempts|try 3|k-maxed',
	'agent:expired|pending|0|expired|-|-');
for my $o (@outboxes)
{
	is($node->safe_psql('src', $summary_sql =~ s/TABLE/$o/r),
		$expected_summary{$o}, "src $o: rows in the states under test");
	is($node->safe_psql('src', $dead_summary_sql =~ s/TABLE/$dead_of{$o}/r),
		$expected_dead, "src $dead_of{$o}: a dead letter of each reason");
	is(columns_of('src', $o), join(',', split /, /, $outbox_cols),
		"src $o: the 14 columns");
	is(columns_of('src', $dead_of{$o}), join(',', split /, /, $dead_cols),
		"src $dead_of{$o}: the 16 columns");
}

my $registry_sql = q{
SELECT outbox::text, origin, channel, disabled_triggers, max_attempts,
       backoff_base, backoff_max, ttl, dead::text
  FROM delivery_outbox_registry ORDER BY outbox::text};
my $tables_sql = q{
SELECT outbox::text, origin, channel, channel_is_default, max_attempts,
       backoff_base, backoff_max, ttl, dead_table::text
  FROM delivery_outbox_tables ORDER BY outbox::text};
# 'is_called' and the last value of every outbox's id sequence
my $seq_sql = join("\nUNION ALL\n",
	map {
		"SELECT '$_', last_value, is_called FROM "
		  . $node->safe_psql('src', "SELECT pg_get_serial_sequence('$_', 'id')")
	} @outboxes);

is( $node->safe_psql('src', $registry_sql),
	join("\n",
		'app.delivery_outbox|attached|app_chan|{delivery_outbox_notify_trg}|3|00:00:02|00:01:00|1 day|app.delivery_outbox_dead',
		'delivery_outbox|default||{}|3|00:00:02|00:01:00|1 day|delivery_outbox_dead',
		'tenant_a.delivery_outbox|created||{}|3|00:00:02|00:01:00|1 day|tenant_a.delivery_outbox_dead'),
	'src: the registry holds every outbox with its settings and dead table');

my %src_rows = map { $_ => outbox_rows('src', $_) } @outboxes;
my %src_dead = map { $_ => dead_rows('src', $dead_of{$_}) } @outboxes;
my $src_registry = $node->safe_psql('src', $registry_sql);
my $src_tables = $node->safe_psql('src', $tables_sql);
my $src_seq = $node->safe_psql('src', $seq_sql);

my $tempdir = PostgreSQL::Test::Utils::tempdir;
my $plain = "$tempdir/policy.sql";
my $custom = "$tempdir/policy.dump";
$node->command_checks_all(
	[ 'pg_dump', '-Fp', '-f', $plain, '-d', 'src' ],
	0, [qr/^$/], [qr/^$/], 'pg_dump -Fp runs without errors or warnings');
$node->command_checks_all(
	[ 'pg_dump', '-Fc', '-f', $custom, '-d', 'src' ],
	0, [qr/^$/], [qr/^$/], 'pg_dump -Fc runs without errors or warnings');

my $dump_text = slurp_file($plain);
like($dump_text, qr/^CREATE EXTENSION IF NOT EXISTS delivery_outbox /m,
	'the dump creates the extension');
like($dump_text, qr/^COPY public\.delivery_outbox_dead \(/m,
	'the dump carries the default outbox\'s dead letters');
like($dump_text, qr/^COPY tenant_a\.delivery_outbox_dead \(/m,
	'the dump carries the created outbox\'s dead letters');
like($dump_text, qr/^COPY app\.delivery_outbox_dead \(/m,
	'the dump carries the attached outbox\'s dead letters');

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

for my $db ('restored_plain', 'restored_custom')
{
	for my $o (@outboxes)
	{
		is(outbox_rows($db, $o), $src_rows{$o},
			"$db $o: every row identical, all 14 columns");
		is(dead_rows($db, $dead_of{$o}), $src_dead{$o},
			"$db $dead_of{$o}: every dead letter identical, all 16 columns");
	}
	is($node->safe_psql($db, $registry_sql),
		$src_registry, "$db: the registry rows (settings, channel, dead) identical");
	is( $node->safe_psql(
			$db, q{
SELECT string_agg(format('%s=%s', outbox, dead), ',' ORDER BY outbox::text)
  FROM delivery_outbox_registry
 WHERE dead IS DISTINCT FROM to_regclass(outbox::text || '_dead')}),
		'',
		"$db: the registry's dead points at the restored dead tables");
	is($node->safe_psql($db, $tables_sql),
		$src_tables, "$db: delivery_outbox_tables identical");
	is($node->safe_psql($db, $seq_sql),
		$src_seq, "$db: every outbox's sequence position identical");

	for my $o (@outboxes)
	{
		my $dead = $dead_of{$o};
		my $stats = $node->safe_psql($db,
			"SELECT dead FROM outbox_stats(outbox => '$o')");
		is($stats, '3', "$db $o: outbox_stats counts the restored dead letters");

		# a key a restored row holds is still taken, whatever its state
		for my $k ('pending', 'acked', 'scheduled')
		{
			my $holder = $node->safe_psql($db,
				"SELECT id FROM $o WHERE dedup_key = 'k-$k'");
			is( $node->safe_psql(
					$db, qq{
SELECT outbox_enqueue('agent:$k', 'work', '\\xee', dedup_key => 'k-$k', outbox => '$o')}),
				$holder,
				"$db $o: enqueue with k-$k returns the restored holder's id");
		}
		is($node->safe_psql($db, "SELECT count(*) FROM $o WHERE payload = '\\xee'"),
			'0', "$db $o: ... and inserts nothing");

		# the next id is past the source's sequence position
		my ($last) = $node->safe_psql($db,
			"SELECT last_value FROM " . $node->safe_psql($db,
				"SELECT pg_get_serial_sequence('$o', 'id')"));
		my $new = $node->safe_psql($db,
			"SELECT outbox_enqueue('agent:new', 'work', '\\x0b', outbox => '$o')");
		cmp_ok($new, '>', $last, "$db $o: a new enqueue takes an id past the restored ones");

		# redrive of a restored dead letter puts it back, key and all
		my $rejected = $node->safe_psql($db,
			"SELECT id FROM $dead WHERE dead_reason = 'rejected'");
		is( $node->safe_psql(
				$db, "SELECT outbox_redrive(ARRAY[$rejected]::bigint[], outbox => '$o')"),
			'1', "$db $o: outbox_redrive of a restored dead letter puts it back");
		is( $node->safe_psql(
				$db, qq{
SELECT format('%s|%s|%s|%s|%s', recipient, delivery_state, delivery_attempts,
              dedup_key, last_error) FROM $o WHERE id = $rejected}),
			'agent:rejected|pending|0|k-rejected|refused',
			"$db $o: ... as a pending row with its id, key and last error");
		is($node->safe_psql($db, "SELECT count(*) FROM $dead WHERE id = $rejected"),
			'0', "$db $o: ... and it left the restored dead table");
		is( $node->safe_psql(
				$db, qq{
SELECT outbox_enqueue('agent:rejected', 'work', '\\xee', dedup_key => 'k-rejected', outbox => '$o')}),
			$rejected,
			"$db $o: ... and its key is taken again");
		is( $node->safe_psql(
				$db, "SELECT string_agg(id::text, ',') FROM outbox_claim(5, 'agent:rejected', outbox => '$o')"),
			$rejected, "$db $o: ... and it is claimable");

		# reject on a restored outbox writes into its restored dead table
		my $released = $node->safe_psql($db,
			"SELECT id FROM $o WHERE recipient = 'agent:released'");
		is( $node->safe_psql(
				$db, qq{
SELECT outbox_reject(array_agg(id), error => 'after restore', outbox => '$o')
  FROM outbox_claim(1, 'agent:released', outbox => '$o')}),
			'1', "$db $o: outbox_reject of a restored row");
		is( $node->safe_psql(
				$db, qq{
SELECT format('%s|%s|%s|%s', delivery_state, delivery_attempts, dead_reason, last_error)
  FROM $dead WHERE id = $released}),
			'delivered|2|rejected|after restore',
			"$db $o: ... lands in the restored dead table $dead");

		# the restored max_attempts (3) is in force: the delivered row
		# (attempt 1) dies when it comes back after its third delivery
		my $delivered = $node->safe_psql($db,
			"SELECT id FROM $o WHERE recipient = 'agent:delivered'");
		$node->safe_psql(
			$db, qq{
SELECT outbox_release(ARRAY[$delivered]::bigint[], retry_after => '0', outbox => '$o');
SELECT count(*) FROM outbox_claim(1, 'agent:delivered', outbox => '$o');
SELECT outbox_release(ARRAY[$delivered]::bigint[], retry_after => '0', outbox => '$o');
SELECT count(*) FROM outbox_claim(1, 'agent:delivered', outbox => '$o');
SELECT outbox_release(ARRAY[$delivered]::bigint[], retry_after => '0', error => 'x', outbox => '$o');
});
		is( $node->safe_psql(
				$db, qq{
SELECT format('%s|%s|%s', delivery_attempts, dead_reason, dedup_key)
  FROM $dead WHERE id = $delivered}),
			'3|max_attempts|k-delivered',
			"$db $o: the restored max_attempts dead-letters at the third delivery");
	}
}

is(join("\n", map { outbox_rows('src', $_) . dead_rows('src', $dead_of{$_}) } @outboxes),
	join("\n", map { $src_rows{$_} . $src_dead{$_} } @outboxes),
	'the source is untouched');

###########################################################################
# Part 2: the dead tables' lifecycle (database "life", served by the worker)
###########################################################################

wait_for_worker($node, 'life');

# --- outbox_detach leaves the dead table; outbox_attach takes it up -------
$node->safe_psql(
	'life', seed_table_sql('att') . q{
SELECT outbox_attach('att.delivery_outbox');
SELECT outbox_configure('att.delivery_outbox', max_attempts => 3);
SELECT outbox_enqueue('agent:d1', 'work', '\x11', dedup_key => 'k-d1',
                      outbox => 'att.delivery_outbox');
SELECT outbox_enqueue('agent:d2', 'work', '\x12', outbox => 'att.delivery_outbox');
SELECT outbox_reject(array_agg(id ORDER BY id), error => 'no', outbox => 'att.delivery_outbox')
  FROM outbox_claim(10, outbox => 'att.delivery_outbox') WHERE recipient LIKE 'agent:d%';
});
my $att_dead_oid = $node->safe_psql('life',
	"SELECT dead::oid FROM delivery_outbox_registry WHERE outbox = 'att.delivery_outbox'::regclass");
my $att_dead_rows = dead_rows('life', 'att.delivery_outbox_dead');
is($node->safe_psql('life', 'SELECT count(*) FROM att.delivery_outbox_dead'),
	'2', 'att: two dead letters before the detach');

$node->safe_psql('life', "SELECT outbox_detach('att.delivery_outbox')");
is( $node->safe_psql(
		'life', q{
SELECT count(*) FROM delivery_outbox_registry WHERE outbox = 'att.delivery_outbox'::regclass}),
	'0', 'outbox_detach: the outbox is no longer registered');
is( $node->safe_psql('life', "SELECT to_regclass('att.delivery_outbox_dead')::oid"),
	$att_dead_oid, 'outbox_detach leaves the dead table');
is(dead_rows('life', 'att.delivery_outbox_dead'),
	$att_dead_rows, 'outbox_detach leaves the dead table\'s rows');

$node->safe_psql('life', "SELECT outbox_attach('att.delivery_outbox')");
is( $node->safe_psql(
		'life', q{
SELECT dead::oid FROM delivery_outbox_registry WHERE outbox = 'att.delivery_outbox'::regclass}),
	$att_dead_oid,
	'outbox_attach of the same table takes up the same dead table');
is( $node->safe_psql('life', q{SELECT dead_table::text FROM delivery_outbox_tables
                               WHERE outbox = 'att.delivery_outbox'::regclass}),
	'att.delivery_outbox_dead', '... and delivery_outbox_tables names it');
is(dead_rows('life', 'att.delivery_outbox_dead'),
	$att_dead_rows, '... its old rows still there');
is($node->safe_psql('life', "SELECT dead FROM outbox_stats(outbox => 'att.delivery_outbox')"),
	'2', '... and counted by outbox_stats');
my ($att_d1, $att_d2) = split /\n/, $node->safe_psql('life',
	'SELECT id FROM att.delivery_outbox_dead ORDER BY id');
is( $node->safe_psql(
		'life',
		"SELECT outbox_redrive(ARRAY[$att_d1, $att_d2]::bigint[], outbox => 'att.delivery_outbox')"),
	'2', 'outbox_redrive brings the old dead letters back');
is( $node->safe_psql(
		'life', qq{
SELECT string_agg(format('%s|%s|%s|%s', id, delivery_state, delivery_attempts,
                         coalesce(dedup_key, '-')), ',' ORDER BY id)
  FROM att.delivery_outbox WHERE id IN ($att_d1, $att_d2)}),
	"$att_d1|pending|0|k-d1,$att_d2|pending|0|-",
	'... as pending rows of the re-attached outbox, with their keys');
is($node->safe_psql('life', 'SELECT count(*) FROM att.delivery_outbox_dead'),
	'0', '... and the dead table is empty');

# --- DROP TABLE of an outbox leaves its dead table ------------------------
$node->safe_psql(
	'life', q{
CREATE SCHEMA tenant_x;
SELECT outbox_create('tenant_x');
SELECT outbox_enqueue('agent:x', 'work', '\x21', dedup_key => 'k-x',
                      outbox => 'tenant_x.delivery_outbox');
SELECT outbox_reject(array_agg(id), error => 'gone', outbox => 'tenant_x.delivery_outbox')
  FROM outbox_claim(1, outbox => 'tenant_x.delivery_outbox');
});
my $x_dead_oid = $node->safe_psql('life',
	"SELECT to_regclass('tenant_x.delivery_outbox_dead')::oid");
my $x_dead_rows = dead_rows('life', 'tenant_x.delivery_outbox_dead');
is($node->safe_psql('life', 'SELECT count(*) FROM tenant_x.delivery_outbox_dead'),
	'1', 'tenant_x: one dead letter before DROP TABLE');
$node->safe_psql('life', 'DROP TABLE tenant_x.delivery_outbox');
is( $node->safe_psql(
		'life', q{
SELECT count(*) FROM delivery_outbox_registry WHERE outbox::text LIKE 'tenant_x.%'}),
	'0', 'DROP TABLE: the outbox is gone from the registry');
is($node->safe_psql('life', "SELECT to_regclass('tenant_x.delivery_outbox_dead')::oid"),
	$x_dead_oid, 'DROP TABLE of an outbox leaves its dead table');
is(dead_rows('life', 'tenant_x.delivery_outbox_dead'),
	$x_dead_rows, '... and its rows');
# and outbox_create of the same name takes it up again
$node->safe_psql('life', "SELECT outbox_create('tenant_x')");
is( $node->safe_psql(
		'life', q{
SELECT dead::oid FROM delivery_outbox_registry WHERE outbox = 'tenant_x.delivery_outbox'::regclass}),
	$x_dead_oid, 'outbox_create of the same name takes up the left dead table');
my $x_id = $node->safe_psql('life', 'SELECT id FROM tenant_x.delivery_outbox_dead');
is( $node->safe_psql(
		'life',
		"SELECT outbox_redrive(ARRAY[$x_id]::bigint[], outbox => 'tenant_x.delivery_outbox')"),
	'1', '... and its letter can be redriven into the new outbox');

# --- a relation of the _dead name that is not a free dead table: 42P07 ----
my $registry_before = $node->safe_psql('life', $registry_sql);
$node->safe_psql(
	'life', q{
CREATE SCHEMA tenant_v;
CREATE VIEW tenant_v.delivery_outbox_dead AS SELECT 1::bigint AS id;
CREATE SCHEMA tenant_s;
CREATE TABLE tenant_s.delivery_outbox_dead (id bigint PRIMARY KEY, note text);
INSERT INTO tenant_s.delivery_outbox_dead VALUES (1, 'mine');
});
is( sqlstate_of('life', "SELECT outbox_create('tenant_v')"),
	'42P07', 'outbox_create with a view of the _dead name: 42P07');
is( sqlstate_of('life', "SELECT outbox_create('tenant_s')"),
	'42P07', 'outbox_create with a table of another shape of the _dead name: 42P07');
is( $node->safe_psql(
		'life', q{
SELECT to_regclass('tenant_v.delivery_outbox') IS NULL,
       to_regclass('tenant_s.delivery_outbox') IS NULL,
       pg_get_viewdef('tenant_v.delivery_outbox_dead'::regclass),
       (SELECT string_agg(format('%s:%s', id, note), ',') FROM tenant_s.delivery_outbox_dead)}),
	"t|t| SELECT (1)::bigint AS id;|1:mine",
	'... and nothing changed: no outbox table, the view and the table as they were');
is($node->safe_psql('life', $registry_sql),
	$registry_before, '... and the registry is unchanged');

# outbox_attach, with a table of another shape under the _dead name
$node->safe_psql(
	'life', seed_table_sql('att2') . q{
CREATE TABLE att2.delivery_outbox_dead (id bigint PRIMARY KEY, note text);
});
my $att2_state_sql = q{
SELECT (SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
         WHERE attrelid = 'att2.delivery_outbox'::regclass AND attnum > 0 AND NOT attisdropped),
       (SELECT string_agg(tgname || '=' || tgenabled::text, ',' ORDER BY tgname)
          FROM pg_trigger WHERE tgrelid = 'att2.delivery_outbox'::regclass AND NOT tgisinternal),
       (SELECT string_agg(indexrelid::regclass::text, ',' ORDER BY indexrelid::regclass::text)
          FROM pg_index WHERE indrelid = 'att2.delivery_outbox'::regclass),
       (SELECT string_agg(o::text, ',') FROM att2.delivery_outbox o)};
my $att2_before = $node->safe_psql('life', $att2_state_sql);
is( sqlstate_of('life', "SELECT outbox_attach('att2.delivery_outbox')"),
	'42P07', 'outbox_attach with a table of another shape of the _dead name: 42P07');
is($node->safe_psql('life', $att2_state_sql),
	$att2_before,
	'... and the table is unchanged (columns, triggers, indexes, rows)');
is($node->safe_psql('life', $registry_sql),
	$registry_before, '... and the registry is unchanged');

# another outbox's dead table under the _dead name (renamed: it stays that
# outbox's) is not free either
$node->safe_psql(
	'life', q{
CREATE SCHEMA tenant_r;
SELECT outbox_create('tenant_r', 'one');
ALTER TABLE tenant_r.one_dead RENAME TO two_dead;
});
$registry_before = $node->safe_psql('life', $registry_sql);
is( sqlstate_of('life', "SELECT outbox_create('tenant_r', 'two')"),
	'42P07', 'outbox_create where the _dead name is another outbox\'s dead table: 42P07');
is( $node->safe_psql(
		'life', q{
SELECT to_regclass('tenant_r.two') IS NULL,
       (SELECT dead::text FROM delivery_outbox_registry WHERE outbox = 'tenant_r.one'::regclass)}),
	't|tenant_r.two_dead',
	'... nothing made, and the renamed table is still the first outbox\'s');
is($node->safe_psql('life', $registry_sql),
	$registry_before, '... and the registry is unchanged');

# --- a dropped dead table: 55000 on that outbox, the others go on ---------
$node->safe_psql(
	'life', q{
CREATE SCHEMA tenant_k;
SELECT outbox_create('tenant_k');
SELECT outbox_configure('tenant_k.delivery_outbox', max_attempts => 3);
CREATE SCHEMA tenant_w;
SELECT outbox_create('tenant_w', channel => 'tenant_w_chan');
SELECT outbox_configure('tenant_w.delivery_outbox', max_attempts => 3);
SELECT outbox_enqueue('agent:k', 'work', '\x31', outbox => 'tenant_k.delivery_outbox')
  FROM generate_series(1, 2);
SELECT count(*) FROM outbox_claim(10, outbox => 'tenant_k.delivery_outbox');
SELECT outbox_enqueue('agent:w', 'work', '\x32', outbox => 'tenant_w.delivery_outbox')
  FROM generate_series(1, 3);
SELECT count(*) FROM outbox_claim(10, outbox => 'tenant_w.delivery_outbox');
SELECT outbox_enqueue('agent:p', 'work', '\x33') FROM generate_series(1, 2);
SELECT count(*) FROM outbox_claim(10, 'agent:p');
DROP TABLE tenant_k.delivery_outbox_dead;
});
my ($k1) = split /\n/,
  $node->safe_psql('life', 'SELECT id FROM tenant_k.delivery_outbox ORDER BY id');
is( sqlstate_of(
		'life',
		"SELECT outbox_reject(ARRAY[$k1]::bigint[], outbox => 'tenant_k.delivery_outbox')"),
	'55000', 'outbox_reject on an outbox whose dead table was dropped: 55000');
my ($ret, $stdout, $stderr) = $node->psql('life',
	"SELECT outbox_reject(ARRAY[$k1]::bigint[], outbox => 'tenant_k.delivery_outbox')");
like($stderr, qr/outbox tenant_k\.delivery_outbox has no dead-letter table/,
	'... naming the outbox');
is( $node->safe_psql('life',
		"SELECT string_agg(delivery_state, ',' ORDER BY id) FROM tenant_k.delivery_outbox"),
	'delivered,delivered', '... and its rows are unchanged');

my ($w1, $w2, $w3) = split /\n/,
  $node->safe_psql('life', 'SELECT id FROM tenant_w.delivery_outbox ORDER BY id');
is( $node->safe_psql(
		'life',
		"SELECT outbox_reject(ARRAY[$w1]::bigint[], 'other', outbox => 'tenant_w.delivery_outbox')"),
	'1', 'another outbox\'s reject still works');
is( $node->safe_psql('life',
		"SELECT dead_reason FROM tenant_w.delivery_outbox_dead WHERE id = $w1"),
	'rejected', '... into its own dead table');
my ($p1) = split /\n/,
  $node->safe_psql('life', "SELECT id FROM delivery_outbox WHERE recipient = 'agent:p' ORDER BY id");
is( $node->safe_psql('life', "SELECT outbox_reject(ARRAY[$p1]::bigint[], 'default')"),
	'1', 'the default outbox\'s reject still works');
my $e = $node->safe_psql('life', q{
SELECT outbox_enqueue('agent:w2', 'work', '\x34', outbox => 'tenant_w.delivery_outbox')});
is( $node->safe_psql('life',
		"SELECT string_agg(id::text, ',') FROM outbox_claim(10, 'agent:w2', outbox => 'tenant_w.delivery_outbox')"),
	$e, 'another outbox still enqueues and claims');

# The worker: reclaim on, and a row past its expires_at in tenant_w.  It
# reclaims (and expires) the other outboxes' rows, skips tenant_k with a
# WARNING naming it, and leaves tenant_k's rows delivered.
my $log_offset = -s $node->logfile;
my $expired = $node->safe_psql('life', q{
SELECT outbox_enqueue('agent:e', 'work', '\x35', expires_at => now() - interval '1 second',
                      outbox => 'tenant_w.delivery_outbox')});
$node->safe_psql('postgres',
	"ALTER SYSTEM SET delivery_outbox.reclaim_after = '1s'; SELECT pg_reload_conf()");
ok( $node->poll_query_until(
		'life', qq{
SELECT count(*) = 0 FROM tenant_w.delivery_outbox
 WHERE id IN ($w2, $w3, $e) AND delivery_state = 'delivered'}),
	'the worker reclaims another outbox\'s delivered rows');
ok( $node->poll_query_until(
		'life', q{
SELECT count(*) = 0 FROM delivery_outbox
 WHERE recipient = 'agent:p' AND delivery_state = 'delivered'}),
	'the worker reclaims the default outbox\'s delivered rows');
ok( $node->poll_query_until(
		'life', qq{
SELECT EXISTS (SELECT FROM tenant_w.delivery_outbox_dead
                WHERE id = $expired AND dead_reason = 'expired')}),
	'the worker\'s expiry sweep dead-letters another outbox\'s expired row');
ok( $node->wait_for_log(
		qr/WARNING:.*outbox tenant_k\.delivery_outbox has no dead-letter table/,
		$log_offset),
	'the worker logs a WARNING naming the outbox without a dead table');
is( $node->safe_psql('life',
		"SELECT string_agg(delivery_state, ',' ORDER BY id) FROM tenant_k.delivery_outbox"),
	'delivered,delivered',
	'the worker leaves the broken outbox\'s rows alone');
is( $node->safe_psql('life',
		"SELECT string_agg(format('%s:%s', delivery_state, delivery_attempts), ',' ORDER BY id)"
		  . " FROM tenant_w.delivery_outbox WHERE id IN ($w2, $w3)"),
	'pending:1,pending:1', 'tenant_w\'s reclaimed rows are pending again, attempts kept');

# The documented repair: detach and attach again makes a new dead table;
# then reject works, and the worker reclaims that outbox too.  (The reject
# goes in the attach's transaction: the worker, which reclaims the
# outbox's long-delivered rows as soon as it sees it attached, would
# otherwise race it for the row.)
is( $node->safe_psql('life', qq{
BEGIN;
SELECT outbox_detach('tenant_k.delivery_outbox') \\g /dev/null
SELECT outbox_attach('tenant_k.delivery_outbox') \\g /dev/null
SELECT outbox_reject(ARRAY[$k1]::bigint[], 'fixed', outbox => 'tenant_k.delivery_outbox');
COMMIT;
}),
	'1', 'detach + attach, and outbox_reject on it works again');
is( $node->safe_psql('life', q{SELECT dead_table::text FROM delivery_outbox_tables
                               WHERE outbox = 'tenant_k.delivery_outbox'::regclass}),
	'tenant_k.delivery_outbox_dead',
	'... the outbox has a new dead table');
ok( $node->poll_query_until(
		'life', q{
SELECT count(*) = 0 FROM tenant_k.delivery_outbox WHERE delivery_state = 'delivered'}),
	'... and the worker reclaims its other delivered row');

# One outbox whose step fails (its dead table refuses a row: a CHECK
# added by hand) does not hold up the others: the worker logs a WARNING
# naming it and the step, undoes that outbox's reclaim alone, and reclaims
# the other outboxes' rows.
$node->safe_psql('life', q{
CREATE SCHEMA tenant_f;
SELECT outbox_create('tenant_f');
SELECT outbox_configure('tenant_f.delivery_outbox', max_attempts => 1);
ALTER TABLE tenant_f.delivery_outbox_dead
  ADD CONSTRAINT no_poison CHECK (recipient <> 'agent:poison');
SELECT outbox_enqueue('agent:poison', 'work', '\x40', outbox => 'tenant_f.delivery_outbox');
SELECT count(*) FROM outbox_claim(10, outbox => 'tenant_f.delivery_outbox');
SELECT outbox_enqueue('agent:fine', 'work', '\x41', outbox => 'tenant_w.delivery_outbox');
SELECT count(*) FROM outbox_claim(10, 'agent:fine', outbox => 'tenant_w.delivery_outbox');
});
ok( $node->wait_for_log(
		qr/WARNING:.*the reclaim of outbox tenant_f\.delivery_outbox failed: .*no_poison/,
		0),
	'a failing reclaim of one outbox is a WARNING naming it and the error');
ok( $node->poll_query_until(
		'life', q{
SELECT count(*) = 0 FROM tenant_w.delivery_outbox
 WHERE recipient = 'agent:fine' AND delivery_state = 'delivered'}),
	'... and the worker still reclaims the other outboxes');
is( $node->safe_psql('life',
		"SELECT delivery_state || ':' || delivery_attempts FROM tenant_f.delivery_outbox"),
	'delivered:1', '... while the failing outbox\'s row stays as it was, not half moved');
is($node->safe_psql('life', 'SELECT count(*) FROM tenant_f.delivery_outbox_dead'),
	'0', '... and nothing reached its dead table');

$node->stop;
done_testing();
