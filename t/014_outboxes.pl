# Copyright (c) 2026, delivery_outbox developers

# t/014_outboxes.pl
#
# Many outboxes in one database, with the library preloaded and a worker
# serving "postgres": the default outbox, two made by outbox_create() (one
# on a channel of its own) and a seed-shaped table taken over by
# outbox_attach() (timestamp columns, read as UTC, under a server TimeZone
# that is not UTC).
#
# - the worker reclaims rows delivered too long ago, and purges old acked
#   rows, in every outbox, not only the default one; a reclaimed row of the
#   outbox with its own channel is notified on that channel only;
# - in notify = deferred mode the worker sends each outbox's wake-ups on
#   that outbox's channel;
# - outbox_activity() has a row per outbox, with that outbox's counters;
# - pg_dump + restore of the database brings back every outbox: its rows,
#   states and bookkeeping, its sequence position (the next enqueue takes
#   the next id), its settings (registry, channel, triggers), and the
#   attached table's disabled notify trigger.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $node = outbox_node(
	'main',
	preload => 1,
	conf => q{
delivery_outbox.database = 'postgres'
delivery_outbox.sweep_interval = '200ms'
delivery_outbox.reclaim_after = -1
delivery_outbox.retain_acked = -1
timezone = 'America/New_York'
});
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION delivery_outbox;
CREATE SCHEMA tenant_a;
CREATE SCHEMA tenant_b;
SELECT outbox_create('tenant_a');
SELECT outbox_create('tenant_b', channel => 'tenant_b_wakeups');
CREATE SCHEMA app;
CREATE TABLE app.delivery_outbox (
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
CREATE FUNCTION app.delivery_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN PERFORM pg_notify('delivery_outbox', NEW.id::text); RETURN NEW; END $$;
CREATE TRIGGER delivery_outbox_notify_trg AFTER INSERT ON app.delivery_outbox
  FOR EACH ROW EXECUTE FUNCTION app.delivery_outbox_notify();
INSERT INTO app.delivery_outbox (recipient, kind, payload, delivery_state,
                                 delivery_attempts, created_at)
VALUES ('agent:seed', 'work', '\x01', 'pending', 0, now() AT TIME ZONE 'UTC');
SELECT outbox_attach('app.delivery_outbox');
});

my @outboxes = ('delivery_outbox', 'tenant_a.delivery_outbox',
	'tenant_b.delivery_outbox', 'app.delivery_outbox');

# two rows per outbox: one claimed (delivered), one claimed and acked
for my $o (@outboxes)
{
	$node->safe_psql(
		'postgres', qq{
SELECT outbox_enqueue('agent:x', 'work', '\\x02', outbox => '$o');
SELECT outbox_enqueue('agent:y', 'work', '\\x03', outbox => '$o');
SELECT count(*) FROM outbox_claim(10, outbox => '$o');
SELECT outbox_ack(max(id), outbox => '$o') FROM $o WHERE recipient = 'agent:y';
});
}

# the activity counters are per outbox; the attached table's backlog gauges
# are known once the worker has counted its rows (at the end of a sweep)
ok( $node->poll_query_until(
		'postgres', q{
SELECT backlog_pending IS NOT NULL FROM delivery_outbox_activity
 WHERE datname = 'postgres' AND outbox = 'app.delivery_outbox'::regclass}),
	'the worker counts the backlog of the attached table');
is( $node->safe_psql(
		'postgres', q{
SELECT outbox, enqueued, claimed, acked, backlog_pending, backlog_delivered
  FROM delivery_outbox_activity WHERE datname = 'postgres'
 ORDER BY outbox::text}),
	"app.delivery_outbox|2|3|1|0|2\n"
	  . "delivery_outbox|2|2|1|0|1\n"
	  . "tenant_a.delivery_outbox|2|2|1|0|1\n"
	  . "tenant_b.delivery_outbox|2|2|1|0|1",
	'outbox_activity: a row per outbox, each with its own counters and backlog');

