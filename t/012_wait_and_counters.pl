
# Copyright (c) 2026, delivery_outbox developers

# t/012_wait_and_counters.pl
#
# With the library preloaded (issue 5):
#
# outbox_wait
# - false after its timeout, true at once when a pending row exists;
# - woken by a commit in another session: it returns within 1 s of the
#   commit, and is woken by the commit itself, not by its once-a-second
#   recheck (the commit is placed 0.4 s into that second, so a wake-up
#   that waited for the recheck would take about 0.6 s);
# - woken by rows becoming pending again (release), not by another
#   recipient's rows, not by uncommitted or rolled-back rows;
# - works the same in a database no worker serves;
# - pg_cancel_backend and statement_timeout interrupt it (57014).
#
# outbox_activity() / delivery_outbox_activity
# - every counter moves by exactly what the test did: enqueued, claimed,
#   acked, released, reclaimed, purged, notified, notify_skipped, and the
#   backlog gauges, for each function, plain DML, COPY, restore-style
#   inserts, the worker's sweeps and deferred wake-ups;
# - rolled-back work (a transaction, a savepoint) counts nothing;
# - the gauges equal the table's counts; after a restart the counters
#   start again from zero and the gauges are counted again.
#
# The worker sweeps only when reloaded (sweep_interval = 1h), so that no
# sweep re-counts the gauges while the test compares them.

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
delivery_outbox.reclaim_after = -1
delivery_outbox.retain_acked = -1
max_prepared_transactions = 2
},
	databases => ['other'],
	extension => [ 'postgres', 'other' ]);
wait_for_worker($node);

###########################################################################
# outbox_wait
###########################################################################

my $waiter = $node->background_psql('postgres', on_error_stop => 0);
my $waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
my $producer = $node->background_psql('postgres');

# Start outbox_wait($args) in the waiter; returns once it is sleeping.
sub start_wait
{
	my ($w, $wpid, $args, $db) = @_;
	$db = 'postgres' unless defined $db;
	$w->query_until(
		qr/waiting\n/, qq{\\echo waiting
SELECT 'result:' || w || ':' || clock_timestamp()
  FROM (SELECT outbox_wait($args) AS w OFFSET 0) s;
});
	$node->poll_query_until($db,
		qq{SELECT wait_event = 'Extension' FROM pg_stat_activity WHERE pid = $wpid})
	  or die "waiter $wpid does not sleep";
	return;
}

# Collect the result of the wait: (found, clock_timestamp() at return).
sub finish_wait
{
	my ($w) = @_;
	my $out = $w->query_until(qr/result:[^\n]*\n/, '');
	$out =~ /result:(\w+):([^\n]*)\n/ or die "no wait result in $out";
	return ($1, $2);
}

# Seconds from $from to $to (timestamptz texts), computed by the server.
sub seconds_between
{
	my ($from, $to) = @_;
	return $node->safe_psql('postgres',
		"SELECT extract(epoch FROM '$to'::timestamptz - '$from'::timestamptz)");
}

# Commit an enqueue (in $p) 0.4 s after the waiter's statement started;
# returns clock_timestamp() just before the COMMIT.
sub enqueue_at_04
{
	my ($p, $wpid, $recipient) = @_;
	$p->query_safe(
		qq{SELECT pg_sleep(greatest(0, 0.4 - extract(epoch FROM clock_timestamp() - query_start)))
		   FROM pg_stat_activity WHERE pid = $wpid});
	my @out = split /\n/, $p->query_safe(
		qq{BEGIN;
SELECT outbox_enqueue('$recipient', 'work', '\\x01');
SELECT clock_timestamp();
COMMIT;});
	return $out[-1];
}

# false after the timeout, and not before
my ($t0, $found, $t1);
$t0 = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$found = $node->safe_psql('postgres', q{SELECT outbox_wait('300 ms')});
$t1 = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
is($found, 'f', 'empty outbox: outbox_wait is false after its timeout');
cmp_ok(seconds_between($t0, $t1), '>=', 0.3, 'it waited the timeout');

# true at once when a row is pending
$node->safe_psql('postgres',
	q{SELECT outbox_enqueue('agent:p', 'work', '\x01')});
is( $node->safe_psql(
		'postgres', q{
SELECT outbox_wait('1 min') AND outbox_wait('1 min', 'agent:p')
       AND clock_timestamp() - statement_timestamp() < '10 s'}),
	't',
	'a pending row: true at once');
$node->safe_psql('postgres', q{SELECT count(*) FROM outbox_claim(10)});

