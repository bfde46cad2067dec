
# Copyright (c) 2026, delivery_outbox developers

# t/015_policy.pl
#
# The delivery policy (1.2, issue 12) where the background worker and time
# come in, with the library preloaded and a worker serving "postgres"
# ("other" has the extension and no worker):
#
# - wake-ups of delayed rows: an enqueue (or a release) whose not_before
#   (retry_after) lies in the future sends no NOTIFY at its commit; the
#   worker sends one when the row falls due: never before its not_before,
#   within a few seconds of it (bound: 10 s), on the outbox's own channel,
#   once; at the default sweep_interval (30 s), so not by waiting for a
#   sweep: right after CREATE EXTENSION (the worker started before it) and
#   in steady state;
# - outbox_wait returns when a row falls due, not before its not_before
#   (in the served database, and in one without a worker, where
#   outbox_next_due says when);
# - the worker dead-letters ('expired') pending rows past their ttl or
#   expires_at, never before, in bounded batches (more than one transaction
#   for more rows than a batch, none bigger than the bound), and delivered
#   ones past their expiry that its reclaim brings back;
# - max_attempts through the worker's reclaim: a row reclaimed at attempt
#   max_attempts is dead-lettered ('max_attempts');
# - backoff: with backoff_base = 1 s, a row released after attempt 1 is not
#   claimable for 0.5 s, after attempt 2 for 1 s, and claimable again
#   within a few seconds;
# - a scheduled row past its ttl is dead-lettered by the sweep, not only
#   once it falls due;
# - the counters dead_lettered and redriven of delivery_outbox_activity move
#   by exactly what was done, per outbox, and only at commit; a dead letter
#   is not counted as released, reclaimed or purged, a redrive counts as an
#   enqueue too.
#
# Times are compared strictly where the contract is strict ("not before
# not_before") and generously where it says "about" (10 s).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

# The generous bound for "within about a second".
my $soon = 10;

# The most rows with an expires_at that one dead-lettering batch of the
# worker may move (its SWEEPER_MAX_ROWS); the bounded-batch test expires
# more than twice as many.
my $batch_bound = 10000;
my $many = 25000;

my $node = outbox_node(
	'main',
	preload => 1,
	conf => q{
delivery_outbox.database = 'postgres'
delivery_outbox.reclaim_after = -1
delivery_outbox.retain_acked = -1
max_prepared_transactions = 2
},
	databases => ['other'],
	extension => [ 'postgres', 'other' ]);
my $worker = wait_for_worker($node);

$node->safe_psql(
	'postgres', q{
CREATE SCHEMA tenant_w;
SELECT outbox_create('tenant_w', channel => 'tenant_w_wakeups');
CREATE SCHEMA tenant_x;
SELECT outbox_create('tenant_x');
CREATE SCHEMA tenant_m;
SELECT outbox_create('tenant_m');
CREATE SCHEMA tenant_b;
SELECT outbox_create('tenant_b');
CREATE SCHEMA tenant_c;
SELECT outbox_create('tenant_c');
});

# The notifications $session received since the last call, on every
# channel, as [channel, payload, pid, time heard] (the time just after the
# statement that collected them returned).  heard_on: those on $channel.
sub heard_all
{
	my ($session) = @_;
	my $out = $session->query_safe('SELECT 1');
	my $t = time;
	my @got;
	while ($out =~
		/^Asynchronous notification "([^"]*)" with payload "([^"]*)" received from server process with PID (\d+)\.$/mg
	  )
	{
		push @got, [ $1, $2, $3, $t ];
	}
	return @got;
}

sub heard_on
{
	my ($session, $channel) = @_;
	return map { [ @$_[ 1 .. 3 ] ] } grep { $_->[0] eq $channel } heard_all($session);
}

# Poll $session every 20 ms until it heard $payload on $channel, or
# $timeout seconds passed; what it heard on $channel, in order, as
# [payload, pid, time heard].
sub wait_for_payload
{
	my ($session, $channel, $payload, $timeout) = @_;
	my $deadline = time + $timeout;
	my @got;
	while (time < $deadline)
	{
		push @got, heard_on($session, $channel);
		last if grep { $_->[0] eq $payload } @got;
		usleep(20_000);
	}
	return @got;
}

