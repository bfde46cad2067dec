
# Copyright (c) 2026, delivery_outbox developers

# t/018_patroni.pl
#
# Failover under an HA manager: Patroni with etcd, two PostgreSQL nodes on
# loopback, Patroni's synchronous_mode on, the leader's postmaster killed.
#
# A single-member etcd and two Patroni processes, all started here, as the
# user the tests run as, on 127.0.0.1 ports that are free, with their data
# under the test's directories; both nodes preload delivery_outbox with its
# worker serving postgres.  Once the replica is the synchronous standby
# Patroni chose, the extension is created on the leader, a producer (psql,
# one transaction per row) enqueues and records every id whose COMMIT
# returned, and this test claims and acks some rows.  Then the leader's
# postmaster gets SIGKILL (its pid from postmaster.pid; its Patroni keeps
# running).  With primary_start_timeout = 0 that Patroni does not restart
# it in place: it releases the leader key, and the other Patroni takes it
# and promotes its node.  The producer's connection breaks.  On the new
# leader:
#
# - every id whose COMMIT the producer saw is there;
# - every row the old leader showed acked is acked, with the same acked_at;
#   no row has fewer attempts than it showed;
# - the worker (backend_type 'delivery_outbox sweeper') runs;
# - new enqueues commit, with ids past every id seen before.
#
# Then the old leader rejoins as a replica of the new one (rewound with
# pg_rewind if its WAL went past the promotion), and Patroni makes it the
# synchronous standby again.
#
# Skipped, with the reason, when patroni or etcd is not installed (Debian
# packages patroni and etcd-server; scripts/common.sh installs them when it
# can).  Every process it starts it stops by pid: Patroni with SIGTERM
# (which stops its PostgreSQL), then etcd.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use HTTP::Tiny;
use Time::HiRes qw(time usleep);
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