# Woken by another session's commit, three times.
my @latency;
for my $round (1 .. 3)
{
	start_wait($waiter, $waiter_pid, q{'60 s', 'agent:w'});
	my $committed = enqueue_at_04($producer, $waiter_pid, 'agent:w');
	my ($f, $returned) = finish_wait($waiter);
	is($f, 'true', "round $round: the wait returned true");
	push @latency, seconds_between($committed, $returned);
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM outbox_claim(10, 'agent:w')});
}
my @sorted = sort { $a <=> $b } @latency;
note 'latencies from commit to return: ' . join(', ', @latency);
cmp_ok($sorted[-1], '<', 1.0,
	'each wait returned within 1 s of the commit in another session');
cmp_ok($sorted[0], '<', 0.3,
	'woken by the commit, not by the once-a-second recheck');

# Woken by a row that becomes pending again (release).
$node->safe_psql('postgres',
	q{SELECT outbox_enqueue('agent:r', 'work', '\x01');
	  SELECT count(*) FROM outbox_claim(1, 'agent:r')});
start_wait($waiter, $waiter_pid, q{'60 s', 'agent:r'});
$producer->query_safe(
	q{SELECT outbox_release(array_agg(id)) FROM delivery_outbox
	  WHERE recipient = 'agent:r'});
my $released = $producer->query_safe('SELECT clock_timestamp()');
my ($f, $returned) = finish_wait($waiter);
is($f, 'true', 'a released row wakes the waiter');
cmp_ok(seconds_between($released, $returned), '<', 1.0, 'within 1 s');
$node->safe_psql('postgres', q{SELECT count(*) FROM outbox_claim(10)});

# Not woken by another recipient's row, nor by an uncommitted one, nor by a
# rolled-back one: false at the timeout.
start_wait($waiter, $waiter_pid, q{'1.5 s', 'agent:x'});
$t0 = $node->safe_psql('postgres',
	q{SELECT query_start FROM pg_stat_activity WHERE pid = } . $waiter_pid);
$producer->query_safe(q{SELECT outbox_enqueue('agent:y', 'work', '\x01')});
$producer->query_safe(
	q{BEGIN; SELECT outbox_enqueue('agent:x', 'work', '\x02'); ROLLBACK;});
$producer->query_safe(
	q{BEGIN; SELECT outbox_enqueue('agent:x', 'work', '\x03')});
($f, $returned) = finish_wait($waiter);
is($f, 'false',
	'another recipient, a rolled-back and an uncommitted row: false at the timeout');
cmp_ok(seconds_between($t0, $returned), '>=', 1.5, 'after the full timeout');
$producer->query_safe('ROLLBACK');
$node->safe_psql('postgres', q{SELECT count(*) FROM outbox_claim(10)});

# The same in a database that no worker serves.
my $owaiter = $node->background_psql('other');
my $owaiter_pid = $owaiter->query_safe('SELECT pg_backend_pid()');
my $oproducer = $node->background_psql('other');
start_wait($owaiter, $owaiter_pid, q{'60 s'}, 'other');
my $ocommitted = enqueue_at_04($oproducer, $owaiter_pid, 'agent:o');
($f, $returned) = finish_wait($owaiter);
is($f, 'true', 'database without a worker: woken by the commit');
cmp_ok(seconds_between($ocommitted, $returned), '<', 1.0, 'within 1 s');
$owaiter->quit;
$oproducer->quit;

# pg_cancel_backend: 57014, long before the timeout.
start_wait($waiter, $waiter_pid, q{'60 s', 'agent:never'});
$t0 = time;
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($waiter_pid)"),
	't', 'cancel sent');
my ($sqlstate) = $waiter->query('\echo :SQLSTATE');
is($sqlstate, '57014', 'pg_cancel_backend interrupts outbox_wait: 57014');
like($waiter->{stderr}, qr/canceling statement due to user request/,
	'"canceling statement due to user request"');
cmp_ok(time - $t0, '<', 30, 'long before its 60 s timeout');
$waiter->{stderr} = '';
is($waiter->query_safe('SELECT 1'), '1', 'the session goes on');

# statement_timeout: 57014.
$t0 = time;
my ($ret, $stdout, $stderr) = $node->psql(
	'postgres', q{
\set VERBOSITY sqlstate
SET statement_timeout = '500ms';
SELECT outbox_wait('60 s', 'agent:never');
});
isnt($ret, 0, 'outbox_wait under statement_timeout fails');
like($stderr, qr/ERROR:\s+57014/, 'statement_timeout interrupts it: 57014');
cmp_ok(time - $t0, '<', 30, 'long before its 60 s timeout');
$waiter->quit;
$producer->quit;