# Enqueue a row whose not_before is $delay from now (server clock) into
# $outbox; returns (id, not_before as epoch seconds).
sub enqueue_delayed
{
	my ($recipient, $delay, $outbox, $db) = @_;
	my $ob = defined $outbox ? ", outbox => '$outbox'" : '';
	my $row = $node->safe_psql(
		$db // 'postgres', qq{
SELECT id || '|' || extract(epoch FROM nb)
  FROM (SELECT clock_timestamp() + interval '$delay' AS nb) t,
       LATERAL outbox_enqueue('$recipient', 'work', '\\x01', not_before => t.nb$ob) id});
	return split /\|/, $row;
}

###########################################################################
# Wake-ups of delayed rows (sweep_interval at its default, 30 s)
###########################################################################

my $relay = listener($node);
$relay->query_safe('LISTEN tenant_w_wakeups');

# First right after CREATE EXTENSION, the worker having started before it
# (as it does when the server is configured first): the first row
# scheduled is woken within seconds of its not_before, not at the worker's
# next sweep.
my ($id, $nb) = enqueue_delayed('agent:d', '2 s');
my @now = heard_on($relay, 'delivery_outbox');
is(scalar(@now), 0, 'a row enqueued with a future not_before: no wake-up at its commit');
usleep(500_000);
@now = heard_on($relay, 'delivery_outbox');
is(scalar(@now), 0, '... nor half a second later');
my @got = wait_for_payload($relay, 'delivery_outbox', $id, $nb - time + $soon);
my ($hit) = grep { $_->[0] eq $id } @got;
ok(defined $hit, "the worker notified the delayed row $id");
SKIP:
{
	skip 'no wake-up', 3 unless defined $hit;
	cmp_ok($hit->[2], '>=', $nb, 'not before its not_before');
	cmp_ok($hit->[2], '<=', $nb + $soon, "within $soon s of it");
	is($hit->[1], $worker, 'sent by the worker');
	note sprintf('heard %.3f s after not_before', $hit->[2] - $nb);
}
is(scalar(grep { $_->[0] ne $id } @got), 0, 'no other wake-up');
usleep(2_500_000);
@now = heard_on($relay, 'delivery_outbox');
is(scalar(@now), 0, 'once: no second wake-up for it');
is($node->safe_psql('postgres', "SELECT count(*) FROM outbox_claim(10, 'agent:d')"),
	'1', 'the row is claimable');

# From here on the worker has swept since the extension was created (a
# reload makes it sweep at once).
my $reload_ts = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->reload;
$node->poll_query_until(
	'postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'delivery_outbox sweeper' AND datname = 'postgres'
   AND state = 'idle' AND state_change > '$reload_ts'})
  or die 'the worker did not sweep after the reload';
heard_all($relay);

# One row, in steady state.
($id, $nb) = enqueue_delayed('agent:d', '2 s');
@now = heard_on($relay, 'delivery_outbox');
is(scalar(@now), 0, 'steady state: no wake-up at the commit of a delayed row');
@got = wait_for_payload($relay, 'delivery_outbox', $id, $nb - time + $soon);
($hit) = grep { $_->[0] eq $id } @got;
ok( defined $hit && $hit->[2] >= $nb && $hit->[2] <= $nb + $soon && $hit->[1] eq $worker,
	"steady state: the worker woke row $id not before its not_before, within $soon s");
note sprintf('steady state: heard %.3f s after not_before', $hit->[2] - $nb) if defined $hit;
$node->safe_psql('postgres', "SELECT count(*) FROM outbox_claim(10, 'agent:d')");

# A transaction that commits after its row fell due, the worker having
# meanwhile woken a row due later (its position is past the first row):
# the commit sends the worker back, and the row is woken right after it.
my $late = $node->background_psql('postgres');
$late->query_safe('BEGIN');
my $late_id = $late->query_safe(
	"SELECT outbox_enqueue('agent:late', 'work', '\\x01', not_before => clock_timestamp() + interval '0.3 s')");
