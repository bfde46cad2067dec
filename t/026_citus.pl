
# Copyright (c) 2026, delivery_outbox developers

# t/026_citus.pl
#
# Level 1 on Citus (issue 26): the outbox is an ordinary local table on the
# coordinator, the business table `orders` is distributed by tenant_id over
# two workers, and one transaction writes both.  Three nodes on loopback
# (a coordinator and two workers, Citus connecting over 127.0.0.1), every
# one with shared_preload_libraries = 'citus, delivery_outbox'.
#
# - the preload order: Citus refuses to start behind delivery_outbox
#   ("Citus has to be loaded first");
# - one relcache callback: on a server with only Citus preloaded, a session
#   that has made Citus register all its relcache callbacks (metadata,
#   worker nodes, group id, connection parameters) and PostgreSQL its own
#   (plan cache, type cache, relfilenode map) runs CREATE EXTENSION
#   delivery_outbox and uses it (before the fix the library's five
#   callbacks overflowed PostgreSQL 15's ten slots: FATAL "out of
#   relcache_callback_list slots"); the same with both libraries preloaded;
# - a producer's transaction inserting orders on both workers and enqueuing
#   commits both, with one NOTIFY per row (its id) from the producer;
# - both or neither after a failure on a worker: a CHECK violation in a
#   worker's shard; a worker stopped (immediate) before COMMIT, with rows on
#   both workers (two-phase commit) and on one (Citus commits that worker in
#   its pre-commit, before the coordinator); a worker stopped during
#   COMMIT, after it prepared and the coordinator wrote its commit record
#   (the producer held in its commit by synchronous replication to a
#   standby that does not exist), then restarted and
#   recover_prepared_transactions(): both; the coordinator stopped
#   (immediate) in its COMMIT after the workers prepared but before its
#   commit record (held on PostgreSQL's notify lock) and after it: neither,
#   and both, once recovered;
# - the gap: a transaction writing on one worker only is committed there in
#   one phase, in Citus's pre-commit, before the coordinator's commit
#   record; the coordinator stopped in between keeps the order and loses
#   its outbox row (pinned, so that a Citus that changes it shows);
# - delivery_outbox.notify = deferred: one NOTIFY per committed enqueue,
#   from the worker, none for an aborted one;
# - direct_insert on and off (with Citus's planner and executor hooks the
#   direct insert steps aside by itself: the rows are the same);
# - outbox_wait on the coordinator wakes at the producer's commit;
# - the background worker reclaims a delivered row on the coordinator and
#   notifies it;
# - two relays on the coordinator with outbox_ack_claim, one claiming while
#   the other holds its batch: every row claimed once and acked.
#
# Skips when Citus is not installed for the PostgreSQL under test
# (scripts/citus.sh builds it; scripts/test.sh runs this file under a copy
# of the installation that has it).  OUTBOX_CITUS_PORT, when set, is the
# port of the coordinator, the workers' are the next two; otherwise free
# ports are picked.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $pkglibdir = `pg_config --pkglibdir`;
my $sharedir = `pg_config --sharedir`;
chomp($pkglibdir, $sharedir);
plan skip_all =>
  "Citus is not installed for this PostgreSQL (no $pkglibdir/citus.so): "
  . 'scripts/citus.sh builds it, and scripts/test.sh runs this test under '
  . 'a copy of the installation that has it'
  unless -f "$pkglibdir/citus.so" && -f "$sharedir/extension/citus.control";

my $base = $ENV{OUTBOX_CITUS_PORT};

# Everything a node of this cluster has: Citus first, TCP on loopback only
# (Citus's connections between nodes), prepared transactions for its
# two-phase commit, no TLS between nodes (nothing to verify here), and no
# background 2PC recovery (the test runs recover_prepared_transactions()
# itself, at the points it checks).
my $node_conf = q{
shared_preload_libraries = 'citus, delivery_outbox'
listen_addresses = '127.0.0.1'
max_prepared_transactions = 10
citus.node_conninfo = 'sslmode=disable'
citus.recover_2pc_interval = -1
};

sub new_node
{
	my ($name, $i) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name,
		defined $base ? (port => $base + $i) : ());
	$node->init;
	return $node;
}

my $coord = new_node('coordinator', 0);
my $w1 = new_node('worker1', 1);
my $w2 = new_node('worker2', 2);
my %port = map { $_->name => $_->port } ($coord, $w1, $w2);
# the producer's session, and a relay listening, on the coordinator
my ($producer, $producer_pid, $relay);

