
# Copyright (c) 2026, delivery_outbox developers

# t/011_deferred.pl
#
# delivery_outbox.notify = deferred (issue 4), with the library preloaded
# and the databases "postgres" and "db2" served by a worker each; "db3" is
# not served.  Server-wide notify = deferred, sweep_interval = 1h (the
# workers sweep only when reloaded).
#
# - ids are handed to the worker only when the producer commits, and sent
#   from the worker's pid: never before the commit, never for a rolled-back
#   transaction, never for work undone by ROLLBACK TO SAVEPOINT (nested
#   savepoints and a PL/pgSQL exception block included) inside a committed
#   transaction;
# - in a normal run every id is notified exactly once: 2000 rows enqueued by
#   4 concurrent pgbench clients (single enqueues and batches, with
#   rolled-back work in between), the relay hears each committed id once,
#   always from the worker, and no rolled-back id;
# - notify = off sends nothing; notify = commit sends from the producer;
# - the channel of deferred wake-ups is the worker's, not the producer's;
# - the worker's own reclaims go through its ring, notified once;
# - each served database's ids come from its own worker; in db3 (no worker)
#   deferred falls back to commit-mode notifications from the producer;
# - ids handed over while the worker is down (terminated, restarting) are
#   sent by its successor;
# - PREPARE TRANSACTION works in deferred and commit mode; COMMIT PREPARED
#   sends its wake-ups (the first 31 and the last), ROLLBACK PREPARED none;
# - with handover_size = 1024, one transaction of 1500 rows commits, keeps
#   every row, sends the first 1024 ids, and counts 476 in
#   handover_dropped; afterwards wake-ups flow again.

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
delivery_outbox.database = 'postgres, db2'
delivery_outbox.notify = deferred
delivery_outbox.sweep_interval = '1h'
delivery_outbox.reclaim_after = -1
max_prepared_transactions = 2
},
	databases => [ 'db2', 'db3' ],
	extension => [ 'postgres', 'db2', 'db3' ]);

# A relay is a listener($node, $db); heard($relay) returns what it
# received since the last call as "id\@pid" strings, in arrival order, and
# wait_heard($relay, $n) polls until it has $n of them.

# Enqueue a sentinel row in $db (deferred, autocommit), wait until $r has
# heard it, and return everything $r heard up to and including it.  Once
# the sentinel is heard, the worker has sent every id handed over before
# it: the ring is sent in order.
my $sentinels = 0;

sub until_sentinel
{
	my ($r, $db) = @_;
	$db = 'postgres' unless defined $db;
	$sentinels++;
	my $id = $node->safe_psql($db,
		sprintf(q{SELECT outbox_enqueue('sentinel', 'work', '\x%02x')},
			$sentinels % 256));
	my @got;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (!grep({ /^$id\@/ } @got) && time < $deadline)
	{
		push @got, heard($r);
		usleep(50_000) unless grep { /^$id\@/ } @got;
	}
	die "sentinel $id not heard" unless grep { /^$id\@/ } @got;
	return @got;
}

# The ids in a list of "id@pid", without the sentinel's (the last).
sub ids_before_sentinel
{
	my @got = @_;
	pop @got;
	return join(',', map { (split /\@/)[0] } @got);
}

my $pid = wait_for_worker($node, 'postgres');
my $pid2 = wait_for_worker($node, 'db2');
isnt($pid, $pid2, 'one worker per served database');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity
		  WHERE backend_type = 'delivery_outbox sweeper'}),
	'2',
	'two workers, none for db3');

my $relay = listener($node, 'postgres');

# A producer session kept open across steps.
my $producer = $node->background_psql('postgres');
my $producer_pid = $producer->query_safe('SELECT pg_backend_pid()');
is($producer->query_safe('SHOW delivery_outbox.notify'),
	'deferred', 'the producer runs in deferred mode');

#
# Only after commit, and from the worker.
#
$producer->query_safe('BEGIN');
my $a_id = $producer->query_safe(
	q{SELECT outbox_enqueue('agent:a', 'work', '\x01')});