$late_id =~ s/\s+//g;
($id, $nb) = enqueue_delayed('agent:d', '1 s');
@got = wait_for_payload($relay, 'delivery_outbox', $id, $nb - time + $soon);
ok((grep { $_->[0] eq $id } @got), "the row due later ($id) was woken first");
ok(!(grep { $_->[0] eq $late_id } @got), "the uncommitted row ($late_id) was not");
my $commit_time = time;
$late->query_safe('COMMIT');
@got = wait_for_payload($relay, 'delivery_outbox', $late_id, $soon);
($hit) = grep { $_->[0] eq $late_id } @got;
ok(defined $hit && $hit->[1] eq $worker && $hit->[2] <= $commit_time + $soon,
	"a row committed after it fell due ($late_id) is woken after the commit, by the worker");
$late->quit;
$node->safe_psql('postgres', "SELECT count(*) FROM outbox_claim(10)");
heard_all($relay);

# The same with two-phase commit: a row that fell due while its transaction
# was prepared is woken right after COMMIT PREPARED (which may come from
# another session).
my $prep = $node->background_psql('postgres');
$prep->query_safe('BEGIN');
my $prep_id = $prep->query_safe(
	"SELECT outbox_enqueue('agent:prep', 'work', '\\x01', not_before => clock_timestamp() + interval '0.3 s')");
$prep_id =~ s/\s+//g;
$prep->query_safe("PREPARE TRANSACTION 'policy_prep'");
$prep->quit;
($id, $nb) = enqueue_delayed('agent:d', '1 s');
@got = wait_for_payload($relay, 'delivery_outbox', $id, $nb - time + $soon);
ok(!(grep { $_->[0] eq $prep_id } @got), "the prepared row ($prep_id) was not woken before COMMIT PREPARED");
$commit_time = time;
$node->safe_psql('postgres', "COMMIT PREPARED 'policy_prep'");
@got = wait_for_payload($relay, 'delivery_outbox', $prep_id, $soon);
($hit) = grep { $_->[0] eq $prep_id } @got;
ok(defined $hit && $hit->[1] eq $worker && $hit->[2] <= $commit_time + $soon,
	"a prepared row that fell due is woken after COMMIT PREPARED, by the worker");
$node->safe_psql('postgres', "SELECT count(*) FROM outbox_claim(10)");
heard_all($relay);

