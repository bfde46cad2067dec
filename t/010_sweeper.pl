
# Copyright (c) 2026, delivery_outbox developers

# t/010_sweeper.pl
#
# The sweeper background worker (issue 5), with the library preloaded and
# the database "postgres" served:
#
# - it shows in pg_stat_activity (backend_type and application_name
#   "delivery_outbox sweeper"), and while the extension is missing it logs
#   once that it waits;
# - reloads take effect: at sweep_interval = 1h nothing happens to rows
#   delivered longer than reclaim_after; a reload makes the worker sweep at
#   once; after a reload to 200ms it also sweeps every 200ms by itself;
# - a delivered row older than reclaim_after comes back to pending, and is
#   notified (from the worker) to a LISTENing relay, without any client call;
#   never before reclaim_after;
# - acked rows older than retain_acked disappear, never before; rows in
#   other states stay;
# - each pass is bounded: 10000 reclaimed and 10000 purged rows;
# - rows other sessions hold locked are skipped, and nobody is blocked;
# - pg_terminate_backend of the worker: a new worker within seconds, which
#   sweeps;
# - DROP EXTENSION and CREATE EXTENSION (in another schema) leave the server
#   healthy: the worker keeps running, logs once that it waits and once that
#   it found the extension, and sweeps the new table; 40 quick DROP/CREATE
#   cycles under a 10 ms sweep interval never make it fail;
# - SIGKILL of the worker: crash restart, the worker comes back and sweeps;
# - the server stops cleanly.
#
# Waits are polls (poll_query_until, wait_for_log); the only sleep is where
# the point is that something does NOT happen over several sweeps.

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
delivery_outbox.sweep_interval = '1h'
delivery_outbox.reclaim_after = 1
restart_after_crash = on
});

# The table's qualified name, which changes when the extension is
# re-created in another schema.
my $table = 'delivery_outbox';

# A relay: a background psql LISTENing on the default channel, once the
# extension is there.  heard($relay) returns what it received since the
# last call as "id\@pid" strings; wait_heard($relay, $n, 100_000) polls it
# every 100 ms until it has $n of them.
my $relay;

# Run $query (two columns: rows seen moved too early, rows not moved yet)
# every 50 ms until no row is left to move; returns the sum of the early
# moves seen (0 expected).  A statement's snapshot is taken before its
# clock_timestamp() is read, so a row seen moved while clock_timestamp() is
# still less than the minimum age after its start moved too early.
sub watch_until_moved
{
	my ($query) = @_;
	my $early = 0;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $deadline)
	{
		my ($moved, $left) = split /\|/,
		  $node->safe_psql('postgres', $query);
		$early += $moved;
		return $early if $left == 0;
		usleep(50_000);
	}
	die "rows did not move within the timeout: $query";
}

#
# The worker starts, shows itself, and waits for the extension.
#
my $pid = wait_for_worker($node);
like($pid, qr/^\d+$/, 'one worker serves database postgres');
is( $node->safe_psql(
		'postgres',
		qq{SELECT backend_type || '|' || application_name
		   FROM pg_stat_activity WHERE pid = $pid}),
	'delivery_outbox sweeper|delivery_outbox sweeper',
	'backend_type and application_name say "delivery_outbox sweeper"');
$node->wait_for_log(
	qr/LOG:\s+delivery_outbox sweeper started for database "postgres"/);
$node->wait_for_log(
	qr/LOG:\s+delivery_outbox sweeper: extension "delivery_outbox" is not installed in database "postgres", waiting/
);
is( $node->safe_psql(
		'postgres',
		q{SELECT name || '=' || setting FROM pg_settings
		  WHERE name IN ('delivery_outbox.database', 'delivery_outbox.sweep_interval',
		                 'delivery_outbox.reclaim_after', 'delivery_outbox.retain_acked',
		                 'delivery_outbox.deferred_batch_delay')
		  ORDER BY name}),
	"delivery_outbox.database=postgres\n"
	  . "delivery_outbox.deferred_batch_delay=2\n"
	  . "delivery_outbox.reclaim_after=1\n"
	  . "delivery_outbox.retain_acked=-1\n"
	  . "delivery_outbox.sweep_interval=3600000",
	'the settings the worker runs with');

$node->safe_psql('postgres', 'CREATE EXTENSION delivery_outbox');
$relay = listener($node);