# Another transaction commits meanwhile; once its id is heard, the worker
# has sent everything committed before it, and row $a_id is not among it.
my @got = until_sentinel($relay);
is(ids_before_sentinel(@got), '', 'nothing before the producer commits');
like($got[-1], qr/\@$pid$/, 'the sentinel was sent by the worker');
$producer->query_safe('COMMIT');
is(join(',', wait_heard($relay, 1)), "$a_id\@$pid",
	'the id is heard after COMMIT, sent by the worker');

#
# Rollbacks: a whole transaction, savepoints inside a committed one.
#
$producer->query_safe(
	q{BEGIN;
SELECT outbox_enqueue('agent:rolledback', 'work', '\x02');
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:rolledback', 'agent:rolledback'],
       ARRAY['work', 'work'], ARRAY['\x03', '\x04']::bytea[]);
ROLLBACK;});
@got = until_sentinel($relay);
is(ids_before_sentinel(@got), '', 'a rolled-back transaction sends nothing');

my $out = $producer->query_safe(
	q{BEGIN;
SELECT outbox_enqueue('agent:kept', 'work', '\x05');                -- kept
SAVEPOINT s1;
SELECT outbox_enqueue('agent:rolledback', 'work', '\x06');
ROLLBACK TO SAVEPOINT s1;
SELECT outbox_enqueue('agent:kept', 'work', '\x07');                -- kept
SAVEPOINT s2;
SAVEPOINT s3;
SELECT outbox_enqueue('agent:rolledback', 'work', '\x08');
RELEASE SAVEPOINT s3;
ROLLBACK TO SAVEPOINT s2;
SAVEPOINT s4;
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:kept'], ARRAY['work'],
                                          ARRAY['\x09']::bytea[]);  -- kept
RELEASE SAVEPOINT s4;
DO $$
BEGIN
  PERFORM outbox_enqueue('agent:rolledback', 'work', '\x0a');
  RAISE EXCEPTION 'undo';
EXCEPTION WHEN raise_exception THEN NULL;
END $$;
SAVEPOINT s5;
SELECT outbox_enqueue('agent:kept', 'work', '\x0b');                -- kept
RELEASE SAVEPOINT s5;
COMMIT;});
my $kept = $node->safe_psql('postgres',
	q{SELECT string_agg(id::text, ',' ORDER BY id) FROM delivery_outbox
	  WHERE recipient = 'agent:kept'});
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(encode(payload, 'hex'), ',' ORDER BY id)
		  FROM delivery_outbox WHERE recipient LIKE 'agent:%'}),
	'01,05,07,09,0b',
	'the committed rows are there, the rolled-back ones are not');
@got = until_sentinel($relay);
is(ids_before_sentinel(@got), $kept,
	'savepoints: exactly the kept rows are heard, in order');
is(scalar(grep { !/\@$pid$/ } @got), 0, 'all from the worker');

#
# Exactly once, with concurrent producers: 4 pgbench clients, each
# transaction script commits 5 rows (one enqueue, a batch of 4) and rolls
# back 3 (a savepoint, a whole transaction).
#
$node->pgbench(
	'--no-vacuum --client=4 --transactions=100',
	0,
	[qr{processed: 400/400}],
	[qr{^$}],
	'pgbench: 4 producers, 100 scripts each',
	{
		'011_deferred_producer' => q{
SELECT outbox_enqueue('pgb:' || :client_id, 'work', '\x01');
BEGIN;
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['pgb:b', 'pgb:b', 'pgb:b', 'pgb:b'],
       ARRAY['work', 'work', 'work', 'work'],
       ARRAY['\x02', '\x03', '\x04', '\x05']::bytea[]);
SAVEPOINT s;
SELECT outbox_enqueue('pgb:rolledback', 'work', '\x06');
ROLLBACK TO SAVEPOINT s;
COMMIT;
BEGIN;
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['pgb:rolledback', 'pgb:rolledback'],
       ARRAY['work', 'work'], ARRAY['\x07', '\x08']::bytea[]);
ROLLBACK;
}
	},
	'postgres');
my $committed = $node->safe_psql('postgres',
	q{SELECT string_agg(id::text, ',' ORDER BY id) FROM delivery_outbox
	  WHERE recipient LIKE 'pgb:%'});
my @committed = split /,/, $committed;
is(scalar(@committed), 2000, '2000 rows committed by the producers');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM delivery_outbox WHERE recipient = 'pgb:rolledback'}),
	'0',
	'no rolled-back row');
