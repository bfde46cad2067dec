
# Copyright (c) 2026, delivery_outbox developers

# t/017_failover.pl
#
# Failover to a synchronous streaming standby, under load.  A primary and
# one standby, both preloading delivery_outbox with its worker serving
# postgres; the primary names the standby in synchronous_standby_names.
# Producers (psql, one transaction per row) enqueue and record every id
# whose COMMIT returned; relays (examples/python/relay.py, with a
# multi-host connection and target_session_attrs=read-write) claim, push
# and ack.  In the middle of it the primary is stopped in "immediate" mode
# and the standby promoted.  On the promoted node:
#
# - every id whose COMMIT a producer saw is there, with its recipient;
# - every row the primary showed acked (its ack committed) is acked, with
#   the same acked_at: no acked row is pending again; no row has fewer
#   attempts than the primary showed;
# - no row is in a state its bookkeeping contradicts;
# - the worker, which does not run during recovery, starts;
# - new enqueues take ids past every id seen before;
# - the relays, refused by the standby while it is read-only, reconnect to
#   the promoted node by themselves, ack what they pushed before the
#   connection broke, drain, and (with the worker reclaiming claims whose
#   result was lost) deliver every row: in the end each is acked and each
#   was pushed to its recipient.
#
# synchronous_commit = on, not remote_apply: "on" makes a COMMIT wait until
# the standby has flushed the commit record, and promotion replays all WAL
# the standby has, so every commit a client saw survives the failover.
# remote_apply would also wait for the standby to replay it, which only
# matters to someone reading the standby before promotion (read-your-writes
# on a hot standby); this test reads it only afterwards.  A commit waiting
# for the standby is not yet visible to other sessions on the primary, so a
# row the primary showed to this test's queries was already on the standby.
#
# Without psycopg 3 (python3 -c 'import psycopg' fails; scripts/common.sh
# installs python3-psycopg for the examples suite) psql loops stand in for
# the relays under load and the relay checks are skipped, with the reason.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $tempdir = PostgreSQL::Test::Utils::tempdir;
my $relay_py = "$FindBin::RealBin/../examples/python/relay.py";
my $python = '/usr/bin/python3';
my $have_psycopg =
  -x $python && system($python, '-c', 'import psycopg') == 0 && -f $relay_py;
my $no_psycopg =
  "$python cannot import psycopg (apt-get install python3-psycopg)";
# Bounded waits: generous, for a busy machine.
my $wait_secs = 90;