###########################################################################
# Counters
###########################################################################

my @counters = qw(enqueued claimed acked released reclaimed purged notified
  notify_skipped handover_dropped backlog_pending backlog_delivered);

# The counters of database postgres, as a hash.
sub activity
{
	my ($db) = @_;
	$db = 'postgres' unless defined $db;
	my $row = $node->safe_psql(
		'postgres',
		'SELECT ' . join(" || '|' || ", map { "coalesce(${_}::text, 'NULL')" } @counters)
		  . " FROM delivery_outbox_activity WHERE datname = '$db'");
	my %h;
	@h{@counters} = split /\|/, $row;
	return \%h;
}

# Check that the counters moved from $before by exactly %$expect (0 for
# every counter not named there).
sub moved
{
	my ($before, $expect, $name) = @_;
	my $after = activity();
	my (@got, @want);
	for my $c (@counters)
	{
		push @got, "$c=" . ($after->{$c} - $before->{$c});
		push @want, "$c=" . ($expect->{$c} // 0);
	}
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is(join(' ', @got), join(' ', @want), $name);
	return $after;
}

# The gauges equal the table's counts.
sub gauges_match
{
	my ($name, $db) = @_;
	$db = 'postgres' unless defined $db;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is( $node->safe_psql(
			$db, qq{
SELECT backlog_pending || '/' || backlog_delivered
  FROM delivery_outbox_activity WHERE datname = '$db'}),
		$node->safe_psql(
			$db, q{
SELECT count(*) FILTER (WHERE delivery_state = 'pending') || '/'
       || count(*) FILTER (WHERE delivery_state = 'delivered')
  FROM delivery_outbox}),
		$name);
}

# Start from an empty table.  Rows are named by their payloads (one byte
# each, unique): row_id('\x03') is the id of the row whose payload is 03.
$node->safe_psql(
	'postgres', q{
DELETE FROM delivery_outbox;
CREATE FUNCTION row_id(p bytea) RETURNS bigint LANGUAGE sql
  AS $$ SELECT id FROM delivery_outbox WHERE payload = p $$;
});
gauges_match('the gauges equal the table (empty)');

is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT count(*) FROM outbox_activity()) = (SELECT count(*) FROM delivery_outbox_activity)
   AND (SELECT array_agg(datname ORDER BY datname) FROM delivery_outbox_activity)
       @> ARRAY['other', 'postgres']
   AND (SELECT bool_and(stats_since IS NOT NULL AND stats_since <= now())
          FROM delivery_outbox_activity)}),
	't',
	'one row per database in use, the view is the function, stats_since is set');

my $c = activity();

# enqueues: single, batch, plain INSERT, COPY
$node->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:a', 'work', '\x02');
SELECT outbox_enqueue('agent:b', 'work', '\x03', 'tenant-1');
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:b', 'agent:c', 'agent:c', 'agent:d'],
       ARRAY['work', 'work', 'work', 'work'], ARRAY['\x04', '\x05', '\x06', '\x07']::bytea[]);
INSERT INTO delivery_outbox (recipient, kind, payload) VALUES ('agent:d', 'work', '\x08');
});
$node->safe_psql('postgres', <<'EOF');
COPY delivery_outbox (recipient, kind, payload) FROM STDIN;
agent:e	work	\\x09
agent:e	work	\\x0a
\.
EOF
$c = moved($c, { enqueued => 10, notified => 10, backlog_pending => 10 },
	'10 enqueues (single, batch, INSERT, COPY): enqueued and notified +10');
gauges_match('gauges after the enqueues');

# rolled back: a transaction, and savepoints inside a committed one
$node->safe_psql(
	'postgres', q{
BEGIN;
SELECT outbox_enqueue('agent:z', 'work', '\x01');
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:z', 'agent:z'],
       ARRAY['work', 'work'], ARRAY['\x02', '\x03']::bytea[]);
SELECT count(*) FROM outbox_claim(3);
ROLLBACK;
BEGIN;
SELECT outbox_enqueue('agent:f', 'work', '\x0b');
SAVEPOINT s;
SELECT outbox_enqueue('agent:z', 'work', '\x04');
SELECT count(*) FROM outbox_claim(3);
ROLLBACK TO SAVEPOINT s;
SAVEPOINT t;
SAVEPOINT u;
SELECT outbox_enqueue('agent:z', 'work', '\x05');
RELEASE SAVEPOINT u;
ROLLBACK TO SAVEPOINT t;
COMMIT;
});
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM delivery_outbox WHERE recipient = 'agent:z'}),
	'0',
	'no rolled-back row');