###########################################################################
# The preload order
###########################################################################

$coord->append_conf('postgresql.conf', q{
shared_preload_libraries = 'delivery_outbox, citus'
listen_addresses = '127.0.0.1'
});
ok(!$coord->start(fail_ok => 1), 'Citus does not start behind delivery_outbox');
like(slurp_file($coord->logfile), qr/Citus has to be loaded first/,
	'... and says it must be loaded first');

###########################################################################
# CREATE EXTENSION delivery_outbox beside Citus's relcache callbacks
###########################################################################

# The workers, both libraries preloaded.
for my $w ($w1, $w2)
{
	$w->append_conf('postgresql.conf', $node_conf);
	$w->start;
	$w->safe_psql('postgres', 'CREATE EXTENSION citus');
}

# The coordinator with only Citus preloaded: delivery_outbox's library is
# loaded by CREATE EXTENSION, in a session where Citus and PostgreSQL
# already registered their callbacks.
$coord->append_conf('postgresql.conf', q{
shared_preload_libraries = 'citus'
max_prepared_transactions = 10
citus.node_conninfo = 'sslmode=disable'
citus.recover_2pc_interval = -1
});
$coord->start;
$coord->safe_psql('postgres',
	'CREATE EXTENSION citus; '
	  . "SELECT citus_set_coordinator_host('127.0.0.1', $port{coordinator}); "
	  . join('; ',
		map { "SELECT citus_add_node('127.0.0.1', " . $_->port . ')' }
		  ($w1, $w2))
	  . q{;
CREATE TABLE probe (tenant_id text NOT NULL, n int);
SELECT create_distributed_table('probe', 'tenant_id', shard_count => 2);
});

# What makes each module register its callbacks: a distributed query
# (Citus's metadata and worker-node caches, its group id, the connection
# parameters of a node), a prepared plan, a composite type through the
# type cache, a relfilenode lookup.
my $touch_citus = q{
INSERT INTO probe VALUES ('a', 1), ('b', 2);
SELECT count(*) FROM probe;
SELECT count(*) FROM citus_tables;
SELECT count(*) FROM citus_get_active_worker_nodes();
PREPARE p AS SELECT count(*) FROM probe WHERE tenant_id = $1;
EXECUTE p('a');
SELECT count(*) FROM (SELECT row_to_json(c) FROM pg_class c LIMIT 1) s;
SELECT pg_filenode_relation(0, pg_relation_filenode('pg_class'));
};
my ($rc, $out, $err) = $coord->psql(
	'postgres', $touch_citus . q{
CREATE EXTENSION delivery_outbox;
SELECT outbox_enqueue('probe', 'probe', '\x00') > 0;
SELECT count(*) FROM delivery_outbox;
SELECT count(*) FROM probe;
ANALYZE delivery_outbox, probe;
SELECT count(*) FROM delivery_outbox;
}, on_error_stop => 1);
is($rc, 0,
	'CREATE EXTENSION delivery_outbox in a session where Citus registered its callbacks (not preloaded)'
);
unlike($err, qr/relcache_callback_list|FATAL/, '... no callback slot error')
  or diag $err;
unlike(slurp_file($coord->logfile), qr/relcache_callback_list/,
	'... nor in the server log');

# Now both preloaded on the coordinator too.
$coord->append_conf('postgresql.conf', $node_conf . q{
delivery_outbox.database = 'postgres'
delivery_outbox.sweep_interval = '1h'
delivery_outbox.reclaim_after = -1
synchronous_standby_names = 'nobody_here'
synchronous_commit = local
wal_level = replica
max_wal_senders = 2
});
$coord->restart;
is( $coord->safe_psql(
		'postgres',
		'SELECT string_agg(nodeport::text, \',\' ORDER BY nodeport) FROM pg_dist_node WHERE isactive'
	),
	join(',', sort { $a <=> $b } values %port),
	'three active nodes');

($rc, $out, $err) = $coord->psql('postgres', $touch_citus . q{
SELECT outbox_enqueue('probe', 'probe', '\x01') > 0;
SELECT count(*) FROM delivery_outbox;
ANALYZE delivery_outbox;
SELECT count(*) FROM probe;
}, on_error_stop => 1);
is($rc, 0, 'a session touching Citus and delivery_outbox with both preloaded')
  or diag $err;
$coord->safe_psql('postgres',
	q{DROP TABLE probe; DELETE FROM delivery_outbox WHERE recipient = 'probe'});

###########################################################################
# orders, distributed by tenant
###########################################################################