# find_bin($name): $name's path on PATH (or in /usr/bin), or undef.
sub find_bin
{
	my ($name) = @_;
	for my $dir (split(/:/, $ENV{PATH} // ''), '/usr/bin')
	{
		return "$dir/$name" if $dir ne '' && -f "$dir/$name" && -x _;
	}
	return undef;
}

my $patroni_bin = find_bin('patroni');
my $etcd_bin = find_bin('etcd');
if (!$patroni_bin || !$etcd_bin)
{
	plan skip_all => 'Patroni recipe: '
	  . join(' and ',
		(!$patroni_bin ? ('patroni') : ()),
		(!$etcd_bin ? ('etcd') : ()))
	  . ' not found on PATH (Debian packages: apt-get install patroni etcd-server)';
}

# Bounded waits.  The whole test takes 20-30 s here.
my $wait_secs = 60;
my $tempdir = PostgreSQL::Test::Utils::tempdir;
my $log_path = $PostgreSQL::Test::Utils::log_path;
my $http = HTTP::Tiny->new(timeout => 2);
my $os_user = getpwuid($<);

# Everything started here, for the END block: IPC::Run handles.
my %procs;

# stop_proc($name, $grace): SIGTERM to that process (by its pid), wait up
# to $grace seconds for it to exit, then SIGKILL.
sub stop_proc
{
	my ($name, $grace) = @_;
	my $h = delete $procs{$name} or return;
	my $pid = $h->{KIDS}[0]{PID};
	my $t0 = time;
	$h->kill_kill(grace => $grace);
	diag(sprintf('%s (pid %d) stopped in %.1f s', $name, $pid, time - $t0));
	return;
}

my @nodes;

# Stop what is still running when the test ends early: each Patroni (it
# stops its PostgreSQL), then etcd; then any postmaster a Patroni left
# behind, by the pid in its postmaster.pid.
END
{
	local $?;
	stop_proc($_, 30) for grep { /^patroni/ } sort keys %procs;
	stop_proc('etcd', 10);
	for my $node (@nodes)
	{
		next unless -f $node->data_dir . '/postmaster.pid';
		system('pg_ctl', '-D', $node->data_dir, '-m', 'immediate', 'stop');
	}
}

# wait_until($secs, $sub): call $sub every 100 ms until it returns true, or
# $secs have passed; what it returned last.
sub wait_until
{
	my ($secs, $sub) = @_;
	my $deadline = time + $secs;
	while (1)
	{
		my $r = $sub->();
		return $r if $r || time >= $deadline;
		usleep(100_000);
	}
}

# poll($node, $sql, $secs): poll until $sql returns t.
sub poll
{
	my ($node, $sql, $secs) = @_;
	return wait_until(
		$secs // $wait_secs,
		sub {
			my ($ret, $out) = $node->psql('postgres', $sql);
			return $ret == 0 && $out eq 't';
		});
}

# http_status($port, $path): the status of GET http://127.0.0.1:$port$path
# (599 when nothing answered).
sub http_status
{
	my ($port, $path) = @_;
	return $http->get("http://127.0.0.1:$port$path")->{status};
}

#
# etcd: one member, client and peer URLs on loopback, data in the test's
# temporary directory.
#
my $etcd_client = PostgreSQL::Test::Cluster::get_free_port();
my $etcd_peer = PostgreSQL::Test::Cluster::get_free_port();
$procs{etcd} = IPC::Run::start(
	[
		$etcd_bin,
		'--name' => 'outbox-test',
		'--data-dir' => "$tempdir/etcd",
		'--listen-client-urls' => "http://127.0.0.1:$etcd_client",
		'--advertise-client-urls' => "http://127.0.0.1:$etcd_client",
		'--listen-peer-urls' => "http://127.0.0.1:$etcd_peer",
		'--initial-advertise-peer-urls' => "http://127.0.0.1:$etcd_peer",
		'--initial-cluster' => "outbox-test=http://127.0.0.1:$etcd_peer",
		'--initial-cluster-state' => 'new',
		'--initial-cluster-token' => 'outbox-test'
	],
	'<', '/dev/null', '>&', "$log_path/018_patroni_etcd.log");
ok( wait_until(
		$wait_secs,
		sub {
			my $r = $http->get("http://127.0.0.1:$etcd_client/health");
			return $r->{success} && $r->{content} =~ /"health":\s*"true"/;
		}),
	"etcd is up on 127.0.0.1:$etcd_client");

#
# Two Patroni nodes.  PostgreSQL::Test::Cluster objects give each a free
# port, a data directory path and a socket directory, and run psql against
# it; Patroni creates and runs the cluster itself (these objects never
# start or stop anything).
#
my %node;
for my $name ('pg1', 'pg2')
{
	my $n = PostgreSQL::Test::Cluster->new($name);
	my $api = PostgreSQL::Test::Cluster::get_free_port();
	push @nodes, $n;
	$node{$name} = { node => $n, api => $api, name => $name };
	my $config = "$tempdir/$name.yml";
	my $data = $n->data_dir;
	my $port = $n->port;
	my $sock = $n->host;
	my $bindir = $n->config_data('--bindir');
	open my $fh, '>', $config or die "cannot write $config: $!";
	print $fh <<"EOF";
scope: outbox_test
namespace: /service/
name: $name

restapi:
  listen: 127.0.0.1:$api
  connect_address: 127.0.0.1:$api

etcd3:
  host: 127.0.0.1:$etcd_client

bootstrap:
  dcs:
    ttl: 20
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    # a crashed primary fails over at once instead of restarting in place
    primary_start_timeout: 0
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        shared_preload_libraries: delivery_outbox
        delivery_outbox.database: postgres
        delivery_outbox.sweep_interval: 1s
        wal_log_hints: 'on'
  initdb:
    - encoding: UTF8
    - locale: C
    - no-sync

postgresql:
  listen: 127.0.0.1:$port
  connect_address: 127.0.0.1:$port
  data_dir: $data
  bin_dir: $bindir
  pgpass: $tempdir/$name.pgpass
  use_unix_socket: true
  authentication:
    superuser:
      username: $os_user
      password: outbox-test
    replication:
      username: replicator
      password: outbox-test
  parameters:
    unix_socket_directories: '$sock'
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust

tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
  nosync: false
EOF
	close $fh;

	# Patroni gets no PG* variables from the test harness, and its stdin
	# from /dev/null, as under systemd: the postmaster and its backends
	# inherit it.  A backend waiting for the synchronous standby when the
	# postmaster dies stops waiting and, its client output turned off,
	# reads its next command from stdin: at EOF it exits, but on an open
	# pipe it would wait forever, keeping its client's connection open
	# and the old shared memory attached, so that the node could not
	# start again.
	local %ENV = map { $_ => $ENV{$_} } grep { !/^PG/ } keys %ENV;
	$procs{"patroni_$name"} = IPC::Run::start([ $patroni_bin, $config ],
		'<', '/dev/null', '>&', $n->logfile);
}

# leader(): the name of the node whose Patroni answers 200 on /leader, if
# exactly one does.
sub leader
{
	my @l = grep { http_status($node{$_}{api}, '/leader') == 200 } sort keys %node;
	return @l == 1 ? $l[0] : undef;
}

my $t0 = time;
my $leader_name = wait_until($wait_secs, \&leader);
ok($leader_name, 'Patroni elected a leader') or BAIL_OUT('no Patroni leader');
my ($replica_name) = grep { $_ ne $leader_name } sort keys %node;
my $leader = $node{$leader_name}{node};
my $replica = $node{$replica_name}{node};
diag(sprintf('leader %s, replica %s, after %.1f s', $leader_name, $replica_name, time - $t0));

# The replica is streaming and is the synchronous standby Patroni chose:
# its /sync answers 200 (Patroni has written it to the /sync key, which is
# what allows a failover to it), and the leader's walsender says "sync".
ok( wait_until($wait_secs,
		sub { http_status($node{$replica_name}{api}, '/sync') == 200 }),
	"$replica_name is Patroni's synchronous standby");
ok( poll(
		$leader, qq{
SELECT sync_state = 'sync' AND state = 'streaming'
  FROM pg_stat_replication WHERE application_name = '$replica_name'}),
	'... and streams as the synchronous standby');
diag(sprintf('synchronous after %.1f s', time - $t0));

$leader->safe_psql('postgres', 'CREATE EXTENSION delivery_outbox');
my $old_worker = wait_for_worker($leader);
ok($old_worker, "the worker serves postgres on the leader (pid $old_worker)");
# synchronous_commit = on waits for the standby's flush, not its replay:
# wait for the replay
ok( poll(
		$replica,
		q{SELECT count(*) = 1 FROM pg_extension WHERE extname = 'delivery_outbox'}),
	'the replica has the extension');
is(worker_pid($replica), '', 'no worker on the replica');

#
# A producer: one transaction per row, "committed <id>" printed only once
# COMMIT has returned; ON_ERROR_STOP ends it when the connection goes.
#
my $per_producer = 20000;
my $script = "$tempdir/producer.sql";
open my $pfh, '>', $script or die "cannot write $script: $!";
for my $i (1 .. $per_producer)
{
	print $pfh "BEGIN;\n"
	  . "SELECT outbox_enqueue('producer', 'work', '\\x"
	  . sprintf('%08x', $i)
	  . "'::bytea) AS id \\gset\n"
	  . "COMMIT;\n"
	  . "\\echo committed :id\n";
}
close $pfh;
my $producer_timer = IPC::Run::timeout(300);
$procs{producer} = IPC::Run::start(
	[
		'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
		'-d', $leader->connstr('postgres'), '-f', $script
	],
	'<', \undef, '>', "$tempdir/producer.out", '2>', "$tempdir/producer.err",
	$producer_timer);

ok(poll($leader, 'SELECT count(*) >= 200 FROM delivery_outbox'),
	'the producer is committing on the leader');

# A relay's work, in this session: claim 50 and ack them, three times, and
# claim 20 more without acking them.
for (1 .. 3)
{
	$leader->safe_psql('postgres',
		'SELECT outbox_ack(ARRAY(SELECT id FROM outbox_claim(50)))');
}
$leader->safe_psql('postgres', 'SELECT count(*) FROM outbox_claim(20)');

# What the leader shows, last thing before its postmaster dies.  Visible
# to this session means committed and flushed on the synchronous standby.
my %before;
foreach my $line (split /\n/,
	$leader->safe_psql('postgres',
		q{SELECT id, delivery_state, delivery_attempts, coalesce(acked_at::text, '')
		    FROM delivery_outbox}))
{
	my ($id, $state, $attempts, $acked_at) = split /\|/, $line, -1;
	$before{$id} = [ $state, $attempts, $acked_at ];
}
my $acked_before = grep { $_->[0] eq 'acked' } values %before;
my $delivered_before = grep { $_->[0] eq 'delivered' } values %before;
is($acked_before, 150, 'the leader shows 150 rows acked');

#
# SIGKILL to the leader's postmaster; its Patroni keeps running.
#
my $pidfile = $leader->data_dir . '/postmaster.pid';
my $postmaster = (split /\n/, slurp_file($pidfile))[0];
ok($postmaster =~ /^\d+$/ && kill(0, $postmaster),
	"the leader's postmaster runs (pid $postmaster)");
kill 'KILL', $postmaster;
my $t_kill = time;
diag(   "SIGKILL to $leader_name\'s postmaster, which showed "
	  . scalar(keys %before)
	  . " rows, $acked_before acked, $delivered_before delivered");

my $new_leader_name = wait_until(
	$wait_secs,
	sub {
		http_status($node{$replica_name}{api}, '/leader') == 200
		  && http_status($node{$leader_name}{api}, '/leader') != 200;
	});
ok($new_leader_name, "Patroni made $replica_name the leader");
ok(poll($replica, 'SELECT NOT pg_is_in_recovery()'),
	"... and promoted it");
diag(sprintf('%s promoted %.1f s after the SIGKILL', $replica_name, time - $t_kill));

# The producer lost its connection: psql exits by itself (ON_ERROR_STOP).
my %committed;
my $producer_exited =
  eval { $producer_timer->start(30); $procs{producer}->finish; 1 };
if ($producer_exited)
{
	delete $procs{producer};
}
else
{
	diag("producer: $@");
	stop_proc('producer', 5);
}
ok($producer_exited, "the producer's connection broke: psql exited by itself");
foreach my $line (split /\n/, slurp_file("$tempdir/producer.out"))
{
	$committed{$1} = 1 if $line =~ /^committed (\d+)$/;
}
my $seen = keys %committed;
cmp_ok($seen, '>=', 200, "the producer saw $seen commits");
cmp_ok($seen, '<', $per_producer, '... and was interrupted by the failover');

# Every id whose commit the producer saw is on the new leader.
my $ids = join(',', sort { $a <=> $b } keys %committed);
is( $replica->safe_psql(
		'postgres', qq{
SELECT count(*) FROM unnest('{$ids}'::bigint[]) AS c(id)
WHERE NOT EXISTS (SELECT FROM delivery_outbox o
                   WHERE o.id = c.id AND o.recipient = 'producer'
                     AND length(o.payload) = 4)}),
	'0',
	'new leader: every id whose COMMIT returned is there');
cmp_ok($replica->safe_psql('postgres', 'SELECT count(*) FROM delivery_outbox'),
	'<=', $seen + 1,
	'... and at most one more row (a commit in flight)');

# What the old leader showed: acked rows acked as they were, none pending
# again, no row with fewer attempts.
my $before_values = join(',',
	map { "($_,'$before{$_}[0]',$before{$_}[1],'$before{$_}[2]')" }
	  sort { $a <=> $b } keys %before);
is( $replica->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (VALUES $before_values) AS b(id, state, attempts, acked_at)
LEFT JOIN delivery_outbox o USING (id)
WHERE o.id IS NULL OR o.delivery_attempts < b.attempts}),
	'0',
	'new leader: every row the old leader showed is there, with at least its attempts');