$c = moved($c, { enqueued => 1, notified => 1, backlog_pending => 1 },
	'rolled-back work counts nothing; the one committed enqueue counts');

# claims, acks; a rolled-back claim and ack count nothing
$node->safe_psql(
	'postgres', q{
SELECT count(*) FROM outbox_claim(6);                 -- rows 01-06
SELECT outbox_ack(ARRAY[row_id('\x01'), row_id('\x02')]);
SELECT outbox_ack(row_id('\x03'), 'agent:b');
SELECT outbox_ack(row_id('\x03'));                    -- already acked: false
SELECT outbox_ack(row_id('\x04'), 'agent:nobody');    -- other recipient: false
BEGIN;
SELECT count(*) FROM outbox_claim(2);                 -- rows 07, 08
SELECT outbox_ack(ARRAY[row_id('\x04'), row_id('\x05')]);
ROLLBACK;
});
$c = moved(
	$c,
	{
		claimed => 6,
		acked => 3,
		backlog_pending => -6,
		backlog_delivered => 3
	},
	'6 claimed, 3 acked; rolled back ones and refused acks not counted');
gauges_match('gauges after claims and acks');

# release (of a delivered and of a pending row: only the delivered one moves)
$node->safe_psql('postgres',
	q{SELECT outbox_release(ARRAY[row_id('\x04'), row_id('\x07')])});
$c = moved(
	$c,
	{
		released => 1,
		notified => 1,
		backlog_pending => 1,
		backlog_delivered => -1
	},
	'release: released +1, notified +1');

# reclaim, resync, reassign: "reclaimed"; reassigning a pending row only
# notifies
$node->safe_psql(
	'postgres', q{
SELECT outbox_reclaim('0 s');                         -- rows 05, 06
SELECT count(*) FROM outbox_claim(1, 'agent:c');      -- row 05 again
SELECT outbox_reclaim_recipient('agent:c');           -- row 05
SELECT count(*) FROM outbox_claim(1, 'agent:d');      -- row 07
SELECT outbox_reassign('agent:d', 'agent:dd');        -- 07 (delivered), 08 (pending)
});
$c = moved(
	$c,
	{
		claimed => 2,
		reclaimed => 4,
		notified => 5,
		backlog_pending => 2,
		backlog_delivered => -2
	},
	'reclaim 2, resync 1, reassign 1 delivered + 1 pending: reclaimed +4, notified +5');

# a hand-written UPDATE back to pending counts as reclaimed
$node->safe_psql(
	'postgres', q{
SELECT count(*) FROM outbox_claim(1, 'agent:e');      -- row 09
UPDATE delivery_outbox SET delivery_state = 'pending' WHERE payload = '\x09';
UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE payload = '\x09';
UPDATE delivery_outbox SET delivery_state = 'acked' WHERE payload = '\x09';
});
$c = moved(
	$c,
	{ claimed => 2, reclaimed => 1, acked => 1, notified => 1, backlog_pending => -1 },
	'hand-written UPDATEs count like the functions');

# a late ack of a pending row passes through delivered: claimed and acked
$node->safe_psql('postgres', q{SELECT outbox_ack(row_id('\x0a'))});
$c = moved($c, { claimed => 1, acked => 1, backlog_pending => -1 },
	'a late ack of a pending row: claimed +1, acked +1');

gauges_match('gauges after the moves');

# purge, and a plain DELETE (any state): purged
$node->safe_psql(
	'postgres', q{
SELECT outbox_purge('0 s');                           -- rows 01, 02, 03, 09, 0a
DELETE FROM delivery_outbox WHERE payload IN ('\x04', '\x05');  -- pending
});
$c = moved($c, { purged => 7, backlog_pending => -2 },
	'outbox_purge of 5 acked rows and DELETE of 2 pending rows: purged +7');
$node->safe_psql(
	'postgres', q{
BEGIN;
DELETE FROM delivery_outbox;
ROLLBACK;
});
$c = moved($c, {}, 'a rolled-back DELETE counts nothing');
gauges_match('gauges after purging');

# a batch ack of a pending row and a delivered one: the one-statement ack
# (in a subtransaction) falls short and is rolled back, the general path
# acks both; each transition counted once
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (SELECT outbox_enqueue('agent:k', 'work', '\x2a')
                      UNION ALL SELECT outbox_enqueue('agent:k', 'work', '\x2b')) e;