my $relay = listener($node);
$relay->query_safe('LISTEN tenant_b_wakeups');

# the worker reclaims in every outbox
$node->safe_psql('postgres',
	"ALTER SYSTEM SET delivery_outbox.reclaim_after = '1s'; SELECT pg_reload_conf()");
for my $o (@outboxes)
{
	ok( $node->poll_query_until(
			'postgres', qq{
SELECT count(*) = 0 FROM $o WHERE delivery_state = 'delivered'}),
		"the worker reclaims delivered rows in $o");
}
my $reclaimed_b = $node->safe_psql('postgres',
	"SELECT id FROM tenant_b.delivery_outbox WHERE recipient = 'agent:x'");
my $heard = $relay->query_safe('SELECT 1');
like(
	$heard,
	qr/notification "tenant_b_wakeups" with payload "$reclaimed_b" received/,
	"tenant_b's reclaimed row is notified on tenant_b's channel");
$node->safe_psql('postgres',
	"ALTER SYSTEM SET delivery_outbox.reclaim_after = -1; SELECT pg_reload_conf()");
$relay->quit;

# ... and purges old acked rows in every outbox
$node->safe_psql('postgres',
	"ALTER SYSTEM SET delivery_outbox.retain_acked = '1s'; SELECT pg_reload_conf()");
for my $o (@outboxes)
{
	ok( $node->poll_query_until(
			'postgres', qq{
SELECT count(*) = 0 FROM $o WHERE delivery_state = 'acked'}),
		"the worker purges acked rows in $o");
}
$node->safe_psql('postgres',
	"ALTER SYSTEM SET delivery_outbox.retain_acked = -1; SELECT pg_reload_conf()");

# deferred wake-ups: handed to the worker, sent on each outbox's channel
$node->safe_psql('postgres',
	"ALTER SYSTEM SET delivery_outbox.notify = deferred; SELECT pg_reload_conf()");
my $worker = wait_for_worker($node);
$relay = listener($node);
$relay->query_safe('LISTEN tenant_b_wakeups');
my $deferred_a = $node->safe_psql('postgres',
	"SELECT outbox_enqueue('agent:d', 'work', '\\x07', outbox => 'tenant_a.delivery_outbox')");
my $deferred_b = $node->safe_psql('postgres',
	"SELECT outbox_enqueue('agent:d', 'work', '\\x07', outbox => 'tenant_b.delivery_outbox')");
my $got = '';
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while (time < $deadline
	&& ($got !~ /"delivery_outbox" with payload "$deferred_a"/
		|| $got !~ /"tenant_b_wakeups" with payload "$deferred_b"/))
{
	$got .= $relay->query_safe('SELECT 1');
	usleep(50_000);
}
like($got,
	qr/notification "delivery_outbox" with payload "$deferred_a" received from server process with PID $worker\./,
	"deferred: tenant_a's id is sent by the worker on the default channel");
like($got,
	qr/notification "tenant_b_wakeups" with payload "$deferred_b" received from server process with PID $worker\./,
	"deferred: tenant_b's id is sent by the worker on tenant_b's channel");
is(scalar(() = $got =~ /notification "delivery_outbox" with payload/g),
	1, "deferred: one wake-up on the default channel (tenant_a's), none for tenant_b");
is(scalar(() = $got =~ /notification "tenant_b_wakeups" with payload/g),
	1, "deferred: one wake-up on tenant_b's channel");
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET delivery_outbox.notify; SELECT pg_reload_conf()");
$relay->quit;

# the attached table's timestamps are UTC wall-clock times
is( $node->safe_psql(
		'postgres', q{
SELECT bool_and(delivered_at BETWEEN (now() AT TIME ZONE 'UTC') - interval '5 minutes'
                                 AND (now() AT TIME ZONE 'UTC'))
  FROM app.delivery_outbox WHERE delivered_at IS NOT NULL}),
	't',
	'delivered_at in the attached table is UTC, under a New York TimeZone');