# One line per recipient and state: recipient:state:count.
sub census
{
	return $node->safe_psql(
		'postgres', qq{
SELECT recipient || ':' || delivery_state || ':' || count(*)
  FROM $table GROUP BY recipient, delivery_state ORDER BY 1});
}

#
# sweep_interval = 1h: the worker looked for the extension when it started,
# and does not look again.  Rows delivered longer than reclaim_after (1 s)
# stay delivered, because no sweep runs.  Two relays' rows (1 and 2) and a
# bulk of 10050 acked and 10050 delivered rows (enqueued without wake-ups).
#
$node->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:b', 'work', '\x02');
SELECT count(*) FROM outbox_claim(10);
});
is(scalar(wait_heard($relay, 2, 100_000)), 2, 'relay heard the two enqueues');
$node->safe_psql(
	'postgres', q{
SET delivery_outbox.notify = off;
CREATE TABLE bulk AS
SELECT id FROM outbox_enqueue_batch(array_fill('bulk:acked'::text, ARRAY[10050]),
                                    array_fill('work'::text, ARRAY[10050]),
                                    array_fill('\x00'::bytea, ARRAY[10050])) AS b(id);
SELECT count(*) FROM outbox_claim(20000, 'bulk:acked');
SELECT outbox_ack(array_agg(id)) FROM bulk;
SELECT count(*) FROM outbox_enqueue_batch(array_fill('bulk:delivered'::text, ARRAY[10050]),
                                          array_fill('work'::text, ARRAY[10050]),
                                          array_fill('\x00'::bytea, ARRAY[10050]));
SELECT count(*) FROM outbox_claim(20000, 'bulk:delivered');
DROP TABLE bulk;
});
$node->poll_query_until('postgres',
	q{SELECT bool_and(clock_timestamp() - delivered_at > '1.5 s')
	  FROM delivery_outbox WHERE delivery_state = 'delivered'})
  or die 'rows did not age';
is(census(),
	"agent:a:delivered:1\nagent:b:delivered:1\n"
	  . "bulk:acked:acked:10050\nbulk:delivered:delivered:10050",
	'at sweep_interval = 1h, rows older than reclaim_after stay delivered');
is(join(',', heard($relay)), '', 'and nobody is woken');

#
# A reload (retain_acked 0, sweep_interval still 1h) makes the worker sweep
# at once: it finds the extension, and in one pass reclaims the 10000 rows
# delivered longest ago (rows 1 and 2 first) and purges 10000 acked rows.
# No client call; the relay hears rows 1 and 2 from the worker.
#
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', 'ALTER SYSTEM SET delivery_outbox.retain_acked = 0');
$node->reload;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 2 FROM delivery_outbox
	  WHERE recipient LIKE 'agent:%' AND delivery_state = 'pending'})
  or die 'the worker did not sweep after the reload';
pass('after a reload the worker swept at once');
$node->wait_for_log(
	qr/LOG:\s+delivery_outbox sweeper: extension found in database "postgres", sweeping/,
	$log_offset);
is(census(),
	"agent:a:pending:1\nagent:b:pending:1\n"
	  . "bulk:acked:acked:50\nbulk:delivered:delivered:52\n"
	  . "bulk:delivered:pending:9998",
	'one pass: 10000 rows reclaimed (oldest delivery first), 10000 purged');
is( states_of(
		$node, q{recipient LIKE 'agent:%'},
		sep => '/',
		table => $table),
	'pending/1,pending/1',
	'reclaimed rows are pending, with the attempt they had');
is( $node->safe_psql(
		'postgres',
		q{SELECT bool_and(delivered_at IS NOT NULL AND acked_at IS NULL)
		  FROM delivery_outbox WHERE recipient LIKE 'agent:%'}),
	't',
	'the trigger kept their bookkeeping');
my @heard = wait_heard($relay, 10000, 100_000);
is(scalar(@heard), 10000, 'the relay heard 10000 reclaimed ids');
is(scalar(grep { !/\@$pid$/ } @heard), 0, 'all sent by the worker');
is(join(',', grep { /^[12]\@/ } @heard), "1\@$pid,2\@$pid",
	'rows 1 and 2 among them');
is(worker_pid($node), $pid, 'the same worker');

# Nothing more until the next reload: then the rest.
$node->reload;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM delivery_outbox
	  WHERE recipient LIKE 'bulk:%' AND delivery_state <> 'pending'})
  or die 'no second sweep';