# Three rows due one after another, in another order than their ids, one on
# a created outbox with a channel of its own: each heard after its
# not_before, on its channel.
my ($id3, $nb3) = enqueue_delayed('agent:d', '3 s');
my ($id1, $nb1) = enqueue_delayed('agent:d', '1 s');
my ($idw, $nbw) = enqueue_delayed('agent:d', '2 s', 'tenant_w.delivery_outbox');
my %when;
my %channel_of = (delivery_outbox => 'default', tenant_w_wakeups => 'tenant_w');
my $deadline = $nb3 + $soon;
while (time < $deadline && (keys %when) < 3)
{
	for my $h (heard_all($relay))
	{
		$when{ ($channel_of{ $h->[0] } // $h->[0]) . ":$h->[1]" } //= $h->[3];
	}
	usleep(20_000);
}
is( join(',', sort keys %when),
	join(',', sort("default:$id1", "default:$id3", "tenant_w:$idw")),
	'three delayed rows, each woken on its outbox\'s channel, nothing else');
for my $k ([ "default:$id1", $nb1 ], [ "default:$id3", $nb3 ], [ "tenant_w:$idw", $nbw ])
{
	my ($key, $due) = @$k;
	ok( defined $when{$key} && $when{$key} >= $due && $when{$key} <= $due + $soon,
		"$key: heard not before its not_before, within $soon s");
}

# A release with a retry_after: no wake-up at the release, one when due.
$node->safe_psql('postgres',
	q{SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:rel'], ARRAY['work'], ARRAY['\x02']::bytea[])});
heard_on($relay, 'delivery_outbox');
my $rid = $node->safe_psql('postgres', q{SELECT id FROM outbox_claim(1, 'agent:rel')});
my $rnb = (split /\n/, $node->safe_psql(
	'postgres', qq{
SELECT outbox_release(ARRAY[$rid]::bigint[], retry_after => '2 s');
SELECT extract(epoch FROM not_before) FROM delivery_outbox WHERE id = $rid}))[-1];
@now = heard_on($relay, 'delivery_outbox');
is(scalar(@now), 0, 'a release with retry_after 2 s: no wake-up at its commit');
@got = wait_for_payload($relay, 'delivery_outbox', $rid, $rnb - time + $soon);
($hit) = grep { $_->[0] eq $rid } @got;
ok( defined $hit && $hit->[2] >= $rnb && $hit->[2] <= $rnb + $soon,
	'the released row is woken when due: not before, within 10 s');
$node->safe_psql('postgres', q{SELECT count(*) FROM outbox_claim(100)});
$relay->quit;

###########################################################################
# outbox_wait returns when a row falls due
###########################################################################

# Start outbox_wait($args) in $w (a background psql in $db whose backend
# is $wpid); returns once it is sleeping.
sub start_wait
{
	my ($w, $wpid, $args, $db) = @_;
	$w->query_until(
		qr/waiting\n/, qq{\\echo waiting
SELECT 'result:' || w || ':' || extract(epoch FROM clock_timestamp())
  FROM (SELECT outbox_wait($args) AS w OFFSET 0) s;
});
	$node->poll_query_until($db // 'postgres',
		qq{SELECT wait_event = 'Extension' FROM pg_stat_activity WHERE pid = $wpid})
	  or die "waiter $wpid does not sleep";
	return;
}

# The result of the wait: (found, epoch at return).
sub finish_wait
{
	my ($w) = @_;
	my $out = $w->query_until(qr/result:[^\n]*\n/, '');
	$out =~ /result:(\w+):([^\n]*)\n/ or die "no wait result in $out";
	return ($1, $2);
}

for my $db ('postgres', 'other')
{
	my $waiter = $node->background_psql($db);
	my $wpid = $waiter->query_safe('SELECT pg_backend_pid()');
	start_wait($waiter, $wpid, q{'30 s', 'agent:w'}, $db);
	my ($wid, $wnb) = enqueue_delayed('agent:w', '1.5 s', undef, $db);
	is( $node->safe_psql($db,
			"SELECT extract(epoch FROM outbox_next_due('agent:w')) = $wnb"),
		't', "$db: outbox_next_due is the row's not_before");
	my ($found, $ret) = finish_wait($waiter);
	is($found, 'true', "$db: outbox_wait returned true for a row falling due");
	cmp_ok($ret, '>=', $wnb, "$db: not before its not_before");
	cmp_ok($ret, '<=', $wnb + $soon, "$db: within $soon s of it");
	note sprintf('%s: returned %.3f s after not_before', $db, $ret - $wnb);
	is($node->safe_psql($db, "SELECT outbox_next_due('agent:w') IS NULL"),
		't', "$db: nothing more to come");

	# a release with retry_after: the release's commit does not end the
	# wait, the row falling due does
	$node->safe_psql($db, q{SELECT count(*) FROM outbox_claim(10, 'agent:w')});
	start_wait($waiter, $wpid, q{'30 s', 'agent:w'}, $db);
	my $t0 = time;
	my $relnb = $node->safe_psql(
		$db, qq{
SELECT outbox_release(ARRAY[$wid]::bigint[], retry_after => '1.5 s');
SELECT extract(epoch FROM not_before) FROM delivery_outbox WHERE id = $wid});
	$relnb = (split /\n/, $relnb)[-1];
	($found, $ret) = finish_wait($waiter);
	is($found, 'true', "$db: released with retry_after 1.5 s: outbox_wait returned true");
	cmp_ok($ret, '>=', $relnb, "$db: not before the retry_after");
	cmp_ok($ret, '<=', $relnb + $soon, "$db: within $soon s of it");
	$node->safe_psql($db, q{SELECT count(*) FROM outbox_claim(10)});
	$waiter->quit;
}

###########################################################################
# The worker dead-letters expired rows; max_attempts by its reclaim
###########################################################################

# Sweeps every 200 ms, reclaim after 1 s.
$node->safe_psql(
	'postgres', q{
ALTER SYSTEM SET delivery_outbox.sweep_interval = '200ms';
ALTER SYSTEM SET delivery_outbox.reclaim_after = '1s';
SELECT pg_reload_conf();
});

my $activity_sql = q{
SELECT coalesce(dead_lettered, 0) || '|' || coalesce(redriven, 0)
  FROM delivery_outbox_activity
 WHERE datname = current_database() AND outbox = '%s'::regclass};
sub counters
{
	my ($outbox) = @_;
	my $r = $node->safe_psql('postgres', sprintf($activity_sql, $outbox));
	return $r eq '' ? '0|0' : $r;
}
# counters before anything was dead-lettered in these outboxes
my $x_before = counters('tenant_x.delivery_outbox');
# (the three ready rows of the ttl test below; the scheduled one is counted
# apart)
my $d_before = counters('delivery_outbox');

# ttl: tenant_x's rows expire a second after created_at
$node->safe_psql(
	'postgres', q{
SELECT outbox_configure('tenant_x.delivery_outbox', ttl => '1 second');
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:t', 'agent:t', 'agent:t'],
       ARRAY['work', 'work', 'work'], ARRAY['\x01', '\x02', '\x03']::bytea[],
       outbox => 'tenant_x.delivery_outbox');
});
ok( $node->poll_query_until(
		'postgres', q{
SELECT count(*) = 3 FROM tenant_x.delivery_outbox_dead WHERE dead_reason = 'expired'}),
	'ttl: the worker dead-letters the three pending rows (expired)');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) || '|' || count(*) FILTER (WHERE dead_at >= created_at + interval '1 second')
  FROM tenant_x.delivery_outbox_dead}),
	'3|3', 'ttl: none before created_at + ttl');