# poll($node, $sql, $secs): poll until $sql returns t, or $secs have passed.
sub poll
{
	my ($node, $sql, $secs) = @_;
	my $deadline = time + ($secs // $wait_secs);
	while (time < $deadline)
	{
		my ($ret, $out) = $node->psql('postgres', $sql);
		return 1 if $ret == 0 && $out eq 't';
		usleep(100_000);
	}
	return 0;
}

# count_in($file, $re): how many times $file matches $re.
sub count_in
{
	my ($file, $re) = @_;
	return 0 unless -e $file;
	my @m = slurp_file($file) =~ /$re/g;
	return scalar @m;
}

# wait_file($file, $re, $count, $secs): poll until $file matches $re $count
# times, or $secs have passed.
sub wait_file
{
	my ($file, $re, $count, $secs) = @_;
	my $deadline = time + ($secs // $wait_secs);
	while (time < $deadline)
	{
		return 1 if count_in($file, $re) >= $count;
		usleep(100_000);
	}
	return 0;
}

#
# The primary and its synchronous standby
#
# The worker sweeps every second and reclaims claims older than 3 s: a
# claim that committed but whose result never reached its relay comes back
# soon after the failover.
my $primary = outbox_node(
	'primary',
	init => { allows_streaming => 1 },
	preload => 1,
	conf => qq{delivery_outbox.database = 'postgres'
delivery_outbox.sweep_interval = '1s'
delivery_outbox.reclaim_after = '3s'
log_statement = none
});
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
# The standby's own setting, for after its promotion: it has no standby of
# its own, and a synchronous_standby_names left from the primary would make
# every commit on it wait forever.
$standby->append_conf('postgresql.conf', "synchronous_standby_names = ''\n");
$standby->start;

# The walreceiver's application_name is the standby's cluster_name,
# "standby".  Set after the base backup, so the standby does not inherit it.
$primary->append_conf(
	'postgresql.conf', q{
synchronous_standby_names = 'standby'
synchronous_commit = on
});
$primary->reload;
ok( poll(
		$primary, q{
SELECT sync_state = 'sync' AND state = 'streaming'
  FROM pg_stat_replication WHERE application_name = 'standby'}),
	'the standby streams as the synchronous standby');

$primary->safe_psql('postgres', 'CREATE EXTENSION delivery_outbox');
$primary->wait_for_catchup($standby);
is( $standby->safe_psql(
		'postgres',
		q{SELECT extversion IS NOT NULL FROM pg_extension WHERE extname = 'delivery_outbox'}),
	't',
	'the standby has the extension');
my $primary_worker = wait_for_worker($primary);
ok($primary_worker, "the worker serves postgres on the primary (pid $primary_worker)");
is(worker_pid($standby), '', 'no worker on the standby while it is in recovery');

#
# Producers: each runs a script of many one-row transactions and prints
# "committed <id>" only once COMMIT has returned; ON_ERROR_STOP ends it
# when the connection goes (psql flushes its output when it exits).
#
my $nproducers = 3;
my $per_producer = 20000;
my @producers;
for my $p (1 .. $nproducers)
{
	my $script = "$tempdir/producer$p.sql";
	open my $fh, '>', $script or die "cannot write $script: $!";
	for my $i (1 .. $per_producer)
	{
		print $fh "BEGIN;\n"
		  . "SELECT outbox_enqueue('producer:$p', 'work', '\\x"
		  . sprintf('%08x', $i)
		  . "'::bytea) AS id \\gset\n"
		  . "COMMIT;\n"
		  . "\\echo committed :id\n";
	}
	close $fh;
	my $out = "$tempdir/producer$p.out";
	my $err = "$tempdir/producer$p.err";
	my $h = IPC::Run::start(
		[
			'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
			'-d', $primary->connstr('postgres'), '-f', $script
		],
		'<', \undef, '>', $out, '2>', $err);
	push @producers, { handle => $h, out => $out, err => $err, n => $p };
}

#
# Relays: the Python example, two of them, on a multi-host connection that
# only accepts a read-write server.  relay.py takes its connection from the
# libpq environment: PGHOST and PGPORT with one entry per server are the
# connection string's host=...,... port=...,..., PGTARGETSESSIONATTRS its
# target_session_attrs.  Each prints "recipient id" per push (the
# recipients' view) and logs on stderr.  SWEEP_EVERY=0: the worker reclaims.
#
my $nrelays = 2;
my $multihost = sprintf('host=%s,%s port=%d,%d dbname=postgres target_session_attrs=read-write',
	$primary->host, $standby->host, $primary->port, $standby->port);
my @relays;
for my $r (1 .. $nrelays)
{
	my $out = "$tempdir/relay$r.out";
	my $err = "$tempdir/relay$r.err";
	my $h;
	if ($have_psycopg)
	{
		local %ENV = (
			%ENV,
			PGHOST => $primary->host . ',' . $standby->host,
			PGPORT => $primary->port . ',' . $standby->port,
			PGDATABASE => 'postgres',
			PGTARGETSESSIONATTRS => 'read-write',
			PGCONNECT_TIMEOUT => 10,
			PGAPPNAME => "failover-relay-$r",
			BATCH => 10,
			PUSH_DELAY_MS => 2,
			WAIT_MS => 2000,
			SWEEP_EVERY => 0,
			RETRY_AFTER_MS => 20,
			BACKOFF_MIN_MS => 100,
			BACKOFF_MAX_MS => 800);
		$h = IPC::Run::start([ $python, $relay_py ],
			'<', \undef, '>', $out, '2>', $err);
	}
	else
	{
		# Stand-ins for the load only: claim and ack in one statement.
		my $script = "$tempdir/relay$r.sql";
		open my $fh, '>', $script or die "cannot write $script: $!";
		print $fh "SELECT outbox_ack(ARRAY(SELECT id FROM outbox_claim(10)));\n"
		  for 1 .. 50000;
		close $fh;
		$h = IPC::Run::start(
			[
				'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
				'-d', $primary->connstr('postgres'), '-f', $script
			],
			'<', \undef, '>', $out, '2>', $err);
	}
	push @relays, { handle => $h, out => $out, err => $err, n => $r };
}
# A relay still running when the test ends early is stopped by its handle.
END
{
	local $?;
	$_->{handle}->kill_kill(grace => 5)
	  for grep { $have_psycopg && !$_->{stopped} } @relays;
}
diag($have_psycopg
	? "relays: examples/python/relay.py x $nrelays on '$multihost'"
	: "relays: psql stand-ins ($no_psycopg)");

# The failover comes in the middle of the run: once every producer has
# committed a fair number of rows and the relays have acked some.
ok( poll(
		$primary, qq{
SELECT count(DISTINCT recipient) = $nproducers AND min(n) >= 100
       AND (SELECT count(*) >= 100 FROM delivery_outbox
             WHERE delivery_state = 'acked')
FROM (SELECT recipient, count(*) n FROM delivery_outbox GROUP BY 1) s}),
	'producers are committing and relays acking on the primary');

# What the primary shows, last thing before it dies: every row with its
# state, attempts and acked_at.  Visible to this session means committed
# and flushed on the synchronous standby.
my %before;
foreach my $line (split /\n/,
	$primary->safe_psql('postgres',
		q{SELECT id, delivery_state, delivery_attempts, coalesce(acked_at::text, '')
		    FROM delivery_outbox}))
{
	my ($id, $state, $attempts, $acked_at) = split /\|/, $line, -1;
	$before{$id} = [ $state, $attempts, $acked_at ];
}
my $acked_before = grep { $_->[0] eq 'acked' } values %before;
$primary->stop('immediate');
my $t_kill = time;
diag(   "primary stopped (immediate) showing "
	  . scalar(keys %before)
	  . " rows, $acked_before acked");

my %committed;
my $seen = 0;
for my $p (@producers)
{
	$p->{handle}->finish;
	my $n = 0;
	foreach my $line (split /\n/, slurp_file($p->{out}))
	{
		next unless $line =~ /^committed (\d+)$/;
		$committed{$1} = $p->{n};
		$n++;
	}
	cmp_ok($n, '<', $per_producer,
		"producer $p->{n} was interrupted by the failover ($n commits seen)");
	$seen += $n;
}
cmp_ok($seen, '>=', 100 * $nproducers, "producers saw $seen commits");

SKIP:
{
	skip "relay checks: $no_psycopg", 2 unless $have_psycopg;

	# Both relays lose their connection and keep being refused (the
	# primary is gone; the standby is read-only, and would refuse LISTEN
	# too) while they back off; none gets a session: a relay logs
	# "connected" only once connected and listening.
	my $lost = 1;
	for my $r (@relays)
	{
		$lost &&= wait_file($r->{err}, qr/connection lost/, 1)
		  && wait_file($r->{err}, qr/reconnecting in/, 3);
	}
	ok($lost, 'the relays lost the primary and keep trying to reconnect');
	ok( !grep({ count_in($_->{err}, qr/^relay: connected/m) != 1 } @relays),
		'... and none connected anywhere while the standby was read-only');
}
if (!$have_psycopg)
{
	$_->{handle}->finish, $_->{stopped} = 1 for @relays;
}

#
# Promotion
#
$standby->promote;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	'f', 'the standby is promoted');
diag(sprintf('promoted %.1f s after the primary was stopped', time - $t_kill));

# Every id whose commit a producer saw is there, with its producer's
# recipient.
my $ids = join(',', sort { $a <=> $b } keys %committed);
is( $standby->safe_psql(
		'postgres', qq{
SELECT count(*) FROM unnest('{$ids}'::bigint[]) AS c(id)
WHERE NOT EXISTS (SELECT FROM delivery_outbox o WHERE o.id = c.id)}),
	'0',
	'promoted: every id whose COMMIT returned is there');
my $recipients =
  join(',', map { "($_,$committed{$_})" } sort { $a <=> $b } keys %committed);
is( $standby->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (VALUES $recipients) AS c(id, p)
JOIN delivery_outbox o USING (id)
WHERE o.recipient = 'producer:' || c.p AND o.kind = 'work' AND length(o.payload) = 4}),
	scalar(keys %committed),
	'... each with its producer\'s recipient and payload');