is(census(),
	"agent:a:pending:1\nagent:b:pending:1\nbulk:delivered:pending:10050",
	'the next sweep reclaimed and purged the rest');
is(scalar(wait_heard($relay, 52, 100_000)),
	52, 'and the relay heard the 52 rows');
$node->safe_psql('postgres',
	q{DELETE FROM delivery_outbox WHERE recipient LIKE 'bulk:%'});

#
# sweep_interval = 200ms (and retain_acked 1 s): the new interval is in
# force, not just the sweep a reload triggers.  A row claimed now comes back
# by itself, and never before reclaim_after (1 s).
#
my $reload_ts = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->safe_psql(
	'postgres', q{
ALTER SYSTEM SET delivery_outbox.sweep_interval = '200ms';
ALTER SYSTEM SET delivery_outbox.retain_acked = 1;
});
$node->reload;
# The sweep the reload triggers is over before the claim below, so what
# reclaims the row later is a periodic sweep.
wait_for_sweep($node, after => $reload_ts, pid => $pid)
  or die 'no sweep after the reload';
is( $node->safe_psql(
		'postgres',
		q{SELECT id || ':' || delivery_state || '/' || delivery_attempts
		  FROM outbox_claim(1, 'agent:a')}),
	'1:delivered/2',
	'row 1 claimed again');
is( watch_until_moved(
		q{SELECT count(*) FILTER (WHERE delivery_state = 'pending'
		                          AND clock_timestamp() - delivered_at < '1 s'),
		         count(*) FILTER (WHERE delivery_state = 'delivered')
		  FROM delivery_outbox WHERE id = 1}),
	0,
	'row 1 came back to pending by itself, not before reclaim_after');
is(states_of($node, 'id = 1', sep => '/', table => $table),
	'pending/2', 'row 1 is pending with two attempts');
is(join(',', wait_heard($relay, 1, 100_000)),
	"1\@$pid", 'and was notified by the worker');

#
# retain_acked = 1 s: acked rows older than it disappear, not before; rows
# in other states stay.
#
my @acked_at = split /\n/, $node->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:c', 'work', '\x03');    -- will be acked
SELECT outbox_enqueue('agent:c', 'work', '\x04');    -- will be acked
SELECT outbox_enqueue('agent:c', 'work', '\x05');    -- delivered (later pending)
SELECT outbox_enqueue('agent:c', 'work', '\x06');    -- pending
SELECT count(*) FROM outbox_claim(3, 'agent:c');
SELECT clock_timestamp();                            -- before the acks
SELECT outbox_ack(array_agg(id)) FROM delivery_outbox
 WHERE recipient = 'agent:c' AND payload IN ('\x03', '\x04');
});
my $before_ack = $acked_at[-2];
is($acked_at[-1], '2', 'two rows acked');
is( watch_until_moved(
		qq{SELECT CASE WHEN count(*) < 2
		               AND clock_timestamp() - '$before_ack'::timestamptz < '1 s'
		          THEN 1 ELSE 0 END,
		          count(*)
		   FROM delivery_outbox
		   WHERE recipient = 'agent:c' AND payload IN ('\\x03', '\\x04')}),
	0,
	'acked rows older than retain_acked were purged, not before');
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(encode(payload, 'hex'), ',' ORDER BY id)
		  FROM delivery_outbox WHERE recipient = 'agent:c'}),
	'05,06',
	'the rows in other states stay');
is( states_of(
		$node, q{recipient IN ('agent:a', 'agent:b')},
		sep => '/',
		table => $table),
	'pending/2,pending/1',
	'so do the older pending rows');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM delivery_outbox WHERE delivery_state = 'delivered'})
  or die 'row 5 not reclaimed';
wait_heard($relay, 1, 100_000);
$node->safe_psql('postgres', 'ALTER SYSTEM SET delivery_outbox.retain_acked = -1');
$node->reload;

#
# The sweeper skips rows other sessions hold locked, and waits for nobody:
# of two rows of agent:l delivered long enough, the one a relay holds FOR
# UPDATE stays delivered while the other comes back; once the lock is gone
# it comes back too.
#
$node->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:l', 'work', '\x11');
SELECT outbox_enqueue('agent:l', 'work', '\x12');
});
my $locker = $node->background_psql('postgres');
$locker->query_safe(q{SELECT count(*) FROM outbox_claim(2, 'agent:l')});
$locker->query_safe(
	q{BEGIN; SELECT id FROM delivery_outbox WHERE payload = '\x11' FOR UPDATE;});