is($node->safe_psql('postgres', 'SELECT count(*) FROM tenant_x.delivery_outbox'),
	'0', 'ttl: they left the outbox');
is($node->safe_psql('postgres',
		q{SELECT dead FROM outbox_stats('tenant_x.delivery_outbox')}),
	'3', 'outbox_stats counts them as dead');

# A row scheduled for an hour from now outlives its ttl long before it
# falls due: it is never handed out, and the sweep dead-letters it too.
my $sched = $node->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:t', 'work', '\x04', not_before => now() + interval '1 hour',
                      outbox => 'tenant_x.delivery_outbox')});
my $sched_dead = 0;
my $sched_deadline = time + 1 + $soon;
while (time < $sched_deadline)
{
	$sched_dead = $node->safe_psql('postgres',
		"SELECT count(*) FROM tenant_x.delivery_outbox_dead WHERE id = $sched AND dead_reason = 'expired'");
	last if $sched_dead;
	usleep(100_000);
}
is($sched_dead, '1',
	"ttl: a row scheduled past its ttl is dead-lettered by the sweep within $soon s of its ttl, not when it falls due");
$node->safe_psql('postgres', "DELETE FROM tenant_x.delivery_outbox WHERE id = $sched");

# expires_at: one pending row, and one delivered whose expiry passes while
# it is out; the worker's reclaim brings it back, dead
my ($pe, $de) = split /\n/, $node->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:e', 'work', '\x01', expires_at => clock_timestamp() + interval '1 s');
SELECT outbox_enqueue('agent:e2', 'work', '\x02', expires_at => clock_timestamp() + interval '1 s');
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox_claim(10, 'agent:e2')}),
	'1', 'expires_at: one of the two rows claimed before its expiry');
ok( $node->poll_query_until(
		'postgres', qq{
SELECT count(*) = 2 FROM delivery_outbox_dead
 WHERE id IN ($pe, $de) AND dead_reason = 'expired'}),
	'expires_at: the worker dead-letters the pending row and the reclaimed delivered one');
