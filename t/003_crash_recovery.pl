
# Copyright (c) 2026, delivery_outbox developers

# t/003_crash_recovery.pl
#
# The outbox survives a crash.  Producers enqueue under load, each in its
# own psql, and print an id only after the COMMIT of the transaction that
# took it has returned; the server is then stopped in "immediate" mode (no
# shutdown checkpoint, every backend killed at once) while they run, and
# started again, so that WAL recovery rebuilds the table.  Afterwards:
#
# - every id whose COMMIT a producer saw is there, pending, as enqueued;
# - a transaction still open at the crash left nothing: its enqueue is gone,
#   its claims are pending again with the attempts they had before it, its
#   acks never happened;
# - rows acked (and claims committed) before the crash are exactly as they
#   were, timestamps included: nothing acked went back;
# - the id sequence continues past every id handed out (no duplicate key),
#   and the recovered rows move through the state machine as usual.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

# Thousands of tiny transactions: keep the log readable.
my $node = outbox_node(
	'main',
	conf => "log_statement = none\n",
	extension => ['postgres']);

# Rows settled before the crash:
#   agent:acked       5 rows claimed and acked
#   agent:delivered   3 rows claimed (committed), not acked
#   agent:open        3 rows claimed once and released (pending, 1 attempt),
#                     then claimed again by a transaction open at the crash
#   agent:acking      2 rows claimed (committed), then acked by a
#                     transaction open at the crash
$node->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:acked', 'work', '\x01') FROM generate_series(1, 5);
SELECT outbox_enqueue('agent:delivered', 'work', '\x02') FROM generate_series(1, 3);
SELECT outbox_enqueue('agent:open', 'work', '\x03', 'tenant-1') FROM generate_series(1, 3);
SELECT outbox_enqueue('agent:acking', 'work', '\x04') FROM generate_series(1, 2);
SELECT count(*) FROM outbox_claim(10, 'agent:acked');
SELECT outbox_ack(ARRAY(SELECT id FROM delivery_outbox
                        WHERE recipient = 'agent:acked'));
SELECT count(*) FROM outbox_claim(10, 'agent:delivered');
SELECT count(*) FROM outbox_claim(10, 'agent:acking');
SELECT outbox_release(ARRAY(SELECT id FROM outbox_claim(10, 'agent:open')));
});

is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(recipient || ':' || delivery_state || ':' || n || ':' || a,
                  ',' ORDER BY recipient)
FROM (SELECT recipient, delivery_state, count(*) n,
             string_agg(DISTINCT delivery_attempts::text, '/') a
      FROM delivery_outbox GROUP BY 1, 2) s}),
	'agent:acked:acked:5:1,agent:acking:delivered:2:1,'
	  . 'agent:delivered:delivered:3:1,agent:open:pending:3:1',
	'rows settled before the crash are in the states under test');

my $settled =
  rows_of($node, where => q{recipient IN ('agent:acked', 'agent:delivered')});
my $open_before =
  rows_of($node, where => q{recipient IN ('agent:open', 'agent:acking')});

# Transactions open at the crash: a claim, an ack and an enqueue.
my $claimer = $node->background_psql('postgres');
$claimer->query_safe('BEGIN');
is( $claimer->query_safe(
		q{SELECT count(*) FROM outbox_claim(10, 'agent:open')}),
	'3',
	'an open transaction claims agent:open\'s rows');
my $acker = $node->background_psql('postgres');
$acker->query_safe('BEGIN');
is( $acker->query_safe(
		q{SELECT outbox_ack(ARRAY(SELECT id FROM delivery_outbox
		                          WHERE recipient = 'agent:acking'))}),
	'2',
	'an open transaction acks agent:acking\'s rows');
my $enqueuer = $node->background_psql('postgres');
$enqueuer->query_safe('BEGIN');
my $uncommitted_id = $enqueuer->query_safe(
	q{SELECT outbox_enqueue('agent:uncommitted', 'work', '\x05')});
like($uncommitted_id, qr/^\d+$/, 'an open transaction enqueues a row');

# The producers: each runs a script of many short transactions and prints
# "committed <id>" only once COMMIT has returned.  ON_ERROR_STOP makes psql
# exit when the connection goes; its output goes to a file, which psql
# flushes when it exits.
my $tempdir = PostgreSQL::Test::Utils::tempdir;
my $nproducers = 3;
my $per_producer = 20000;
my @producers;
for my $p (1 .. $nproducers)
{
	my $script = "$tempdir/producer$p.sql";
	open my $fh, '>', $script or die "cannot write $script: $!";
	for my $i (1 .. $per_producer)
	{
		my $tenant = $i % 2 ? 'NULL' : "'tenant-$p'";
		print $fh "BEGIN;\n"
		  . "SELECT outbox_enqueue('producer:$p', 'work', '\\x"
		  . sprintf('%08x', $i)
		  . "'::bytea, $tenant) AS id \\gset\n"
		  . "COMMIT;\n"
		  . "\\echo committed :id\n";
	}
	close $fh;
	my $out = "$tempdir/producer$p.out";
	my $err = "$tempdir/producer$p.err";
	my $h = IPC::Run::start(
		[
			'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres'), '-f', $script
		],
		'<', \undef, '>', $out, '2>', $err);
	push @producers, { handle => $h, out => $out, err => $err, n => $p };
}