SELECT count(*) FROM outbox_claim(1, 'agent:k');             -- 2a delivered, 2b pending
SELECT outbox_ack(ARRAY[row_id('\x2b'), row_id('\x2a')]);
SELECT string_agg(delivery_state || '/' || delivery_attempts, ' ' ORDER BY id)
  FROM delivery_outbox WHERE recipient = 'agent:k';
}),
	"2\n1\n2\nacked/1 acked/1",
	'a batch ack of a pending and a delivered row acks both');
# (gone again, so that later purges count what they did before)
$node->safe_psql('postgres',
	q{DELETE FROM delivery_outbox WHERE recipient = 'agent:k'});
$c = moved(
	$c,
	{ enqueued => 2, notified => 2, claimed => 2, acked => 2, purged => 2 },
	'a batch ack falling back to the general path: claimed +2, acked +2 (and the two rows deleted: purged +2)'
);

# an outbox that keeps no acked row (retain_acked '0', 1.3): its acks
# delete the rows, counted as acks, not purges; outbox_ack_claim acks and
# claims in one call
$node->safe_psql(
	'postgres', q{
SELECT outbox_configure('delivery_outbox', retain_acked => '0');
SELECT outbox_enqueue('agent:del', 'work', '\xb1');
SELECT outbox_enqueue('agent:del', 'work', '\xb2');
SELECT count(*) FROM outbox_ack_claim('{}', 1, 'agent:del');                   -- b1
SELECT count(*) FROM outbox_ack_claim(ARRAY[row_id('\xb1')], 1, 'agent:del');  -- b1 acked, b2
SELECT outbox_ack(row_id('\xb2'));
SELECT outbox_configure('delivery_outbox', retain_acked => '-1 second');
});
$c = moved($c, { enqueued => 2, notified => 2, claimed => 2, acked => 2 },
	'retain_acked 0: two rows enqueued, claimed and acked by deleting them: acked +2, purged +0');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM delivery_outbox WHERE recipient = 'agent:del'}),
	'0',
	'retain_acked 0: the acked rows are gone');
gauges_match('gauges after acks that delete');

# notify = off, notify_queue_limit = 0
$node->safe_psql(
	'postgres', q{
SET delivery_outbox.notify = off;
SELECT outbox_enqueue('agent:g', 'work', '\x0c');
RESET delivery_outbox.notify;
SET delivery_outbox.notify_queue_limit = 0;
SELECT outbox_enqueue('agent:g', 'work', '\x0d');
SELECT outbox_enqueue('agent:g', 'work', '\x0e');
});
$c = moved($c, { enqueued => 3, notify_skipped => 2, backlog_pending => 3 },
	'notify = off: not notified; queue limit 0: notify_skipped +2');

# rows restored as delivered and as acked: not enqueued, but in the gauges
$node->safe_psql(
	'postgres', q{
INSERT INTO delivery_outbox (id, recipient, kind, payload, delivery_state,
                             delivery_attempts, delivered_at, acked_at)
VALUES (1001, 'agent:h', 'work', '\x0f', 'delivered', 1, now(), NULL),
       (1002, 'agent:h', 'work', '\x10', 'acked', 1, now(), now());
});
$c = moved($c, { backlog_delivered => 1 },
	'restored delivered/acked rows: only the delivered gauge moves');
gauges_match('gauges after a restore-style insert');

# deferred mode: enqueued at commit, notified by the worker
$node->safe_psql(
	'postgres', q{
SET delivery_outbox.notify = deferred;
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:i', 'agent:i', 'agent:i'],
       ARRAY['work', 'work', 'work'], ARRAY['\x11', '\x12', '\x13']::bytea[]);
BEGIN;
SELECT outbox_enqueue('agent:z', 'work', '\x14');
ROLLBACK;
});
$node->poll_query_until(
	'postgres', qq{
SELECT notified - $c->{notified} >= 3 FROM delivery_outbox_activity
 WHERE datname = 'postgres'})
  or die 'deferred wake-ups not sent';
$c = moved($c, { enqueued => 3, notified => 3, backlog_pending => 3 },
	'deferred: enqueued +3 at commit, notified +3 by the worker');