# A commit can be durable without its client hearing about it; at most one
# such row per producer.
cmp_ok($standby->safe_psql('postgres', 'SELECT count(*) FROM delivery_outbox'),
	'<=', $seen + $nproducers,
	'no more rows than commits seen, plus one in flight per producer');

# What the primary showed: acked rows are acked, with the same acked_at;
# no row went back in attempts.  (The relays and the worker may have moved
# rows on since the promotion: acked is terminal and attempts only grow.)
my $before_values = join(',',
	map { "($_,'$before{$_}[0]',$before{$_}[1],'$before{$_}[2]')" }
	  sort { $a <=> $b } keys %before);
is( $standby->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (VALUES $before_values) AS b(id, state, attempts, acked_at)
LEFT JOIN delivery_outbox o USING (id)
WHERE o.id IS NULL OR o.delivery_attempts < b.attempts}),
	'0',
	'promoted: every row the primary showed is there, with at least its attempts');
is( $standby->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (VALUES $before_values) AS b(id, state, attempts, acked_at)
JOIN delivery_outbox o USING (id)
WHERE b.state = 'acked'
  AND o.delivery_state = 'acked' AND o.acked_at::text = b.acked_at
  AND o.delivery_attempts = b.attempts}),
	$acked_before,
	"promoted: all $acked_before rows acked on the primary are acked, as they were (none pending again)");