$node->poll_query_until('postgres',
	q{SELECT delivery_state = 'pending' FROM delivery_outbox WHERE payload = '\x12'})
  or die 'the unlocked row was not reclaimed';
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(encode(payload, 'hex') || ':' || delivery_state, ',' ORDER BY id)
		  FROM delivery_outbox WHERE recipient = 'agent:l'}),
	'11:delivered,12:pending',
	'the row held locked is skipped, the other reclaimed');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity
		  WHERE backend_type = 'delivery_outbox sweeper' AND wait_event_type = 'Lock'}),
	'0',
	'the worker does not wait for the lock');
like( $node->safe_psql(
		'postgres', q{SELECT outbox_enqueue('agent:l', 'work', '\x13')}),
	qr/^\d+$/,
	'a producer is not blocked either');
$locker->query_safe('COMMIT');
$node->poll_query_until('postgres',
	q{SELECT delivery_state = 'pending' FROM delivery_outbox WHERE payload = '\x11'})
  or die 'the row was not reclaimed after its lock went';
pass('once the lock is released the row is reclaimed');
$locker->quit;
# 2 enqueues, 2 reclaims, 1 enqueue
is(scalar(wait_heard($relay, 5, 100_000)), 5, 'the relay heard all of it');
$node->safe_psql('postgres',
	q{DELETE FROM delivery_outbox WHERE recipient = 'agent:l'});

#
# pg_terminate_backend of the worker: a new one within seconds (restart
# time 5 s), and it sweeps.
#
is(worker_pid($node), $pid, 'still the first worker');
my $t0 = time;
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)"),
	't', 'worker terminated');
my $new_pid = wait_for_worker($node, 'postgres', $pid);
my $elapsed = time - $t0;
isnt($new_pid, $pid, 'a new worker serves postgres');
cmp_ok($elapsed, '<', 20,
	sprintf('it started %.1f s after the old one was terminated', $elapsed));
is( $node->safe_psql(
		'postgres',
		q{SELECT id || ':' || delivery_state || '/' || delivery_attempts
		  FROM outbox_claim(1, 'agent:b')}),
	'2:delivered/2',
	'row 2 claimed');
$node->poll_query_until('postgres',
	q{SELECT delivery_state = 'pending' FROM delivery_outbox WHERE id = 2})
  or die 'the new worker did not reclaim';
pass('the new worker reclaims');
is(join(',', wait_heard($relay, 1, 100_000)), "2\@$new_pid",
	'and notifies, from its own pid');
$pid = $new_pid;

#
# DROP EXTENSION and CREATE EXTENSION while the worker sweeps every 200ms.
#
$relay->query_safe('UNLISTEN *');
$log_offset = -s $node->logfile;
$node->safe_psql('postgres', 'DROP EXTENSION delivery_outbox');
my $waiting_re =
  qr/LOG:\s+delivery_outbox sweeper: extension "delivery_outbox" is not installed in database "postgres", waiting/;
my $found_re =
  qr/LOG:\s+delivery_outbox sweeper: extension found in database "postgres", sweeping/;
$node->wait_for_log($waiting_re, $log_offset);
pass('after DROP EXTENSION the worker says it waits');
# Several sweep intervals go by (the one sleep here: the point is that
# nothing more happens).
usleep(1_500_000);
my $log = slurp_file($node->logfile, $log_offset);
is(scalar(() = $log =~ /$waiting_re/g), 1, 'and says so once');
unlike($log, qr/background worker "delivery_outbox sweeper[^"]*" \(PID \d+\) (?:exited|was terminated)/,
	'it did not exit');
is(worker_pid($node), $pid, 'the same worker is alive');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server is healthy');
# (should the worker have failed, go on with its successor)
$pid = wait_for_worker($node);

# Re-created in another schema: the worker finds the new table by OID.
$node->safe_psql('postgres',
	'CREATE SCHEMA outbox; CREATE EXTENSION delivery_outbox SCHEMA outbox');
$table = 'outbox.delivery_outbox';
$node->wait_for_log($found_re, $log_offset);
pass('after CREATE EXTENSION the worker says it sweeps');
$relay->query_safe('LISTEN delivery_outbox');
$node->safe_psql(
	'postgres', q{
SELECT outbox.outbox_enqueue('agent:d', 'work', '\x07');
SELECT count(*) FROM outbox.outbox_claim(1);
});
like(join(',', wait_heard($relay, 1, 100_000)), qr/^1\@\d+$/,
	'the enqueue into the new table is heard');