@got = until_sentinel($relay);
pop @got;
my %times;
my $others = 0;
for my $n (@got)
{
	my ($id, $sender) = split /\@/, $n;
	$times{$id}++;
	$others++ if $sender != $pid;
}
is(scalar(@got), 2000, 'the relay heard 2000 notifications');
is(join(',', sort { $a <=> $b } keys %times),
	$committed, 'exactly the committed ids');
is(scalar(grep { $times{$_} != 1 } keys %times), 0, 'each exactly once');
is($others, 0, 'all sent by the worker, none by a producer');
is( $node->safe_psql(
		'postgres',
		q{SELECT handover_dropped || '/' || notify_skipped
		  FROM delivery_outbox_activity WHERE datname = 'postgres'}),
	'0/0',
	'no wake-up dropped or skipped');
# And nothing more arrives afterwards (no duplicate sent late).
@got = until_sentinel($relay);
is(ids_before_sentinel(@got), '', 'no late duplicates');

#
# delivery_outbox.deferred_batch_delay: with none (each batch sent as soon
# as the last is out) and with a long one (200 ms), still every committed id
# exactly once, from the worker.
#
for my $delay (0, 200)
{
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET delivery_outbox.deferred_batch_delay = $delay");
	$node->reload;
	$node->poll_query_until('postgres',
		"SELECT setting = '$delay' FROM pg_settings
		  WHERE name = 'delivery_outbox.deferred_batch_delay'")
	  or die "the new delay was not loaded";
	$node->pgbench(
		'--no-vacuum --client=4 --transactions=50',
		0,
		[qr{processed: 200/200}],
		[qr{^$}],
		"pgbench: 4 producers, batch delay $delay ms",
		{
			"011_deferred_delay_$delay" => qq{
SELECT outbox_enqueue('delay:$delay', 'work', '\\x01');
}
		},
		'postgres');
	my $ids = $node->safe_psql('postgres',
		"SELECT string_agg(id::text, ',' ORDER BY id) FROM delivery_outbox
		  WHERE recipient = 'delay:$delay'");
	@got = until_sentinel($relay);
	pop @got;
	my %seen;
	$seen{ (split /\@/)[0] }++ for @got;
	is(join(',', sort { $a <=> $b } keys %seen),
		$ids, "batch delay $delay ms: exactly the committed ids");
	is(scalar(grep { $seen{$_} != 1 } keys %seen),
		0, "batch delay $delay ms: each exactly once");
	is(scalar(grep { !/\@$pid$/ } @got),
		0, "batch delay $delay ms: all from the worker");
}
$node->safe_psql('postgres',
	'ALTER SYSTEM RESET delivery_outbox.deferred_batch_delay');
$node->reload;

#
# notify = off: nothing; notify = commit: from the producer at its commit.
#
$producer->query_safe('SET delivery_outbox.notify = off');
$producer->query_safe(q{SELECT outbox_enqueue('agent:off', 'work', '\x0c')});
$producer->query_safe(
	q{SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:off'], ARRAY['work'],
	                                            ARRAY['\x0d']::bytea[])});
@got = until_sentinel($relay);
is(ids_before_sentinel(@got), '', 'notify = off sends nothing');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM delivery_outbox
		  WHERE recipient = 'agent:off' AND delivery_state = 'pending'}),
	'2',
	'the rows are written');
$producer->query_safe('SET delivery_outbox.notify = commit');
my $c_id = $producer->query_safe(
	q{SELECT outbox_enqueue('agent:commit', 'work', '\x0e')});
is(join(',', wait_heard($relay, 1)), "$c_id\@$producer_pid",
	'notify = commit: heard from the producer');
$producer->query_safe('RESET delivery_outbox.notify');

# deferred: the channel is the worker's, not the producer's session setting
$producer->query_safe(q{SET delivery_outbox.channel = 'elsewhere'});
my $e_id = $producer->query_safe(
	q{SELECT outbox_enqueue('agent:elsewhere', 'work', '\x0f')});
is(join(',', wait_heard($relay, 1)), "$e_id\@$pid",
	"deferred: sent on the worker's channel whatever the producer SETs");
$producer->query_safe('RESET delivery_outbox.channel');