# one more row in every state, for the dump
for my $o (@outboxes)
{
	$node->safe_psql(
		'postgres', qq{
SELECT outbox_enqueue('agent:z', 'work', '\\x04', outbox => '$o');
SELECT count(*) FROM outbox_claim(1, 'agent:z', outbox => '$o');
SELECT outbox_enqueue('agent:w', 'work', '\\x05', outbox => '$o');
SELECT outbox_ack(id, outbox => '$o') FROM outbox_claim(1, 'agent:w', outbox => '$o');
});
}

my $rows_sql = join("\nUNION ALL\n",
	map {
		"SELECT '$_', id, recipient, delivery_state, delivery_attempts,"
		  . " delivered_at IS NOT NULL, acked_at IS NOT NULL FROM $_"
	} @outboxes)
  . "\nORDER BY 1, 2";
my $settings_sql = q{
SELECT outbox, origin, channel, channel_is_default FROM delivery_outbox_tables ORDER BY outbox::text;
SELECT c.relname, n.nspname, t.tgname, t.tgenabled, encode(t.tgargs, 'escape')
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE NOT t.tgisinternal AND c.relname = 'delivery_outbox' AND n.nspname <> 'public'
 ORDER BY 2, 3;
SELECT outbox, disabled_triggers FROM delivery_outbox_registry ORDER BY outbox::text;
};
# the default outbox gets a channel of its own too
$node->safe_psql('postgres',
	"SELECT outbox_configure('delivery_outbox', channel => 'default_chan')");

my $rows_before = $node->safe_psql('postgres', $rows_sql);
my $settings_before = $node->safe_psql('postgres', $settings_sql);

my $dump = $node->basedir . '/outboxes.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'postgres' ],
	'pg_dump of the database with four outboxes');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', 'restored', $dump ],
	'pg_restore into a new database');

is($node->safe_psql('restored', $rows_sql),
	$rows_before, 'every row of every outbox is back, in its state');
is($node->safe_psql('restored', $settings_sql),
	$settings_before,
	'the registry, the channels, the triggers and the disabled notify trigger are back');
for my $o (@outboxes)
{
	my $max = $node->safe_psql('restored', "SELECT max(id) FROM $o");
	is( $node->safe_psql(
			'restored',
			"SELECT outbox_enqueue('agent:after', 'work', '\\x06', outbox => '$o') > $max"),
		't',
		"restored $o: the next enqueue takes an id past the restored ones");
	is( $node->safe_psql(
			'restored',
			"SELECT count(*) FROM outbox_claim(100, 'agent:after', outbox => '$o')"),
		'1',
		"restored $o: it is claimable");
}
# the default outbox's triggers come from CREATE EXTENSION, without the
# channel; its registry row came back, and its wake-ups go there
my $restored_relay = $node->background_psql('restored');
$restored_relay->query_safe('LISTEN default_chan');
my $default_id = $node->safe_psql('restored',
	"SELECT outbox_enqueue('agent:chan', 'work', '\\x08')");
my $got_default = '';
$deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while (time < $deadline
	&& $got_default !~ /"default_chan" with payload "$default_id"/)
{
	$got_default .= $restored_relay->query_safe('SELECT 1');
	usleep(50_000);
}
like($got_default, qr/notification "default_chan" with payload "$default_id" received/,
	"restored: the default outbox's configured channel is in force");
$restored_relay->quit;

my ($ret, $out, $err) = $node->psql('restored', q{
UPDATE tenant_a.delivery_outbox SET delivery_state = 'acked'
 WHERE delivery_state = 'pending'});
like($err, qr/illegal delivery_state transition from "pending" to "acked"/,
	'restored: the state guard is in force on a created outbox');

$node->stop;
done_testing();