# No row in a state its bookkeeping contradicts.
my $bad_rows_sql = q{
SELECT count(*) FROM delivery_outbox
WHERE NOT CASE delivery_state
  WHEN 'pending' THEN acked_at IS NULL
                      AND (delivered_at IS NOT NULL) = (delivery_attempts >= 1)
  WHEN 'delivered' THEN acked_at IS NULL AND delivered_at IS NOT NULL
                        AND delivery_attempts >= 1
                        AND created_at <= delivered_at
  WHEN 'acked' THEN acked_at IS NOT NULL AND delivered_at IS NOT NULL
                    AND delivery_attempts >= 1
                    AND created_at <= delivered_at AND delivered_at <= acked_at
  ELSE false END};
is($standby->safe_psql('postgres', $bad_rows_sql),
	'0', 'promoted: no row in an impossible state');

# The worker starts on the promoted node.
my $new_worker = wait_for_worker($standby);
ok($new_worker, "promoted: the worker serves postgres (pid $new_worker)");

# Producers go on against the new primary: ids past every id seen.
my $max_before = (sort { $b <=> $a } (keys %committed, keys %before))[0];
my $after = $standby->safe_psql('postgres',
	join('', map { "SELECT outbox_enqueue('producer:after', 'work', '\\x0a0b0c0d');\n" } 1 .. 50));
my @after_ids = split /\n/, $after;
is(scalar(@after_ids), 50, 'promoted: 50 more enqueues commit');
cmp_ok((sort { $a <=> $b } @after_ids)[0], '>', $max_before,
	'... with ids past every id seen before the failover');
$committed{$_} = 'after' for @after_ids;
my $all_ids = join(',', sort { $a <=> $b } keys %committed);