is( $node->safe_psql(
		'postgres', qq{
SELECT string_agg(id || ':' || delivery_attempts || ':' || (dead_at >= expires_at), ',' ORDER BY id)
  FROM delivery_outbox_dead WHERE id IN ($pe, $de)}),
	"$pe:0:true,$de:1:true",
	'expires_at: none before its expiry; the delivered one with its attempt');

is(counters('tenant_x.delivery_outbox'),
	join('|', (split /\|/, $x_before)[0] + 3 + $sched_dead, (split /\|/, $x_before)[1]),
	'dead_lettered counts what the worker dead-lettered (tenant_x)');
is(counters('delivery_outbox'),
	join('|', (split /\|/, $d_before)[0] + 2, (split /\|/, $d_before)[1]),
	'dead_lettered counts the worker\'s two (default outbox)');

# max_attempts through the worker's reclaim
$node->safe_psql(
	'postgres', q{
SELECT outbox_configure('tenant_m.delivery_outbox', max_attempts => 2);
SELECT outbox_enqueue('agent:m', 'work', '\x01', outbox => 'tenant_m.delivery_outbox');
SELECT count(*) FROM outbox_claim(1, outbox => 'tenant_m.delivery_outbox');
});
ok( $node->poll_query_until(
		'postgres', q{
SELECT delivery_state = 'pending' AND delivery_attempts = 1 FROM tenant_m.delivery_outbox}),
	'max_attempts 2: after attempt 1 the worker reclaims the row to pending');
is( $node->safe_psql(
		'postgres',
		q{SELECT delivery_attempts FROM outbox_claim(1, outbox => 'tenant_m.delivery_outbox')}),
	'2', 'claimed again: attempt 2');
ok( $node->poll_query_until(
		'postgres', q{
SELECT count(*) = 1 FROM tenant_m.delivery_outbox_dead
 WHERE dead_reason = 'max_attempts' AND delivery_attempts = 2}),
	'after attempt 2 the worker\'s reclaim dead-letters it (max_attempts)');
is($node->safe_psql('postgres', 'SELECT count(*) FROM tenant_m.delivery_outbox'),
	'0', 'max_attempts: it left the outbox');

# Bounded batches: more expired rows than a batch holds.  Each batch is one
# transaction: the dead letters' xmin tells them apart.
$node->safe_psql(
	'postgres', qq{
SELECT outbox_configure('tenant_x.delivery_outbox', ttl => '0');
DELETE FROM tenant_x.delivery_outbox_dead;
});
# read before the rows go in: on a loaded machine the insert can take
# longer than their second, and the worker then dead-letters a batch of
# them before a read after it
my $x_mid = counters('tenant_x.delivery_outbox');
$node->safe_psql(
	'postgres', qq{
INSERT INTO tenant_x.delivery_outbox (recipient, kind, payload, expires_at)
SELECT 'agent:many', 'work', '\\x00', clock_timestamp() + interval '1 s'
  FROM generate_series(1, $many);
});
ok( $node->poll_query_until(
		'postgres', qq{
SELECT count(*) = $many FROM tenant_x.delivery_outbox_dead WHERE dead_reason = 'expired'}),
	"$many expired rows: the worker dead-letters every one");
my ($batches, $largest) = split /\|/, $node->safe_psql(
	'postgres', q{
SELECT count(*) || '|' || max(n)
  FROM (SELECT xmin::text, count(*) AS n FROM tenant_x.delivery_outbox_dead GROUP BY 1) b});
note "dead-lettered in $batches batches, the largest $largest rows";
cmp_ok($batches, '>', 1, 'in more than one transaction');
cmp_ok($largest, '<=', $batch_bound, "none larger than $batch_bound rows");
is($node->safe_psql('postgres', 'SELECT count(*) FROM tenant_x.delivery_outbox'),
	'0', 'none left in the outbox');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM tenant_x.delivery_outbox_dead WHERE dead_at < expires_at"),
	'0', 'none before its expiry');