$coord->safe_psql('postgres', q{
CREATE TABLE orders (tenant_id text NOT NULL, order_id bigint NOT NULL,
                     amount numeric NOT NULL CHECK (amount > 0),
                     PRIMARY KEY (tenant_id, order_id));
SELECT create_distributed_table('orders', 'tenant_id', shard_count => 4);
});

# a tenant whose shard is on each worker
my %tenant;
for my $line (
	split /\n/,
	$coord->safe_psql(
		'postgres', q{
SELECT t, nodeport
  FROM (SELECT 't' || g AS t, g FROM generate_series(1, 50) g) s
  JOIN citus_shards c
    ON c.shardid = get_shard_id_for_distribution_column('orders', s.t)
 ORDER BY g}))
{
	my ($t, $p) = split /\|/, $line;
	$tenant{$p} //= $t;
}
my ($t1, $t2) = ($tenant{ $w1->port }, $tenant{ $w2->port });
ok(defined $t1 && defined $t2, "tenants on both workers ($t1, $t2)");

my $order_no = 0;

# The SQL of a producer's transaction body: an order for each tenant given
# (amount 10, or the amount after a colon: "t1:-1"), and an enqueue for
# each, in that order.
sub produce_sql
{
	my @sql;
	for my $spec (@_)
	{
		my ($t, $amount) = split /:/, $spec;
		$amount //= 10;
		$order_no++;
		push @sql,
		  "INSERT INTO orders VALUES ('$t', $order_no, $amount);",
		  "SELECT outbox_enqueue('billing', 'order.created', '\\x"
		  . sprintf('%04x', $order_no)
		  . "', '$t');";
	}
	return join("\n", @sql);
}

sub outbox_count
{
	my ($where) = @_;
	$where //= 'true';
	return $coord->safe_psql('postgres',
		"SELECT count(*) FROM delivery_outbox WHERE $where");
}

sub orders_count
{
	return $coord->safe_psql('postgres', 'SELECT count(*) FROM orders');
}

# Every id a relay heard until it hears a sentinel enqueued now by the
# producer session, in its notify mode (in deferred mode the worker sends
# the ids in the order of the commits): once the sentinel is heard, every
# earlier commit's notifications have been.
my $sentinels = 0;

sub heard_until_sentinel
{
	my ($r) = @_;
	$sentinels++;
	my $id = $producer->query_safe(
		"SELECT outbox_enqueue('sentinel', 'work', '\\x00')");
	my @got;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (!grep({ /^$id\@/ } @got) && time < $deadline)
	{
		push @got, heard($r);
		usleep(50_000) unless grep { /^$id\@/ } @got;
	}
	die "sentinel $id not heard" unless grep { /^$id\@/ } @got;
	return grep { !/^$id\@/ } @got;
}

$relay = listener($coord);
$producer = $coord->background_psql('postgres', on_error_stop => 0);
$producer_pid = $producer->query_safe('SELECT pg_backend_pid()');

###########################################################################
# a producer's transaction commits both; a CHECK failure on a worker undoes
# both
###########################################################################

my @ids = split /\n/,
  $producer->query_safe("BEGIN;\n" . produce_sql($t1, $t2) . "\nCOMMIT;");
is(scalar @ids, 2, 'two enqueues in the producer transaction');
is(orders_count(), 2, 'both orders committed');
is( $coord->safe_psql(
		'postgres', qq{
SELECT count(DISTINCT nodeport) FROM orders o
  JOIN citus_shards c ON c.shardid = get_shard_id_for_distribution_column('orders', o.tenant_id)}
	),
	2,
	'... on two workers');
is(outbox_count("id IN ($ids[0], $ids[1]) AND delivery_state = 'pending'"),
	2, 'both outbox rows committed, pending');
is_deeply([ heard_until_sentinel($relay) ],
	[ map { "$_\@$producer_pid" } @ids ],
	'one NOTIFY per enqueue, its id, from the producer');

my $outbox_before = outbox_count("recipient = 'billing'");
$producer->query("BEGIN;\n" . produce_sql($t1, "$t2:-1") . "\nCOMMIT;");
like($producer->{stderr}, qr/violates check constraint "orders_amount_check/,
	'a CHECK violation in a worker shard fails the transaction');
$producer->{stderr} = '';
is(orders_count(), 2, '... no order of it');
is(outbox_count("recipient = 'billing'"),
	$outbox_before, '... no outbox row of it');
is_deeply([ heard_until_sentinel($relay) ], [], '... no NOTIFY');