is( $replica->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (VALUES $before_values) AS b(id, state, attempts, acked_at)
JOIN delivery_outbox o USING (id)
WHERE b.state = 'acked'
  AND o.delivery_state = 'acked' AND o.acked_at::text = b.acked_at
  AND o.delivery_attempts = b.attempts}),
	$acked_before,
	"new leader: all $acked_before acked rows are acked, as they were");

# The worker starts on the promoted node.
my $new_worker = wait_for_worker($replica);
ok($new_worker, "new leader: the worker serves postgres (pid $new_worker)");

# Enqueues commit there, with ids past every id seen.
my $max_before = (sort { $b <=> $a } (keys %committed, keys %before))[0];
my @after_ids = split /\n/,
  $replica->safe_psql('postgres',
	join('', map { "SELECT outbox_enqueue('after', 'work', '\\x0a0b0c0d');\n" } 1 .. 20));
is(scalar(@after_ids), 20, 'new leader: 20 more enqueues commit');
cmp_ok((sort { $a <=> $b } @after_ids)[0], '>', $max_before,
	'... with ids past every id seen before the failover');

# The old leader comes back as a replica of the new one, and Patroni makes
# it the synchronous standby.
ok( wait_until($wait_secs,
		sub { http_status($node{$leader_name}{api}, '/sync') == 200 }),
	"$leader_name rejoined as the synchronous standby");
diag(sprintf('%s rejoined %.1f s after the SIGKILL', $leader_name, time - $t_kill));
my $rows_new = $replica->safe_psql('postgres', 'SELECT count(*) FROM delivery_outbox');
ok(poll($leader, "SELECT count(*) = $rows_new FROM delivery_outbox"),
	"... with all $rows_new rows");
is(worker_pid($leader), '', '... and no worker there');

#
# Stop both Patronis (each stops its PostgreSQL), then etcd.
#
for my $name ($leader_name, $replica_name)
{
	stop_proc("patroni_$name", 30);
	ok(!-f $node{$name}{node}->data_dir . '/postmaster.pid',
		"Patroni $name stopped its PostgreSQL");
}
stop_proc('etcd', 10);

done_testing();