SKIP:
{
	skip "relay checks: $no_psycopg", 6 unless $have_psycopg;

	ok( poll(
			$standby, qq{
SELECT count(DISTINCT application_name) = $nrelays FROM pg_stat_activity
 WHERE application_name LIKE 'failover-relay-%' AND state IS NOT NULL}),
		'the relays reconnected to the promoted node by themselves');

	# Every row ends acked: the relays drain, ack late what they pushed
	# before the break, and get back (from the worker's reclaim) the claims
	# whose result they never saw.
	my $done = poll(
		$standby, qq{
SELECT bool_and(delivery_state = 'acked')
       AND (SELECT count(*) FROM unnest('{$all_ids}'::bigint[]) AS c(id)
             JOIN delivery_outbox o USING (id)
             WHERE o.delivery_state = 'acked') = @{[ scalar keys %committed ]}
FROM delivery_outbox});
	ok($done, 'the relays finished delivering: every committed row is acked, and every other row');
	diag(
		$standby->safe_psql(
			'postgres', q{
SELECT 'stats: ' || pending || ' pending, ' || delivered || ' delivered, '
       || acked || ' acked' FROM outbox_stats()}))
	  unless $done;
	is($standby->safe_psql('postgres', $bad_rows_sql),
		'0', '... with consistent bookkeeping');
	diag(
		$standby->safe_psql(
			'postgres', q{
SELECT 'worker on the promoted node: ' || reclaimed || ' reclaimed'
  FROM delivery_outbox_activity WHERE datname = 'postgres'}));

	# SIGTERM: each relay stops cleanly.
	my $clean = 1;
	for my $r (@relays)
	{
		# TERM, then KILL after 15 s; full_result is the wait status, 0
		# only for an exit 0 (a KILL makes it 9).
		$r->{handle}->kill_kill(grace => 15);
		$r->{stopped} = 1;
		my $status = $r->{handle}->full_result(0);
		$clean &&= defined $status && $status == 0;
		diag("relay $r->{n}: "
			  . ((slurp_file($r->{err}) =~ /^relay: (stopped: .*)$/m)[0] // 'no stop line'));
		diag("relay $r->{n}: $1")
		  if slurp_file($r->{err}) =~ /^relay: (acked \d+ rows pushed before the connection was lost)$/m;
	}
	ok($clean, 'SIGTERM stops each relay cleanly (exit 0)');
	ok( !grep({ count_in($_->{err}, qr/^relay: connected/m) < 2 } @relays),
		'each relay connected twice: to the primary, then to the promoted node');

	# The recipients' view: every committed row pushed to its recipient
	# at least once, and nothing pushed that is not a row of the outbox.
	my %pushed;
	my $lines = 0;
	for my $r (@relays)
	{
		foreach my $line (split /\n/, slurp_file($r->{out}))
		{
			next unless $line =~ /^(\S+) (\d+)$/;
			$pushed{$2}{$1} = 1;
			$lines++;
		}
	}
	my @missing = grep {
		my $want = $committed{$_} eq 'after' ? 'producer:after' : "producer:$committed{$_}";
		!$pushed{$_}{$want}
	} keys %committed;
	my %row_recipient = map { split /\|/ } split /\n/,
	  $standby->safe_psql('postgres', 'SELECT id, recipient FROM delivery_outbox');
	my @extra = grep {
		my $id = $_;
		!defined $row_recipient{$id}
		  || grep { $_ ne $row_recipient{$id} } keys %{ $pushed{$id} }
	} keys %pushed;
	ok( !@missing && !@extra,
		'the recipients got every committed row, to its recipient, and nothing else')
	  or diag('missing: ' . join(',', sort { $a <=> $b } @missing)
		  . ' extra: ' . join(',', sort { $a <=> $b } @extra));
	diag("recipients got $lines pushes of "
		  . scalar(keys %pushed)
		  . ' rows: '
		  . ($lines - keys %pushed)
		  . ' at-least-once duplicates');
}

$standby->stop;

done_testing();