###########################################################################
# a worker stopped before COMMIT
###########################################################################

# The transaction's statements run, then worker $w stops (immediate), then
# COMMIT; returns the COMMIT's errors.
sub kill_before_commit
{
	my ($w, @tenants) = @_;
	$producer->query_safe("BEGIN;\n" . produce_sql(@tenants));
	$w->stop('immediate');
	$producer->query('COMMIT');
	my $err = $producer->{stderr};
	$producer->{stderr} = '';
	$producer->query('ROLLBACK');    # in case the COMMIT did not end it
	$producer->{stderr} = '';
	$w->start;
	return $err;
}

for my $case ([ 'rows on both workers', $w2, $t1, $t2 ],
	[ 'rows on one worker', $w1, $t1 ])
{
	my ($label, $w, @tenants) = @$case;
	my $orders = orders_count();
	$outbox_before = outbox_count("recipient = 'billing'");
	my $err = kill_before_commit($w, @tenants);
	like($err, qr/ERROR:/,
		"$label, its worker stopped before COMMIT: COMMIT fails");
	note "the COMMIT's error: $err";
	is(orders_count(), $orders, '... no order of it');
	is(outbox_count("recipient = 'billing'"),
		$outbox_before, '... no outbox row of it');
	is_deeply([ heard_until_sentinel($relay) ], [], '... no NOTIFY');
}
is($coord->safe_psql('postgres', 'SELECT recover_prepared_transactions()'),
	0, 'nothing left to recover');

###########################################################################
# a worker stopped during COMMIT, after the workers prepared and the
# coordinator wrote its commit record
###########################################################################

# synchronous_commit = on makes the COMMIT wait for a standby that does
# not exist (synchronous_standby_names = 'nobody_here'), after the commit
# record and before Citus's COMMIT PREPARED on the workers; cancelling the
# wait lets it go on.
$outbox_before = outbox_count("recipient = 'billing'");
my $orders_before = orders_count();
$producer->query_safe('SET synchronous_commit = on');
$producer->query_until(qr/committing\n/,
	"BEGIN;\n" . produce_sql($t1, $t2) . "\n\\echo committing\nCOMMIT;\n");
$coord->poll_query_until('postgres',
	"SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = $producer_pid"
) or die 'the producer does not wait in its COMMIT';
is( $w1->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts')
	  . $w2->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'),
	'11',
	'COMMIT held after its commit record: both workers prepared');
$w2->stop('immediate');
$coord->safe_psql('postgres', "SELECT pg_cancel_backend($producer_pid)");
$producer->query('SET synchronous_commit = local');
like(
	$producer->{stderr},
	qr/already committed locally/,
	'... the COMMIT goes on once the wait is cancelled');
like(
	$producer->{stderr},
	qr/failed to commit transaction on 127\.0\.0\.1:$port{worker2}/,
	'... Citus cannot COMMIT PREPARED on worker2, and says so');
$producer->{stderr} = '';
$w2->start;
is(outbox_count("recipient = 'billing'"),
	$outbox_before + 2, '... both outbox rows committed');
is($w2->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'),
	1, '... worker2 restarts with its transaction still prepared');
is($coord->safe_psql('postgres', 'SELECT recover_prepared_transactions()'),
	1, '... recover_prepared_transactions() commits it');
is(orders_count(), $orders_before + 2, '... both orders there');
is(scalar(heard_until_sentinel($relay)), 2, '... two NOTIFYs');

###########################################################################
# the coordinator stopped in its COMMIT: before its commit record (the
# workers prepared), and after
###########################################################################