$node->poll_query_until('postgres',
	q{SELECT delivery_state = 'pending' FROM outbox.delivery_outbox WHERE id = 1})
  or die 'the worker did not sweep the re-created table';
pass('the worker reclaims rows of the re-created table');
is(join(',', wait_heard($relay, 1, 100_000)),
	"1\@$pid", 'and notifies them');
is(worker_pid($node), $pid, 'still the same worker');
$log = slurp_file($node->logfile, $log_offset);
is(scalar(() = $log =~ /$waiting_re/g), 1, 'one "waiting" line in all');
is(scalar(() = $log =~ /$found_re/g),   1, 'one "found" line');
unlike($log,
	qr/background worker "delivery_outbox sweeper[^"]*" \(PID \d+\) (?:exited|was terminated)|ERROR:|FATAL:/,
	'no error and no worker exit in the log');
$relay->quit;

# DROP EXTENSION and CREATE EXTENSION in quick succession while the worker
# sweeps every 10 ms: whenever a DROP lands, between its check for the
# extension and its sweep or during it, the worker must not fail.
$node->safe_psql('postgres',
	"ALTER SYSTEM SET delivery_outbox.sweep_interval = '10ms'");
$node->reload;
$node->poll_query_until('postgres',
	q{SELECT setting FROM pg_settings WHERE name = 'delivery_outbox.sweep_interval'},
	'10')
  or die 'reload not seen';
$log_offset = -s $node->logfile;
$node->safe_psql('postgres',
	join('',
		map { "DROP EXTENSION delivery_outbox;\n"
			  . "CREATE EXTENSION delivery_outbox SCHEMA outbox;\n"
			  . "SELECT pg_sleep(0.02);\n" } 1 .. 40));
$node->safe_psql(
	'postgres', q{
SELECT outbox.outbox_enqueue('agent:d', 'work', '\x07');
SELECT count(*) FROM outbox.outbox_claim(1);
});
$node->poll_query_until('postgres',
	q{SELECT delivery_state = 'pending' FROM outbox.delivery_outbox WHERE id = 1})
  or die 'the worker did not sweep after 40 DROP/CREATE cycles';
$log = slurp_file($node->logfile, $log_offset);
unlike($log,
	qr/background worker "delivery_outbox sweeper[^"]*" \(PID \d+\) (?:exited|was terminated)|ERROR:|FATAL:/,
	'40 quick DROP/CREATE EXTENSION cycles: no worker error, no exit');
is(worker_pid($node), $pid, 'the same worker still sweeps');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET delivery_outbox.sweep_interval = '200ms'");
$node->reload;
# (if the worker did exit above, go on with its successor)
$pid = wait_for_worker($node);

#
# SIGKILL of the worker: the postmaster restarts the cluster, the worker
# comes back, and the outbox is there and swept.
#
$log_offset = -s $node->logfile;
kill 'KILL', $pid;
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
$node->poll_query_until('postgres', 'SELECT 1', '1')
  or die 'server did not come back';
$new_pid = wait_for_worker($node, 'postgres', $pid);
isnt($new_pid, $pid, 'after a crash restart a new worker serves postgres');
$node->safe_psql(
	'postgres', q{
SELECT outbox.outbox_enqueue('agent:e', 'work', '\x08');
SELECT count(*) FROM outbox.outbox_claim(1, 'agent:e');
});
$node->poll_query_until('postgres',
	q{SELECT delivery_state = 'pending' FROM outbox.delivery_outbox
	  WHERE recipient = 'agent:e'})
  or die 'the worker did not sweep after the crash restart';
pass('and sweeps');
is( states_of(
		$node, q{recipient IN ('agent:d', 'agent:e')},
		sep => '/',
		table => $table),
	'pending/1,pending/1',
	'rows survived the crash restart');

#
# A clean stop: the worker exits with the server.
#
$log_offset = -s $node->logfile;
$node->stop('fast');
$log = slurp_file($node->logfile, $log_offset);
like($log, qr/database system is shut down/, 'the server shut down');
unlike($log, qr/PANIC|terminated by signal/, 'without a crash');

done_testing();