# Crash in the middle of the run: once every producer has committed a fair
# number of rows, and while they all still have thousands to go.
ok( $node->poll_query_until(
		'postgres', qq{
SELECT count(DISTINCT recipient) = $nproducers AND min(n) >= 100
FROM (SELECT recipient, count(*) n FROM delivery_outbox
      WHERE recipient LIKE 'producer:%' GROUP BY 1) s}),
	'the producers are committing');
$node->stop('immediate');

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
		"producer $p->{n} was interrupted by the crash");
	like(
		slurp_file($p->{err}),
		qr/server closed the connection|connection to server .* failed|terminating connection|no connection to the server/,
		"producer $p->{n} lost its connection");
	$seen += $n;
}
cmp_ok($seen, '>=', 100 * $nproducers, "producers saw $seen commits");

# The sessions that had transactions open are gone with the server.
$_->quit for ($claimer, $acker, $enqueuer);

$node->start;

# Every id whose commit a producer saw is there, pending, untouched, with
# the recipient of that producer.
my $ids = join(',', sort { $a <=> $b } keys %committed);
my $missing = $node->safe_psql(
	'postgres', qq{
SELECT count(*) FROM unnest('{$ids}'::bigint[]) AS c(id)
WHERE NOT EXISTS (SELECT 1 FROM delivery_outbox o WHERE o.id = c.id)});
is($missing, '0', 'every id whose COMMIT returned survived the crash');
my $recipients = join(',', map { "($_,$committed{$_})" } sort { $a <=> $b } keys %committed);
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM (VALUES $recipients) AS c(id, p)
JOIN delivery_outbox o USING (id)
WHERE o.recipient = 'producer:' || c.p AND o.delivery_state = 'pending'
  AND o.delivery_attempts = 0 AND o.delivered_at IS NULL
  AND o.acked_at IS NULL AND o.kind = 'work'
  AND length(o.payload) = 4}),
	scalar(keys %committed),
	'... each as enqueued: pending, no attempt, its producer\'s recipient');
# A commit can be durable without its client hearing about it (the crash
# came between the two); there is at most one such row per producer.
cmp_ok(
	$node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM delivery_outbox WHERE recipient LIKE 'producer:%'}
	),
	'<=',
	$seen + $nproducers,
	'no more producer rows than commits seen, plus one in flight each');

# Settled rows are exactly as they were; nothing acked went back.
is(rows_of($node, where => q{recipient IN ('agent:acked', 'agent:delivered')}),
	$settled,
	'rows acked or claimed before the crash are unchanged, timestamps too');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM delivery_outbox WHERE delivery_state = 'acked'}),
	'5', 'no acked row reverted, and no uncommitted ack survived');

# What the open transactions did is gone.
is(rows_of($node, where => q{recipient IN ('agent:open', 'agent:acking')}),
	$open_before,
	'claims and acks uncommitted at the crash left the rows as before them');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(delivery_state || ':' || delivery_attempts, ',' ORDER BY id)
FROM delivery_outbox WHERE recipient = 'agent:open'}),
	'pending:1,pending:1,pending:1',
	'rows claimed by a transaction open at the crash are pending with unchanged attempts');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM delivery_outbox WHERE id = $uncommitted_id"),
	'0', 'an enqueue uncommitted at the crash left no row');

# The sequence is past every id handed out before the crash, committed or
# not: a new enqueue collides with nothing.
my $max_before = $node->safe_psql('postgres',
	'SELECT max(id) FROM delivery_outbox');
$max_before = $uncommitted_id if $uncommitted_id > $max_before;
my ($ret, $new_id, $stderr) = $node->psql('postgres',
	q{SELECT outbox_enqueue('agent:after', 'work', '\x06')});
is($ret, 0, 'enqueue after recovery succeeds') or diag $stderr;
cmp_ok($new_id, '>', $max_before, 'the new id is past every id taken before');

# The recovered rows keep moving: the rows whose claim was lost are
# claimable again (attempt 2), the uncommitted acks can be made again.
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(delivery_state || ':' || delivery_attempts, ',' ORDER BY id)
FROM outbox_claim(10, 'agent:open', 'tenant-1')}),
	'delivered:2,delivered:2,delivered:2',
	'rows whose claim was lost are claimed again, attempt 2');
is( $node->safe_psql(
		'postgres', q{
SELECT outbox_ack(ARRAY(SELECT id FROM delivery_outbox
                        WHERE recipient IN ('agent:open', 'agent:acking')))}),
	'5', 'and acked');
my $pending = $node->safe_psql('postgres',
	q{SELECT count(*) FROM delivery_outbox WHERE delivery_state = 'pending'});
is($node->safe_psql('postgres', 'SELECT pending FROM outbox_stats()'),
	$pending, 'outbox_stats agrees with the table after recovery');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_claim(1000000)'),
	$pending, 'every pending row is claimable after recovery');

$node->stop;

done_testing();