# PostgreSQL's notify lock is taken after Citus prepared the workers and
# before the commit record, and held until the commit ends: a session that
# notified and waits for the non-existent standby holds it (it writes a
# row too: a transaction without an xid writes no commit record, and does
# not wait).
$coord->safe_psql('postgres', 'CREATE TABLE holder (n int)');
sub coordinator_killed_in_commit
{
	my ($before_record, @tenants) = @_;
	my $holder;
	if ($before_record)
	{
		$holder = $coord->background_psql('postgres', on_error_stop => 0);
		$holder->query_until(qr/holding\n/,
			"SET synchronous_commit = on;\nBEGIN;\nINSERT INTO holder VALUES (1);\n"
			  . "NOTIFY unrelated;\n\\echo holding\nCOMMIT;\n"
		);
		$coord->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
		) or die 'the lock holder does not wait';
	}
	else
	{
		$producer->query_safe('SET synchronous_commit = on');
	}
	$producer->query_until(qr/committing\n/,
		"BEGIN;\n" . produce_sql(@tenants) . "\n\\echo committing\nCOMMIT;\n");
	my $waits = $before_record ? 'Lock' : 'SyncRep';
	$coord->poll_query_until('postgres',
		"SELECT wait_event_type = '$waits' OR wait_event = '$waits' FROM pg_stat_activity WHERE pid = $producer_pid"
	) or die "the producer does not wait for $waits";
	my $prepared =
	  $w1->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts')
	  . $w2->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts');
	$coord->stop('immediate');
	$holder->{run}->kill_kill if $holder;
	$producer->{run}->kill_kill;
	$relay->{run}->kill_kill;
	$coord->start;
	$producer = $coord->background_psql('postgres', on_error_stop => 0);
	$producer_pid = $producer->query_safe('SELECT pg_backend_pid()');
	$relay = listener($coord);
	return $prepared;
}

for my $before (1, 0)
{
	my $label =
	  $before
	  ? 'coordinator stopped in COMMIT before its commit record'
	  : 'coordinator stopped in COMMIT after its commit record';
	my $expect = $before ? 0 : 2;
	$outbox_before = outbox_count("recipient = 'billing'");
	$orders_before = orders_count();
	is(coordinator_killed_in_commit($before, $t1, $t2), '11',
		"$label: both workers had prepared");
	is(outbox_count("recipient = 'billing'"),
		$outbox_before + $expect, "... $expect outbox rows after the restart");
	is($coord->safe_psql('postgres', 'SELECT recover_prepared_transactions()'),
		2, '... recover_prepared_transactions() settles both workers');
	is(orders_count(), $orders_before + $expect, "... $expect orders");
	is($w1->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts')
		  + $w2->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'),
		0, '... nothing left prepared');
}

# A transaction that writes on one worker only is not committed in two
# phases: Citus sends that worker its COMMIT in its pre-commit callback,
# before PostgreSQL's notify lock and the coordinator's commit record.  The
# coordinator stopped in between loses the outbox row of an order that
# stays: the one gap of Level 1, pinned here (docs/scale-out.md).
$outbox_before = outbox_count("recipient = 'billing'");
$orders_before = orders_count();
is(coordinator_killed_in_commit(1, $t1), '00',
	'one worker, coordinator stopped in COMMIT before its commit record: nothing prepared'
);
is(outbox_count("recipient = 'billing'"),
	$outbox_before, '... no outbox row after the restart');
is($coord->safe_psql('postgres', 'SELECT recover_prepared_transactions()'),
	0, '... nothing to recover');
is(orders_count(), $orders_before + 1,
	'... but the order committed on the worker (one-phase commit: the known gap)');

###########################################################################
# deferred wake-ups: from the worker, at commit, none for an abort
###########################################################################

wait_for_worker($coord);
my $worker_pid = worker_pid($coord);
$producer->query_safe('SET delivery_outbox.notify = deferred');
@ids = split /\n/,
  $producer->query_safe("BEGIN;\n" . produce_sql($t1, $t2) . "\nCOMMIT;");
$producer->query("BEGIN;\n" . produce_sql($t1, "$t2:-1") . "\nCOMMIT;");
$producer->{stderr} = '';
$producer->query_safe("BEGIN;\n" . produce_sql($t1, $t2));
$producer->query_safe('ROLLBACK');
is_deeply(
	[ heard_until_sentinel($relay) ],
	[ map { "$_\@$worker_pid" } @ids ],
	'deferred: one NOTIFY per committed enqueue, from the worker; none for the failed and the rolled-back transaction'
);
$producer->query_safe('RESET delivery_outbox.notify');

###########################################################################
# direct insert on and off
###########################################################################

for my $setting ('on', 'off')
{
	$producer->query_safe("SET delivery_outbox.direct_insert = $setting");
	@ids = split /\n/,
	  $producer->query_safe("BEGIN;\n" . produce_sql($t1, $t2) . "\nCOMMIT;");
	is( $coord->safe_psql(
			'postgres', qq{
SELECT string_agg(recipient || '/' || kind || '/' || tenant_id || '/' || delivery_state, ',' ORDER BY id)
  FROM delivery_outbox WHERE id IN ($ids[0], $ids[1])}),
		"billing/order.created/$t1/pending,billing/order.created/$t2/pending",
		"direct_insert = $setting: the rows");
	is_deeply([ heard_until_sentinel($relay) ],
		[ map { "$_\@$producer_pid" } @ids ],
		"direct_insert = $setting: their NOTIFYs");
}
$producer->query_safe('RESET delivery_outbox.direct_insert');