is(counters('tenant_x.delivery_outbox'),
	join('|', (split /\|/, $x_mid)[0] + $many, (split /\|/, $x_mid)[1]),
	"dead_lettered counts all $many");

###########################################################################
# Backoff spacing, with no worker reclaim in the way
###########################################################################

$node->safe_psql(
	'postgres', q{
ALTER SYSTEM SET delivery_outbox.reclaim_after = -1;
SELECT pg_reload_conf();
SELECT outbox_configure('tenant_b.delivery_outbox', backoff_base => '1 second');
SELECT outbox_enqueue('agent:b', 'work', '\x01', outbox => 'tenant_b.delivery_outbox');
});
$node->poll_query_until('postgres',
	q{SELECT setting = '-1' FROM pg_settings WHERE name = 'delivery_outbox.reclaim_after'})
  or die 'reclaim_after not reloaded';

# The row is delivered at attempt $n: release it without retry_after, then
# claim until it comes back (attempt $n + 1, delivered again).  Returns
# (seconds from just before the release to the claim's delivered_at, or
# undef if it did not come back within $soon s; how many rows a claim right
# after the release got).
sub release_and_reclaim
{
	my ($n) = @_;
	my $out = $node->safe_psql(
		'postgres', q{
SELECT extract(epoch FROM clock_timestamp());
SELECT outbox_release(ARRAY(SELECT id FROM tenant_b.delivery_outbox),
                      outbox => 'tenant_b.delivery_outbox');
SELECT count(*) FROM outbox_claim(1, outbox => 'tenant_b.delivery_outbox');
});
	my ($t_before, $released, $at_once) = split /\n/, $out;
	is($released, '1', "backoff: released after attempt $n");
	my $deadline = time + $soon;
	my $delivered = '';
	while (time < $deadline)
	{
		$delivered = $node->safe_psql(
			'postgres', q{
SELECT extract(epoch FROM delivered_at) || '|' || delivery_attempts
  FROM outbox_claim(1, outbox => 'tenant_b.delivery_outbox')});
		last if $delivered ne '';
		usleep(20_000);
	}
	return (undef, $at_once) if $delivered eq '';
	my ($at, $attempts) = split /\|/, $delivered;
	is($attempts, $n + 1, "backoff: claimed again, attempt " . ($n + 1));
	return ($at - $t_before, $at_once);
}

is( $node->safe_psql(
		'postgres',
		q{SELECT delivery_attempts FROM outbox_claim(1, outbox => 'tenant_b.delivery_outbox')}),
	'1', 'backoff: claimed, attempt 1');
my ($gap1, $at_once1) = release_and_reclaim(1);
is($at_once1, '0', 'backoff: after attempt 1 not claimable right after the release');
ok(defined $gap1 && $gap1 >= 0.5,
	'after attempt 1 not claimable for 0.5 s (1 s x 2^0 x jitter >= 0.5)');