#
# The worker's own reclaims (the worker runs in deferred mode too) go
# through its ring: each reclaimed id is heard once, from the worker.
#
$node->safe_psql('postgres',
	q{SELECT count(*) FROM outbox_claim(2, 'agent:kept')});
my $claimed = $node->safe_psql('postgres',
	q{SELECT string_agg(id::text, ',' ORDER BY id) FROM delivery_outbox
	  WHERE delivery_state = 'delivered'});
$node->safe_psql('postgres',
	'ALTER SYSTEM SET delivery_outbox.reclaim_after = 0');
$node->reload;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM delivery_outbox WHERE delivery_state = 'delivered'})
  or die 'the worker did not reclaim';
$node->safe_psql('postgres',
	'ALTER SYSTEM SET delivery_outbox.reclaim_after = -1');
$node->reload;
@got = until_sentinel($relay);
is(join(',', sort { $a <=> $b } split /,/, ids_before_sentinel(@got)),
	$claimed, 'the reclaimed rows are heard once each');
is(scalar(grep { !/\@$pid$/ } @got), 0, 'from the worker');

#
# Each served database has its own worker; db3 falls back to commit mode.
#
my $relay2 = listener($node, 'db2');
my $relay3 = listener($node, 'db3');
my $producer3 = $node->background_psql('db3');
my $producer3_pid = $producer3->query_safe('SELECT pg_backend_pid()');
is($producer3->query_safe('SHOW delivery_outbox.notify'),
	'deferred', 'db3 producer in deferred mode');

@got = until_sentinel($relay2, 'db2');
like(join(',', @got), qr/^\d+\@$pid2$/, 'db2: heard from the db2 worker');

$producer3->query_safe('BEGIN');
my $d3 = $producer3->query_safe(
	q{SELECT outbox_enqueue('agent:db3', 'work', '\x01')});
is(join(',', heard($relay3)), '', 'db3: nothing before COMMIT');
$producer3->query_safe('COMMIT');
is(join(',', wait_heard($relay3, 1)), "$d3\@$producer3_pid",
	'db3 (no worker): heard at COMMIT from the producer, as in commit mode');
$producer3->query_safe(
	q{BEGIN; SELECT outbox_enqueue('agent:db3', 'work', '\x02'); ROLLBACK;});
@got = until_sentinel($relay3, 'db3');
is(ids_before_sentinel(@got), '', 'db3: nothing for a rollback');
is( $node->safe_psql(
		'db3',
		q{SELECT handover_dropped FROM delivery_outbox_activity
		  WHERE datname = 'db3'}),
	'0',
	'db3: nothing handed over, nothing dropped');
is(join(',', heard($relay)), '', 'the postgres relay heard nothing of it');
$relay2->quit;
$relay3->quit;
$producer3->quit;

#
# Ids handed over while the worker is down are sent by its successor.
#
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
$node->poll_query_until('postgres',
	qq{SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid})
  or die 'worker did not exit';
my ($down_id, $workers) = split /\n/, $node->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:down', 'work', '\x01');
SELECT count(*) FROM pg_stat_activity
 WHERE backend_type = 'delivery_outbox sweeper' AND datname = 'postgres';
});
is($workers, '0', 'committed while no worker ran');
my $new_pid = wait_for_worker($node, 'postgres');
isnt($new_pid, $pid, 'a new worker');
is(join(',', wait_heard($relay, 1)), "$down_id\@$new_pid",
	'the id handed over meanwhile is sent by the new worker');
$pid = $new_pid;

#
# PREPARE TRANSACTION works in deferred mode; its wake-ups cannot wait in
# the worker's ring for a commit that may never come: COMMIT PREPARED sends
# them (1.3), ROLLBACK PREPARED none.
#
my $prep_out = $producer->query_safe(
	q{BEGIN;
SELECT outbox_enqueue('agent:2pc', 'work', '\x01');
PREPARE TRANSACTION 'p1';});
my ($prep_id) = $prep_out =~ /^(\d+)$/m;
@got = until_sentinel($relay);
is(ids_before_sentinel(@got), '', 'a prepared enqueue wakes nobody yet');
$node->safe_psql('postgres', q{COMMIT PREPARED 'p1'});
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM delivery_outbox WHERE recipient = 'agent:2pc'}),
	'1',
	'a prepared and committed enqueue keeps its row');