# the worker: one sweep (a reload) reclaims and purges
$node->safe_psql(
	'postgres', q{
SELECT count(*) FROM outbox_claim(2, 'agent:i');
SELECT outbox_ack(id) FROM delivery_outbox WHERE recipient = 'agent:g' AND payload = '\x0c';
});
$c = moved(
	$c,
	{ claimed => 3, acked => 1, backlog_pending => -3, backlog_delivered => 2 },
	'2 claims, and a late ack (claimed and acked)');
my $sweep_ts = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->safe_psql(
	'postgres', q{
ALTER SYSTEM SET delivery_outbox.reclaim_after = 0;
ALTER SYSTEM SET delivery_outbox.retain_acked = 0;
SELECT pg_reload_conf();
});
# 3 delivered rows (2 of agent:i, the restored 1001) are reclaimed, the 2
# acked rows (1002 and agent:g's) purged, in one sweep.
wait_for_sweep($node, after => $sweep_ts) or die 'no sweep';
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM delivery_outbox WHERE delivery_state <> 'pending'}),
	'0',
	'one worker sweep reclaimed and purged');
$node->poll_query_until(
	'postgres', qq{
SELECT notified - $c->{notified} >= 3 FROM delivery_outbox_activity
 WHERE datname = 'postgres'})
  or die 'the worker did not notify';
$c = moved(
	$c,
	{
		reclaimed => 3,
		purged => 2,
		notified => 3,
		backlog_pending => 3,
		backlog_delivered => -3
	},
	'a worker sweep: reclaimed +3, purged +2, notified +3, gauges +3/-3');
gauges_match('gauges right after a worker sweep that reclaimed rows');

# The next sweep (a reload) re-counts the gauges.
$sweep_ts = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->safe_psql(
	'postgres', q{
ALTER SYSTEM SET delivery_outbox.reclaim_after = -1;
ALTER SYSTEM SET delivery_outbox.retain_acked = -1;
SELECT pg_reload_conf();
});
wait_for_sweep($node, after => $sweep_ts) or die 'no sweep';
gauges_match('gauges after the next sweep');
$c = activity();

# another database's counters are its own
my $o = activity('other');
$node->safe_psql('other',
	q{SELECT outbox_enqueue('agent:o', 'work', '\x01')});
my $o2 = activity('other');
is($o2->{enqueued} - $o->{enqueued}, 1, 'database other counts its own enqueue');
$c = moved($c, {}, 'and postgres does not');

# two-phase commit: the work counts when COMMIT PREPARED commits it
$node->safe_psql(
	'postgres', q{
SET delivery_outbox.notify = off;
BEGIN;
SELECT outbox_enqueue('agent:j', 'work', '\x15');
PREPARE TRANSACTION 'p1';
});
$c = moved($c, {}, 'a prepared transaction counts nothing yet');
$node->safe_psql('postgres', q{COMMIT PREPARED 'p1'});
$c = moved($c, { enqueued => 1, backlog_pending => 1 },
	'COMMIT PREPARED: enqueued +1');
$node->safe_psql(
	'postgres', q{
SET delivery_outbox.notify = off;
BEGIN;
SELECT outbox_enqueue('agent:j', 'work', '\x16');
PREPARE TRANSACTION 'p2';
ROLLBACK PREPARED 'p2';
});
$c = moved($c, {}, 'ROLLBACK PREPARED counts nothing');

# After a restart the counters start again; the gauges are counted again.
my $since = $node->safe_psql('postgres',
	q{SELECT stats_since FROM delivery_outbox_activity WHERE datname = 'postgres'});
$node->restart;
wait_for_worker($node);
my $r = activity();
is( join(' ', map { "$_=$r->{$_}" } @counters[ 0 .. 8 ]),
	join(' ', map { "$_=0" } @counters[ 0 .. 8 ]),
	'after a restart the counters start from zero');
gauges_match('and the gauges are counted again');
cmp_ok(
	$node->safe_psql(
		'postgres',
		qq{SELECT stats_since > '$since'::timestamptz FROM delivery_outbox_activity
		   WHERE datname = 'postgres'}),
	'eq', 't',
	'stats_since moved to the restart');

# In database other (no worker) the gauges are counted at the first read
# after the restart; a transaction that reads them first, after changing
# rows itself, ends with them right.
$node->safe_psql(
	'other', q{
BEGIN;
SELECT outbox_enqueue('agent:o', 'work', '\x02');
SELECT count(*) FROM outbox_claim(1);
SELECT backlog_pending FROM delivery_outbox_activity WHERE datname = 'other';
COMMIT;
});
gauges_match('other: gauges right after a first read inside a changing transaction',
	'other');

$node->stop;

done_testing();