ok(defined $gap1 && $gap1 <= $soon, "... and claimable again within $soon s");
note sprintf('attempt 1: claimable again after %.3f s', $gap1 // -1);
my ($gap2, $at_once2) = release_and_reclaim(2);
is($at_once2, '0', 'backoff: after attempt 2 not claimable right after the release');
ok(defined $gap2 && $gap2 >= 1.0,
	'after attempt 2 not claimable for 1 s (1 s x 2^1 x jitter >= 1)');
ok(defined $gap2 && $gap2 <= $soon, "... and claimable again within $soon s");
note sprintf('attempt 2: claimable again after %.3f s', $gap2 // -1);

###########################################################################
# Counters: dead_lettered and redriven, per outbox, at commit
###########################################################################

$node->safe_psql(
	'postgres', q{
SELECT outbox_configure('tenant_c.delivery_outbox', max_attempts => 1);
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:c', 'agent:c', 'agent:c', 'agent:c'],
       ARRAY['work', 'work', 'work', 'work'], ARRAY['\x01', '\x02', '\x03', '\x04']::bytea[],
       dedup_keys => ARRAY['k1', NULL, NULL, NULL], outbox => 'tenant_c.delivery_outbox');
SELECT count(*) FROM outbox_claim(10, outbox => 'tenant_c.delivery_outbox');
});
my $row_id = sub {
	my ($p) = @_;
	return $node->safe_psql(
		'postgres', qq{
SELECT id FROM tenant_c.delivery_outbox WHERE payload = '\\x$p'
UNION ALL SELECT id FROM tenant_c.delivery_outbox_dead WHERE payload = '\\x$p'});
};
my ($c1, $c2, $c3, $c4) = map { $row_id->($_) } qw(01 02 03 04);

# tenant_c's counters as "name=delta" from $base, for the counters listed.
my @ccols = qw(dead_lettered redriven enqueued released reclaimed purged);
sub ccount
{
	my $r = $node->safe_psql(
		'postgres', q{
SELECT } . join(" || '|' || ", map { "coalesce($_, 0)" } @ccols) . q{
  FROM delivery_outbox_activity
 WHERE datname = current_database() AND outbox = 'tenant_c.delivery_outbox'::regclass});
	return [ split /\|/, $r ];
}
sub cdelta
{
	my ($base) = @_;
	my $now = ccount();
	return join(' ', map { "$ccols[$_]=" . ($now->[$_] - $base->[$_]) } 0 .. $#ccols);
}
my $c_start = ccount();
my $dflt_start = counters('delivery_outbox');

# rolled back: nothing counted
$node->safe_psql(
	'postgres', qq{
BEGIN;
SELECT outbox_reject(ARRAY[$c1, $c2]::bigint[], outbox => 'tenant_c.delivery_outbox');
ROLLBACK;
});
is(cdelta($c_start),
	'dead_lettered=0 redriven=0 enqueued=0 released=0 reclaimed=0 purged=0',
	'a rolled-back reject counts nothing');

# reject two, release one at max_attempts: 3 dead-lettered, none of them
# counted as released, reclaimed or purged
$node->safe_psql(
	'postgres', qq{
SELECT outbox_reject(ARRAY[$c1, $c2]::bigint[], 'bad', outbox => 'tenant_c.delivery_outbox');
SELECT outbox_release(ARRAY[$c3]::bigint[], outbox => 'tenant_c.delivery_outbox');
});
is(cdelta($c_start),
	'dead_lettered=3 redriven=0 enqueued=0 released=0 reclaimed=0 purged=0',
	'reject 2 + a release at max_attempts: dead_lettered +3, not released, reclaimed or purged');

# redrive two; one whose key was taken meanwhile stays dead, uncounted; a
# redriven row also counts as enqueued
$node->safe_psql(
	'postgres', qq{
SELECT outbox_enqueue('agent:c', 'work', '\\x05', dedup_key => 'k1', outbox => 'tenant_c.delivery_outbox');
});
is( $node->safe_psql(
		'postgres', qq{
SELECT outbox_redrive(ARRAY[$c1, $c2, $c3]::bigint[], outbox => 'tenant_c.delivery_outbox')}),
	'2', 'redrive: two back, the one whose key is taken stays dead');
is(cdelta($c_start),
	'dead_lettered=3 redriven=2 enqueued=3 released=0 reclaimed=0 purged=0',
	'redriven +2 (the refused one not counted), enqueued +1 +2');
# a rolled-back redrive counts nothing
$node->safe_psql(
	'postgres', qq{
BEGIN;
SELECT outbox_redrive(ARRAY[$c1]::bigint[], outbox => 'tenant_c.delivery_outbox');
ROLLBACK;
});
is(cdelta($c_start),
	'dead_lettered=3 redriven=2 enqueued=3 released=0 reclaimed=0 purged=0',
	'a rolled-back redrive counts nothing');
is(counters('delivery_outbox'), $dflt_start,
	'the default outbox\'s counters did not move');
is($node->safe_psql('postgres',
		q{SELECT pending || '|' || delivered || '|' || dead FROM outbox_stats('tenant_c.delivery_outbox')}),
	'3|1|1', 'outbox_stats: c2, c3 and the new row pending, c4 delivered, c1 dead');

$node->stop;
done_testing();