@got = until_sentinel($relay);
is(ids_before_sentinel(@got), $prep_id,
	'COMMIT PREPARED sends its wake-up, the id alone');
isnt((split /\@/, $got[0])[1], $pid, '... from the committing session, not the worker');
$producer->query_safe(
	q{BEGIN;
SELECT outbox_enqueue('agent:2pc', 'work', '\x02');
PREPARE TRANSACTION 'p2';});
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'p2'});
@got = until_sentinel($relay);
is(ids_before_sentinel(@got), '', 'ROLLBACK PREPARED sends none');

# Commit mode (1.3): the NOTIFYs wait for the pre-commit, so the
# transaction can be prepared; COMMIT PREPARED sends its first 31 ids and
# its last (32 kept per prepared transaction).
$producer->query_safe('SET delivery_outbox.notify = commit');
my $c_out = $producer->query_safe(
	q{BEGIN;
SELECT outbox_enqueue('agent:2pc', 'work', '\x03') FROM generate_series(1, 40);
PREPARE TRANSACTION 'p3';});
my @c_ids = $c_out =~ /^(\d+)$/mg;
is(scalar @c_ids, 40, 'commit mode: 40 enqueues prepared');
@got = until_sentinel($relay);
is(ids_before_sentinel(@got), '', '... wake nobody yet');
$node->safe_psql('postgres', q{COMMIT PREPARED 'p3'});
@got = until_sentinel($relay);
is(ids_before_sentinel(@got), join(',', @c_ids[0 .. 30], $c_ids[-1]),
	'... COMMIT PREPARED sends the first 31 ids and the last');
$producer->query_safe('RESET delivery_outbox.notify');
$producer->quit;
$relay->quit;

#
# A full ring: handover_size = 1024, one transaction of 1500 rows.
#
$node->append_conf('postgresql.conf', "delivery_outbox.handover_size = 1024\n");
$node->restart;
is($node->safe_psql('postgres', 'SHOW delivery_outbox.handover_size'),
	'1024', 'handover_size is 1024');
$pid = wait_for_worker($node, 'postgres');
# The worker has done its first sweep and sleeps (sweep_interval = 1h): it
# only wakes when a producer hands ids over.
wait_for_sweep($node, pid => $pid)
  or die 'the worker did not finish its first sweep';
$relay = listener($node, 'postgres');
my ($ret, $stdout, $stderr) = $node->psql(
	'postgres', q{
BEGIN;
SELECT count(*) FROM outbox_enqueue_batch(array_fill('agent:big'::text, ARRAY[1500]),
                                          array_fill('work'::text, ARRAY[1500]),
                                          array_fill('\x00'::bytea, ARRAY[1500]));
COMMIT;
});
is($ret, 0, 'a transaction handing over 1500 ids commits');
is($stderr, '', 'without a warning or error');
my $big = $node->safe_psql('postgres',
	q{SELECT string_agg(id::text, ',' ORDER BY id) FROM delivery_outbox
	  WHERE recipient = 'agent:big' AND delivery_state = 'pending'});
my @big = split /,/, $big;
is(scalar(@big), 1500, 'all 1500 rows are kept, pending');
$node->poll_query_until(
	'postgres', q{
SELECT notified >= 1024 FROM delivery_outbox_activity WHERE datname = 'postgres'})
  or die 'the worker did not send the ring';
is( $node->safe_psql(
		'postgres',
		q{SELECT handover_dropped || '/' || notified || '/' || notify_skipped
		  FROM delivery_outbox_activity WHERE datname = 'postgres'}),
	'476/1024/0',
	'handover_dropped = 476, notified = 1024');
@got = until_sentinel($relay);
pop @got;
is(scalar(@got), 1024, 'the relay heard 1024 ids');
is(join(',', map { (split /\@/)[0] } @got),
	join(',', @big[ 0 .. 1023 ]),
	'the first 1024 ids of the transaction, in order, once each');
is(scalar(grep { !/\@$pid$/ } @got), 0, 'sent by the worker');
is( $node->safe_psql(
		'postgres',
		q{SELECT handover_dropped FROM delivery_outbox_activity
		  WHERE datname = 'postgres'}),
	'476',
	'once the ring drained, wake-ups flow again (the sentinel was heard), none dropped');
$relay->quit;

$node->stop;

done_testing();