###########################################################################
# outbox_wait on the coordinator
###########################################################################

my $waiter = $coord->background_psql('postgres', on_error_stop => 0);
my $waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
$waiter->query_until(
	qr/waiting\n/, q{\echo waiting
SELECT 'result:' || outbox_wait('60 s', 'waited-for');
});
$coord->poll_query_until('postgres',
	"SELECT wait_event = 'Extension' FROM pg_stat_activity WHERE pid = $waiter_pid"
) or die 'the waiter does not sleep';
my $t0 = time;
$producer->query_safe("BEGIN;\nINSERT INTO orders VALUES ('$t2', "
	  . ++$order_no
	  . ", 5);\nSELECT outbox_enqueue('waited-for', 'x', '\\x01', '$t2');\nCOMMIT;"
);
like($waiter->query_until(qr/result:\w+\n/, ''),
	qr/result:true/, 'outbox_wait returns true at the producer\'s commit');
cmp_ok(time - $t0, '<', 30, '... well before its timeout');
$waiter->quit;

###########################################################################
# the worker's reclaim on the coordinator
###########################################################################

my $claimed = $coord->safe_psql('postgres',
	"SELECT id FROM outbox_claim(1, 'waited-for')");
is(outbox_count("id = $claimed AND delivery_state = 'delivered'"),
	1, 'a claimed row is delivered');
heard($relay);
$coord->append_conf('postgresql.conf', q{
delivery_outbox.reclaim_after = 1
delivery_outbox.sweep_interval = '200ms'
});
$coord->reload;
$coord->poll_query_until('postgres',
	"SELECT delivery_state = 'pending' FROM delivery_outbox WHERE id = $claimed"
) or die 'not reclaimed';
pass('the worker reclaims it');
is_deeply([ grep { /^$claimed\@/ } wait_heard($relay, 1) ],
	[ "$claimed\@$worker_pid" ], '... and notifies it');
$coord->append_conf('postgresql.conf', q{
delivery_outbox.reclaim_after = -1
delivery_outbox.sweep_interval = '1h'
});
$coord->reload;

###########################################################################
# two relays, each row claimed once and acked
###########################################################################

# everything left, then 120 more orders and rows over 12 tenants
$coord->safe_psql('postgres', q{SELECT outbox_ack(array_agg(id)) FROM
  (SELECT id FROM outbox_claim(100000)) c});
my @tenants = ($t1, $t2, map { "r$_" } 1 .. 10);
my %enqueued;
for my $round (1 .. 10)
{
	$enqueued{$_} = 1 for split /\n/,
	  $producer->query_safe("BEGIN;\n" . produce_sql(@tenants) . "\nCOMMIT;");
}
is(scalar keys %enqueued, 120, '120 rows enqueued in 10 producer transactions');

my @relays = map { $coord->background_psql('postgres') } 1 .. 2;
my @last = ('{}', '{}');
my %claims;
my $rounds = 0;
while ($rounds++ < 100)
{
	# relay 0 holds its batch while relay 1 claims; then both commit
	$relays[0]->query_safe('BEGIN');
	my @a = split /\n/,
	  $relays[0]->query_safe("SELECT id FROM outbox_ack_claim('$last[0]', 7)");
	my @b = split /\n/,
	  $relays[1]->query_safe("SELECT id FROM outbox_ack_claim('$last[1]', 5)");
	$relays[0]->query_safe('COMMIT');
	$claims{$_}++ for @a, @b;
	$last[0] = '{' . join(',', @a) . '}';
	$last[1] = '{' . join(',', @b) . '}';
	last if !@a && !@b;
}
is_deeply([ sort { $a <=> $b } keys %claims ],
	[ sort { $a <=> $b } keys %enqueued ],
	'the relays claimed every row');
is(scalar(grep { $claims{$_} != 1 } keys %claims), 0, '... each once');
is(outbox_count("delivery_state <> 'acked'"), 0, '... and acked them all');
is( $coord->safe_psql(
		'postgres',
		'SELECT count(*) FROM delivery_outbox WHERE delivery_attempts <> 1 AND id IN ('
		  . join(',', keys %enqueued) . ')'),
	0,
	'... with one delivery attempt each');
$_->quit for @relays;

$producer->quit;
$relay->quit;
$coord->stop;
$w1->stop;
$w2->stop;
done_testing();
