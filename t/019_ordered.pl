
# Copyright (c) 2026, delivery_outbox developers

# t/019_ordered.pl
#
# Ordered delivery (outbox_configure(..., ordered => true)) and the
# gap-safe cursor (outbox_horizon), on two nodes: "main", with the library
# preloaded and a worker serving "postgres" (the insert markers in shared
# memory), and "plain", without the preload (the markers are then locks of
# the lock manager).  Unless said otherwise, each part runs on both.
#
# - outbox_configure(ordered => true): the view lists it, the index
#   <table>_delivered_recipient_idx is made (and dropped by ordered =>
#   false); an id sequence with a cache or counting down is refused (55000);
# - the rules of an ordered claim, per (recipient, tenant_id) group: a run
#   of consecutive rows from the group's head, cut by max_rows; nothing
#   while the group has a delivered row (another tenant's group and other
#   recipients go on); a released row is the head again, and with a
#   retry_after a not-yet-due head holds its group; an expired row is
#   skipped (and dead-lettered later); a rejected head lets the next go;
#   reclaimed and resynced rows are heads again; never past a lower-id row
#   of the recipient being inserted by a running transaction (other
#   recipients go on), nor by a rolled-back one once it is gone;
# - an ack (or a reject) that ends a run notifies the id of the group's
#   next pending row, on the outbox's channel; no notification while the
#   group's next row is still delivered;
# - outbox_wait on an ordered outbox: false at its timeout while a run in
#   flight or a lower insert holds the recipient's row back; true soon after that insert
#   commits; a rolled-back lower insert wakes it too (main: by the rollback
#   itself, not by the once-a-second recheck);
# - outbox_horizon: below an open insert; below a prepared one until
#   COMMIT PREPARED (and ordered claims do not pass it); back up after
#   ROLLBACK PREPARED; below rows of transactions a REPEATABLE READ
#   snapshot does not see as committed, whether their producer is still
#   connected or not; plain: the bound is an advisory-type lock with
#   objsubid's high bit (0x8000) set;
# - the cursor loop: producers with concurrent open transactions (and
#   rollbacks; some connecting anew for each transaction) enqueue for one
#   recipient for about 5 s while a reader loops {H := outbox_horizon();
#   replay after its cursor, keep ids <= H; move the cursor}: at the end it
#   saw every committed id exactly once, nothing else; the same for a
#   reader doing both in REPEATABLE READ transactions (a naive cursor
#   without the horizon is run beside them, for comparison only);
# - main: the worker's reclaim of a stuck run puts the head back first;
# - main: pg_dump + restore (plain and custom format) of a database with
#   an ordered created outbox and the default outbox made ordered: the
#   setting, the sequence's CACHE 1 and the behaviour come back for both,
#   the index of delivered rows by (recipient, id) for the created one (an
#   index made on an extension's table is not dumped: the default outbox's
#   claims then find the runs in flight without it).

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

# The generous bound for "soon".
my $soon = 10;

# The ordered outbox of most tests.
my $O = 'ord.delivery_outbox';

my $main = outbox_node(
	'main',
	preload => 1,
	conf => q{
delivery_outbox.database = 'postgres'
delivery_outbox.reclaim_after = -1
delivery_outbox.retain_acked = -1
max_prepared_transactions = 2
},
	extension => ['postgres']);
wait_for_worker($main);
my $plain = outbox_node(
	'plain',
	conf => q{
max_prepared_transactions = 2
},
	extension => ['postgres']);

for my $node ($main, $plain)
{
	$node->safe_psql(
		'postgres', qq{
CREATE SCHEMA ord;
SELECT outbox_create('ord');
SELECT outbox_configure('$O', ordered => true);
CREATE SCHEMA ordc;
SELECT outbox_create('ordc', channel => 'ordc_wakeups');
SELECT outbox_configure('ordc.delivery_outbox', ordered => true);
});
}

###########################################################################
# Helpers: each takes the node first; $outbox defaults to $O.
###########################################################################

sub sql
{
	my ($node, $q) = @_;
	return $node->safe_psql('postgres', $q);
}

# Enqueue one row for $recipient; %opts are outbox_enqueue's named
# arguments as SQL (tenant_id => "'t1'"), outbox among them.  Its id.
sub enq
{
	my ($node, $recipient, %opts) = @_;
	$opts{outbox} //= "'$O'";
	my $args = join('', map { ", $_ => $opts{$_}" } sort keys %opts);
	return sql($node, "SELECT outbox_enqueue('$recipient', 'work', '\\x01'$args)");
}

# The SQL of the same enqueue, for a session of the test's own.
sub enq_sql
{
	my ($recipient, %opts) = @_;
	$opts{outbox} //= "'$O'";
	my $args = join('', map { ", $_ => $opts{$_}" } sort keys %opts);
	return "SELECT outbox_enqueue('$recipient', 'work', '\\x01'$args)";
}

# Claim: the ids in the order the claim returned them ("id:attempts" with
# $attempts), comma-separated.
sub claim
{
	my ($node, $n, $recipient, $tenant, $outbox, $attempts) = @_;
	my $r = defined $recipient ? "'$recipient'" : 'NULL';
	my $t = defined $tenant ? "'$tenant'" : 'NULL';
	$outbox //= $O;
	my $what = $attempts ? q{c.id || ':' || c.delivery_attempts} : 'c.id::text';
	return sql($node, qq{
SELECT coalesce(string_agg($what, ',' ORDER BY c.ordinality), '')
  FROM outbox_claim($n, $r, $t, '$outbox') WITH ORDINALITY c});
}

# The same, sorted by id (a claim of several groups).
sub claim_sorted
{
	my ($node, $n, $recipient, $outbox) = @_;
	my $r = defined $recipient ? "'$recipient'" : 'NULL';
	$outbox //= $O;
	return sql($node, qq{
SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '')
  FROM outbox_claim($n, $r, outbox => '$outbox')});
}

sub ids { return join(',', @_); }

sub ack
{
	my ($node, @ids) = @_;
	return sql($node, "SELECT outbox_ack(ARRAY[" . ids(@ids) . "]::bigint[], outbox => '$O')");
}

# Everything still open in $O acked (claimed until nothing comes).
sub drain
{
	my ($node) = @_;
	for (1 .. 100)
	{
		my $n = sql($node, qq{
SELECT outbox_ack(ARRAY(SELECT id FROM outbox_claim(1000, outbox => '$O')), outbox => '$O')});
		last if $n eq '0';
	}
	return sql($node, "SELECT count(*) FROM $O WHERE delivery_state <> 'acked'");
}

# The notifications $session received since the last call, on every
# channel, as "channel:payload".
sub heard_all
{
	my ($session) = @_;
	my $out = $session->query_safe('SELECT 1');
	my @got;
	while ($out =~
		/^Asynchronous notification "([^"]*)" with payload "([^"]*)" received from server process with PID \d+\.$/mg
	  )
	{
		push @got, "$1:$2";
	}
	return @got;
}

# What $session heard up to a sentinel sent now on $channel: notifications
# arrive in commit order, so everything committed before is in.
my $sentinels = 0;
sub heard_before_sentinel
{
	my ($node, $session, $channel) = @_;
	$channel //= 'delivery_outbox';
	my $s = 'sentinel-' . ++$sentinels;
	sql($node, "NOTIFY $channel, '$s'");
	my @got;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $deadline)
	{
		push @got, heard_all($session);
		last if grep { $_ eq "$channel:$s" } @got;
		usleep(20_000);
	}
	my @before;
	for (@got)
	{
		last if $_ eq "$channel:$s";
		push @before, $_;
	}
	return join(',', @before);
}

# Start outbox_wait($args) in $w (backend $wpid); returns once it sleeps.
sub start_wait
{
	my ($node, $w, $wpid, $args) = @_;
	$w->query_until(
		qr/waiting\n/, qq{\\echo waiting
SELECT 'result:' || w || ':' || extract(epoch FROM clock_timestamp())
  FROM (SELECT outbox_wait($args) AS w OFFSET 0) s;
});
	$node->poll_query_until('postgres',
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

# Sleep until 0.4 s after the statement of backend $wpid started (so that
# an event then is 0.6 s before a once-a-second recheck of outbox_wait).
sub at_04
{
	my ($node, $wpid) = @_;
	my $d = sql($node, qq{
SELECT greatest(0, 0.4 - extract(epoch FROM clock_timestamp() - query_start))
  FROM pg_stat_activity WHERE pid = $wpid});
	usleep(int($d * 1_000_000));
	return;
}

###########################################################################
# outbox_configure(ordered => ...)
###########################################################################

for my $node ($main, $plain)
{
	my $tag = $node->name;
	is( sql($node, q{
SELECT string_agg(outbox || '=' || ordered, ',' ORDER BY outbox)
  FROM delivery_outbox_tables}),
		'delivery_outbox=false,ord.delivery_outbox=true,ordc.delivery_outbox=true',
		"$tag: delivery_outbox_tables lists the two ordered outboxes as ordered");
	is( sql($node, q{
SELECT indexdef FROM pg_indexes
 WHERE schemaname = 'ord' AND indexname = 'delivery_outbox_delivered_recipient_idx'}),
		q{CREATE INDEX delivery_outbox_delivered_recipient_idx ON ord.delivery_outbox USING btree (recipient, id) WHERE (delivery_state = 'delivered'::text)},
		"$tag: the index of delivered rows by (recipient, id) is made");
}

{
	my $node = $main;
	my ($ret, $out, $err);
	sql($node, q{
CREATE SCHEMA cached;
SELECT outbox_create('cached');
ALTER SEQUENCE cached.delivery_outbox_id_seq CACHE 20;
CREATE SCHEMA down;
SELECT outbox_create('down');
ALTER SEQUENCE down.delivery_outbox_id_seq INCREMENT -1 MINVALUE -1000000;
});
	for my $s ('cached', 'down')
	{
		($ret, $out, $err) = $node->psql('postgres',
			"\\set VERBOSITY verbose\nSELECT outbox_configure('$s.delivery_outbox', ordered => true)");
		like($err, qr/ERROR:  55000: outbox $s\.delivery_outbox cannot be ordered: its id sequence .* must count up with CACHE 1/,
			"main: an id sequence " . ($s eq 'cached' ? 'with CACHE 20' : 'counting down') . ' is refused (55000)');
	}
	is(sql($node, q{SELECT ordered FROM delivery_outbox_tables WHERE outbox = 'cached.delivery_outbox'::regclass}),
		'f', 'main: ... and the outbox stays unordered');
	sql($node, q{
ALTER SEQUENCE cached.delivery_outbox_id_seq CACHE 1;
SELECT outbox_configure('cached.delivery_outbox', ordered => true);
});
	is(sql($node, q{
SELECT (SELECT ordered FROM delivery_outbox_tables WHERE outbox = 'cached.delivery_outbox'::regclass)
    || ':' || (SELECT count(*) FROM pg_indexes WHERE schemaname = 'cached'
                AND indexname = 'delivery_outbox_delivered_recipient_idx')}),
		'true:1', 'main: with CACHE 1 it is ordered, with its index');
	sql($node, q{SELECT outbox_configure('cached.delivery_outbox', ordered => false)});
	is(sql($node, q{
SELECT (SELECT ordered FROM delivery_outbox_tables WHERE outbox = 'cached.delivery_outbox'::regclass)
    || ':' || (SELECT count(*) FROM pg_indexes WHERE schemaname = 'cached'
                AND indexname = 'delivery_outbox_delivered_recipient_idx')}),
		'false:0', 'main: ordered => false: unordered again, the index dropped');
}

###########################################################################
# The rules of an ordered claim
###########################################################################

for my $node ($main, $plain)
{
	my $tag = $node->name;

	# a run from each group's head
	my @a = map { enq($node, 'r:a') } 1 .. 4;
	my @at = map { enq($node, 'r:a', tenant_id => "'t1'") } 1 .. 2;
	my @b = map { enq($node, 'r:b') } 1 .. 2;
	is(claim($node, 2, 'r:a'), ids(@a[0, 1]),
		"$tag: a claim of 2 hands out the first two rows of the head's run, in order");
	is(claim($node, 10, 'r:a'), ids(@at),
		"$tag: while that run is out, the same recipient's other tenant's group goes");
	is(claim($node, 10, 'r:a'), '', "$tag: then nothing more of r:a");
	my $a4 = enq($node, 'r:a');
	is(claim_sorted($node, 100), ids(@b),
		"$tag: a whole-table claim: r:b's run, nothing of r:a (runs in flight)");
	is(claim($node, 10, 'r:a'), '', "$tag: r:a's new row waits too");
	ack($node, $a[0]);
	is(claim($node, 10, 'r:a'), '', "$tag: after acking the run's first row: nothing (its second is still out)");
	ack($node, $a[1]);
	is(claim($node, 10, 'r:a', undef, undef, 1), "$a[2]:1,$a[3]:1,$a4:1",
		"$tag: run acked: the next run, from the new head on");
	ack($node, @at, @b);

	# released: the head again; with a retry_after it holds its group
	sql($node, "SELECT outbox_release(ARRAY[" . ids($a[2], $a[3], $a4) . "]::bigint[], outbox => '$O')");
	is(claim($node, 1, 'r:a', undef, undef, 1), "$a[2]:2",
		"$tag: released rows: the head goes first again");
	my $t_rel = time;
	sql($node, "SELECT outbox_release(ARRAY[$a[2]]::bigint[], retry_after => '1 s', outbox => '$O')");
	my $at2 = enq($node, 'r:a', tenant_id => "'t1'");
	is(claim($node, 10, 'r:a'), $at2,
		"$tag: a head released with retry_after 1 s holds its group (the other tenant's row goes)");
	ack($node, $at2);
	my $early = claim($node, 10, 'r:a');
	ok(time - $t_rel >= 1 || $early eq '', "$tag: ... nothing of the held group before it is due");
	my $later = '';
	my $deadline = time + $soon;
	while ($later eq '' && time < $deadline)
	{
		usleep(100_000);
		$later = claim($node, 10, 'r:a');
	}
	ok(time - $t_rel >= 1, "$tag: ... (not before the retry_after)");
	is($later, ids($a[2], $a[3], $a4), "$tag: once due, the head and the rest of its run");
	ack($node, $a[2], $a[3], $a4);

	# an expired row is skipped, and dead-lettered later
	my $a5 = enq($node, 'r:a', expires_at => "clock_timestamp() + interval '200 ms'");
	my $a6 = enq($node, 'r:a');
	usleep(300_000);
	is(claim($node, 10, 'r:a'), $a6, "$tag: an expired head is skipped, the next row goes");
	sql($node, "SELECT outbox_expire(outbox => '$O')");
	is(sql($node, "SELECT dead_reason FROM ord.delivery_outbox_dead WHERE id = $a5"),
		'expired', "$tag: ... and it is dead-lettered as expired");

	# a rejected head lets the next go
	ack($node, $a6);
	my @r = map { enq($node, 'r:a') } 1 .. 2;
	is(claim($node, 1, 'r:a'), $r[0], "$tag: a head claimed alone");
	is(claim($node, 10, 'r:a'), '', "$tag: ... holds the next");
	sql($node, "SELECT outbox_reject(ARRAY[$r[0]]::bigint[], 'bad', outbox => '$O')");
	is(claim($node, 10, 'r:a'), $r[1], "$tag: rejected: the next row goes");
	ack($node, $r[1]);

	# reclaimed and resynced rows are heads again
	my @c = map { enq($node, 'r:a') } 1 .. 3;
	is(claim($node, 10, 'r:a'), ids(@c), "$tag: a run of three");
	ack($node, $c[0]);
	is(sql($node, "SELECT outbox_reclaim('0 seconds', outbox => '$O')"), '2',
		"$tag: outbox_reclaim takes the two still out back");
	is(claim($node, 1, 'r:a', undef, undef, 1), "$c[1]:2", "$tag: the head comes first again");
	sql($node, "SELECT outbox_reclaim_recipient('r:a', outbox => '$O')");
	is(claim($node, 10, 'r:a', undef, undef, 1), "$c[1]:3,$c[2]:2",
		"$tag: after a resync the head again, then the rest");
	ack($node, @c[1, 2]);

	# never past a lower-id row of the recipient that a running transaction
	# inserts; other recipients go on
	my $s1 = $node->background_psql('postgres');
	$s1->query_safe('BEGIN');
	my $low = $s1->query_safe(enq_sql('r:c'));
	my $high = enq($node, 'r:c');
	my $d0 = enq($node, 'r:d');
	is(claim_sorted($node, 100), $d0,
		"$tag: an open lower insert of r:c: a whole-table claim hands out r:d's row, not r:c's");
	is(claim($node, 10, 'r:c'), '', "$tag: ... nor does a claim for r:c");
	$s1->query_safe('COMMIT');
	is(claim($node, 10, 'r:c'), "$low,$high", "$tag: committed: both, in id order");
	ack($node, $low, $high, $d0);

	# a rolled-back lower insert holds until it is gone
	$s1->query_safe('BEGIN');
	$low = $s1->query_safe(enq_sql('r:c'));
	$high = enq($node, 'r:c');
	is(claim($node, 10, 'r:c'), '', "$tag: another open lower insert holds r:c");
	$s1->query_safe('ROLLBACK');
	is(claim($node, 10, 'r:c'), $high, "$tag: rolled back: the higher row goes");
	ack($node, $high);
	$s1->quit;
	is(drain($node), '0', "$tag: nothing left open");
}

###########################################################################
# An ack that ends a run notifies the group's next row
###########################################################################

for my $node ($main, $plain)
{
	my $tag = $node->name;
	my $l = listener($node);
	$l->query_safe('LISTEN ordc_wakeups');

	my @n = map { enq($node, 'r:n') } 1 .. 3;
	is(heard_before_sentinel($node, $l), join(',', map { "delivery_outbox:$_" } @n),
		"$tag: the enqueues were notified, each with its id");
	is(claim($node, 2, 'r:n'), ids(@n[0, 1]), "$tag: a run of two claimed");
	ack($node, $n[0]);
	is(heard_before_sentinel($node, $l), '',
		"$tag: acking its first row notifies nothing (the next row is still delivered)");
	ack($node, $n[1]);
	is(heard_before_sentinel($node, $l), "delivery_outbox:$n[2]",
		"$tag: acking its last row notifies the group's next pending row");
	is(claim($node, 10, 'r:n'), $n[2], "$tag: which a claim hands out");

	my $n3 = enq($node, 'r:n');
	heard_before_sentinel($node, $l);
	sql($node, "SELECT outbox_reject(ARRAY[$n[2]]::bigint[], outbox => '$O')");
	is(heard_before_sentinel($node, $l), "delivery_outbox:$n3",
		"$tag: a reject ending a run notifies the next row too");

	# groups: the next row of the acked row's tenant, not of another group
	my @t = map { enq($node, 'r:n', tenant_id => "'t'") } 1 .. 2;
	heard_before_sentinel($node, $l);
	is(claim($node, 1, 'r:n', 't'), $t[0], "$tag: tenant t's head claimed");
	ack($node, $t[0]);
	is(heard_before_sentinel($node, $l), "delivery_outbox:$t[1]",
		"$tag: its ack notifies tenant t's next row");
	is(claim($node, 10, 'r:n'), "$n3,$t[1]", "$tag: both groups' heads go");
	ack($node, $n3, $t[1]);
	is(heard_before_sentinel($node, $l), '',
		"$tag: acks with no pending row after them notify nothing");

	# on the outbox's own channel
	my @w = map { enq($node, 'r:n', outbox => "'ordc.delivery_outbox'") } 1 .. 2;
	heard_before_sentinel($node, $l);
	is(claim($node, 1, 'r:n', undef, 'ordc.delivery_outbox'), $w[0],
		"$tag: ordc: its head claimed");
	sql($node, "SELECT outbox_ack($w[0], outbox => 'ordc.delivery_outbox')");
	is(heard_before_sentinel($node, $l), "ordc_wakeups:$w[1]",
		"$tag: ordc: the next row is notified on the outbox's channel only");
	sql($node, "SELECT outbox_ack(ARRAY(SELECT id FROM outbox_claim(10, outbox => 'ordc.delivery_outbox')), outbox => 'ordc.delivery_outbox')");
	$l->quit;
}

###########################################################################
# outbox_wait on an ordered outbox
###########################################################################

for my $node ($main, $plain)
{
	my $tag = $node->name;
	my $w = $node->background_psql('postgres');
	my $wpid = $w->query_safe('SELECT pg_backend_pid()');
	my $s1 = $node->background_psql('postgres');

	# a run in flight: the pending row after it is not claimable
	my @f = map { enq($node, 'r:w') } 1 .. 2;
	is(claim($node, 1, 'r:w'), $f[0], "$tag: r:w's head claimed");
	is(sql($node, "SELECT outbox_wait('0.3 s', 'r:w', '$O')"), 'f',
		"$tag: its next row pending behind it: outbox_wait is false at its timeout");
	is(sql($node, "SELECT outbox_wait('0.3 s', 'r:w', 'delivery_outbox')"), 'f',
		"$tag: (as on the default outbox, which has no row)");
	ack($node, $f[0]);
	is(sql($node, "SELECT outbox_wait('10 s', 'r:w', '$O') AND clock_timestamp() - statement_timestamp() < '5 s'"),
		't', "$tag: head acked: outbox_wait is true at once");
	ack($node, claim($node, 10, 'r:w'));

	$s1->query_safe('BEGIN');
	my $low = $s1->query_safe(enq_sql('r:w'));
	my $high = enq($node, 'r:w');
	my $res = sql($node, qq{
WITH s AS (SELECT extract(epoch FROM clock_timestamp()) AS t0),
     w AS (SELECT outbox_wait('1 s', 'r:w', '$O') AS f FROM s OFFSET 0)
SELECT w.f || '|' || (extract(epoch FROM clock_timestamp()) - s.t0) FROM s, w});
	my ($found1, $took) = split /\|/, $res;
	is($found1, 'false', "$tag: a lower insert of r:w open: outbox_wait('1 s', 'r:w') is false");
	cmp_ok($took, '>=', 0.99, "$tag: ... after its timeout");

	start_wait($node, $w, $wpid, qq{'60 s', 'r:w', '$O'});
	at_04($node, $wpid);
	my $t_commit = time;
	$s1->query_safe('COMMIT');
	my ($found2, $ret) = finish_wait($w);
	is($found2, 'true', "$tag: the lower insert commits: outbox_wait returns true");
	cmp_ok($ret - $t_commit, '<', 1.0, "$tag: ... within 1 s of the commit");
	note sprintf('%s: woken %.3f s after the commit', $tag, $ret - $t_commit);
	is(claim($node, 10, 'r:w'), "$low,$high", "$tag: and a claim hands out both");
	ack($node, $low, $high);

	# rolled back
	$s1->query_safe('BEGIN');
	$low = $s1->query_safe(enq_sql('r:w'));
	$high = enq($node, 'r:w');
	start_wait($node, $w, $wpid, qq{'60 s', 'r:w', '$O'});
	at_04($node, $wpid);
	my $t_rb = time;
	$s1->query_safe('ROLLBACK');
	my ($found3, $ret3) = finish_wait($w);
	is($found3, 'true', "$tag: the lower insert rolls back: outbox_wait returns true");
	cmp_ok($ret3 - $t_rb, '<', 1.0, "$tag: ... within 1 s of the rollback");
	cmp_ok($ret3 - $t_rb, '<', 0.3,
		"$tag: ... woken by the rollback itself, not by a once-a-second recheck")
	  if $node == $main;
	note sprintf('%s: woken %.3f s after the rollback', $tag, $ret3 - $t_rb);
	is(claim($node, 10, 'r:w'), $high, "$tag: and a claim hands out the higher row");
	ack($node, $high);
	$s1->quit;
	$w->quit;
}

###########################################################################
# outbox_horizon
###########################################################################

# The bound markers without the preload that backend $pid holds, or a
# prepared transaction (pid NULL) if $pid is 'prepared': advisory-type
# locks whose objsubid has its high bit (0x8000) set and kind bits (0x6000)
# clear (0x4000: a statement's window; 0x2000: the history kept for
# snapshots that do not see the transaction ended).  pg_locks shows
# objsubid as a smallint, so the bits are tested on its two's complement.
sub markers
{
	my ($node, $pid) = @_;
	my $who = $pid eq 'prepared' ? 'pid IS NULL' : "pid = $pid";
	return sql($node, qq{
SELECT count(*) FROM pg_locks
 WHERE locktype = 'advisory' AND (objsubid::int & 32768) <> 0
   AND (objsubid::int & 24576) = 0 AND $who});
}

for my $node ($main, $plain)
{
	my $tag = $node->name;
	my $h = sub { sql($node, "SELECT outbox_horizon('$O')") };
	my $last = sql($node, "SELECT last_value FROM ord.delivery_outbox_id_seq");
	is($h->(), $last, "$tag: nothing open: the horizon is the sequence's last value");

	my $s1 = $node->background_psql('postgres');
	my $s1pid = $s1->query_safe('SELECT pg_backend_pid()');
	$s1->query_safe('BEGIN');
	my $open = $s1->query_safe(enq_sql('r:h'));
	my $later = enq($node, 'r:h');
	is($h->(), $open - 1, "$tag: an open insert of id $open (a committed $later above it): the horizon is " . ($open - 1));
	if ($node == $plain)
	{
		cmp_ok(markers($node, $s1pid), '>=', 1,
			"$tag: the open insert holds an advisory-type marker (objsubid's high bit set)");
	}
	else
	{
		is(markers($node, $s1pid), '0', "$tag: markers in shared memory: no lock");
	}
	$s1->query_safe('COMMIT');
	is($h->(), $later, "$tag: committed: the horizon is the last id");
	is(markers($node, $s1pid), '0', "$tag: no bound marker left");
	is(claim($node, 10, 'r:h'), "$open,$later", "$tag: both claimed in order");
	ack($node, $open, $later);

	# a prepared transaction holds it back until COMMIT PREPARED
	$s1->query_safe('BEGIN');
	$s1->query_safe('SET LOCAL delivery_outbox.notify = off');
	my $prep = $s1->query_safe(enq_sql('r:h'));
	$s1->query_safe("PREPARE TRANSACTION 'ord_prep'");
	my $after = enq($node, 'r:h');
	is($h->(), $prep - 1, "$tag: a prepared insert of id $prep: the horizon stays at " . ($prep - 1));
	cmp_ok(markers($node, 'prepared'), '>=', 1,
		"$tag: the prepared transaction keeps its marker lock") if $node == $plain;
	is(claim($node, 10, 'r:h'), '', "$tag: an ordered claim does not pass the prepared row");
	$s1->quit;
	$s1 = $node->background_psql('postgres');
	is($h->(), $prep - 1, "$tag: ... still, its session gone");
	sql($node, "COMMIT PREPARED 'ord_prep'");
	is($h->(), $after, "$tag: COMMIT PREPARED: the horizon is the last id");
	is(claim($node, 10, 'r:h'), "$prep,$after", "$tag: and both go, in order");
	ack($node, $prep, $after);

	$s1->query_safe('BEGIN');
	$s1->query_safe('SET LOCAL delivery_outbox.notify = off');
	$prep = $s1->query_safe(enq_sql('r:h'));
	$s1->query_safe("PREPARE TRANSACTION 'ord_prep'");
	$after = enq($node, 'r:h');
	is($h->(), $prep - 1, "$tag: another prepared insert holds the horizon at " . ($prep - 1));
	sql($node, "ROLLBACK PREPARED 'ord_prep'");
	is($h->(), $after, "$tag: ROLLBACK PREPARED: the horizon is the last id");
	is(claim($node, 10, 'r:h'), $after, "$tag: the higher row goes");
	ack($node, $after);

	# A REPEATABLE READ snapshot taken while a lower insert (id N) was
	# open and a higher row (M) had committed: after N commits, the
	# snapshot still does not see N, so the horizon it gets must stay below
	# N (or a cursor in it reads M and steps past N for good) -- with the
	# producer still connected, and once it has disconnected.
	for my $quit (0, 1)
	{
		my $how = $quit ? 'its producer disconnected' : 'its producer still connected';
		my $p = $node->background_psql('postgres');
		my $ppid = $p->query_safe('SELECT pg_backend_pid()');
		$p->query_safe('BEGIN');
		my $n = $p->query_safe(enq_sql('r:h'));
		my $m = enq($node, 'r:h');
		$s1->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
		$s1->query_safe('SELECT 1');
		$p->query_safe('COMMIT');
		if ($quit)
		{
			$p->quit;
			$node->poll_query_until('postgres',
				"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $ppid)")
			  or die "producer $ppid did not go";
		}
		my $rr = $s1->query_safe("SELECT outbox_horizon('$O')");
		my $seen = $s1->query_safe(qq{
SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox_replay('r:h', 0, 100, outbox => '$O')});
		is($seen, $m, "$tag: REPEATABLE READ ($how): the snapshot sees $m, not $n");
		{
			# Without the preload a transaction's history is a lock of its
			# producer's session, and goes with it (docs/ordered-delivery.md,
			# "Without the preload"): a known limit, kept visible here.
			local $TODO =
			  'without the preload the history goes with the producer\'s session'
			  if $node == $plain && $quit;
			is($rr, $n - 1,
				"$tag: REPEATABLE READ ($how): the horizon stays below $n (got $rr)");
		}
		$s1->query_safe('COMMIT');
		is($s1->query_safe("SELECT outbox_horizon('$O')"), $m,
			"$tag: REPEATABLE READ ($how): a new snapshot: up to $m");
		is(claim($node, 10, 'r:h'), "$n,$m", "$tag: both claimed in order");
		ack($node, $n, $m);
		$p->quit unless $quit;
	}
	$s1->quit;
}

###########################################################################
# The cursor loop
###########################################################################

my $tempdir = PostgreSQL::Test::Utils::tempdir;

for my $node ($main, $plain)
{
	my $tag = $node->name;
	sql($node, q{CREATE TABLE cur_committed (id bigint PRIMARY KEY)});
	my %scripts = (
		# one row, the transaction open a little after it
		'one@4' => qq{
BEGIN;
SELECT outbox_enqueue('r:cur', 'work', '\\x01', outbox => '$O') AS id \\gset
SELECT pg_sleep(random() * 0.02);
INSERT INTO cur_committed VALUES (:id);
COMMIT;
},
		# two rows, apart
		'two@2' => qq{
BEGIN;
SELECT outbox_enqueue('r:cur', 'work', '\\x02', outbox => '$O') AS a \\gset
SELECT pg_sleep(random() * 0.05);
SELECT outbox_enqueue('r:cur', 'work', '\\x03', outbox => '$O') AS b \\gset
INSERT INTO cur_committed VALUES (:a), (:b);
COMMIT;
},
		# three rows of one INSERT statement
		'insert@1' => qq{
BEGIN;
WITH i AS (INSERT INTO $O (recipient, kind, payload)
           SELECT 'r:cur', 'work', '\\x04' FROM generate_series(1, 3) RETURNING id)
INSERT INTO cur_committed SELECT id FROM i;
SELECT pg_sleep(random() * 0.03);
COMMIT;
},
		'rollback@1' => qq{
BEGIN;
SELECT outbox_enqueue('r:cur', 'work', '\\x05', outbox => '$O');
SELECT pg_sleep(random() * 0.03);
ROLLBACK;
});
	my @files;
	for my $name (sort keys %scripts)
	{
		my ($file) = $name =~ /^([^@]+)/;
		$file = "$tempdir/cur_${tag}_$file.sql";
		PostgreSQL::Test::Utils::append_to_file($file, $scripts{$name});
		push @files, '-f', $file . ($name =~ /(@\d+)$/)[0];
	}
	my ($out, $err, $cout, $cerr) = ('', '', '', '');
	my $t_start = time;
	my $bench = IPC::Run::start(
		[
			'pgbench', '--no-vacuum', '--client=6', '--jobs=2', '--time=5',
			'--max-tries=1', '--protocol=simple', @files, $node->connstr('postgres')
		],
		'>', \$out, '2>', \$err);
	# producers that disconnect after each transaction
	my $cbench = IPC::Run::start(
		[
			'pgbench', '--no-vacuum', '--client=2', '--time=5', '--connect',
			'--max-tries=1', '--protocol=simple', '-f', "$tempdir/cur_${tag}_one.sql",
			$node->connstr('postgres')
		],
		'>', \$cout, '2>', \$cerr);

	# A cursor: in READ COMMITTED, {H := outbox_horizon(); the rows after
	# the cursor with id <= H, in the next statement; the cursor to the
	# last one} (the documented loop); in REPEATABLE READ the same two
	# statements in one transaction, whose snapshot is taken a moment
	# before (so both read in it); naive: every row after the cursor, no
	# horizon (for comparison only: it may skip).
	my $cursor = sub {
		my ($mode) = @_;
		my $c = {
			mode => $mode, after => 0, seen => {}, dups => [],
			rounds => 0, held => 0,
			session => $node->background_psql('postgres')
		};
		$c->{read} = sub {
			my $s = $c->{session};
			if ($mode eq 'rr')
			{
				$s->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
				$s->query_safe('SELECT pg_sleep(0.005)');
			}
			my $hz =
			  $mode eq 'naive'
			  ? 'NULL'
			  : $s->query_safe("SELECT outbox_horizon('$O')");
			my $got = $s->query_safe(qq{
SELECT coalesce(string_agg(id::text, ',' ORDER BY id) FILTER (WHERE id <= coalesce($hz, id)), '')
       || '|' || count(*) FILTER (WHERE id > coalesce($hz, id))
  FROM outbox_replay('r:cur', $c->{after}, 1000, outbox => '$O')});
			$s->query_safe('COMMIT') if $mode eq 'rr';
			my ($list, $held) = split /\|/, $got, -1;
			for my $id (split /,/, $list)
			{
				push @{ $c->{dups} }, $id if $c->{seen}{$id}++;
				$c->{after} = $id if $id > $c->{after};
			}
			$c->{rounds}++;
			$c->{held}++ if $held > 0;
			return $hz;
		};
		return $c;
	};
	my @cursors = map { $cursor->($_) } ('rc', 'rr', 'naive');
	while (time < $t_start + 5.5)
	{
		$_->{read}->() for @cursors;
		usleep(5_000);
	}
	ok($bench->finish, "$tag: cursor: pgbench producers finished");
	like($out, qr/number of failed transactions: 0 \(0\.000%\)/,
		"$tag: cursor: no producer transaction failed");
	note "$tag: pgbench stderr: $err" if $err ne '';
	ok($cbench->finish, "$tag: cursor: pgbench producers with a connection per transaction finished");
	like($cout, qr/number of failed transactions: 0 \(0\.000%\)/,
		"$tag: cursor: none of their transactions failed");
	note "$tag: pgbench --connect stderr: $cerr" if $cerr ne '';

	# catch up once nothing is open
	my $last = sql($node, "SELECT last_value FROM ord.delivery_outbox_id_seq");
	for my $c (@cursors)
	{
		for (1 .. 100)
		{
			my $before = $c->{after};
			my $hz = $c->{read}->();
			last if ($hz eq $last || $hz eq 'NULL') && $c->{after} == $before;
		}
	}
	my @committed = split /\n/, sql($node, 'SELECT id FROM cur_committed ORDER BY id');
	my %committed = map { $_ => 1 } @committed;
	cmp_ok(scalar(@committed), '>', 100, "$tag: cursor: producers committed " . scalar(@committed) . ' ids');
	for my $c (@cursors)
	{
		my $what = {
			rc => 'the reader (READ COMMITTED)',
			rr => 'the reader in REPEATABLE READ transactions',
			naive => 'the naive reader'
		}->{ $c->{mode} };
		my @missed = grep { !$c->{seen}{$_} } @committed;
		my @foreign = grep { !$committed{$_} } sort { $a <=> $b } keys %{ $c->{seen} };
		if ($c->{mode} eq 'naive')
		{
			note "$tag: cursor: $what (no horizon) missed " . scalar(@missed) . " ids in $c->{rounds} rounds";
		}
		else
		{
			{
				# producers that disconnect take their history with them
				# without the preload (see above)
				local $TODO =
				  'without the preload the history goes with the producer\'s session'
				  if $node == $plain && $c->{mode} eq 'rr';
				is(scalar(@missed), 0, "$tag: cursor: $what saw every committed id (none skipped)")
				  or diag "missed " . scalar(@missed) . ": @missed[0 .. ($#missed < 20 ? $#missed : 19)]";
			}
			is(scalar(@{ $c->{dups} }), 0, "$tag: cursor: $what: each once");
			is(scalar(@foreign), 0, "$tag: cursor: $what: nothing else");
			cmp_ok($c->{held}, '>', 0,
				"$tag: cursor: $what: the horizon held visible rows back in $c->{held} of $c->{rounds} rounds");
		}
		$c->{session}->quit;
	}
	sql($node, 'DROP TABLE cur_committed');
}

###########################################################################
# pg_dump + restore (main)
###########################################################################

{
	my $node = $main;
	$node->safe_psql('postgres', 'CREATE DATABASE src');
	$node->safe_psql(
		'src', q{
CREATE EXTENSION delivery_outbox;
CREATE SCHEMA ord;
SELECT outbox_create('ord');
SELECT outbox_configure('ord.delivery_outbox', ordered => true);
SELECT outbox_configure('delivery_outbox', ordered => true);
});
	my @dumped = ('ord.delivery_outbox', 'delivery_outbox');
	my %ids;
	for my $o (@dumped)
	{
		my @x = split /\n/, $node->safe_psql(
			'src', qq{
SELECT outbox_enqueue('r:x', 'work', '\\x01', outbox => '$o') FROM generate_series(1, 3);
});
		my $y = $node->safe_psql('src', "SELECT outbox_enqueue('r:y', 'work', '\\x01', outbox => '$o')");
		is( $node->safe_psql('src', "SELECT string_agg(id::text, ',') FROM outbox_claim(1, 'r:x', outbox => '$o')"),
			$x[0], "src $o: r:x's head delivered");
		is($node->safe_psql('src', "SELECT count(*) FROM outbox_claim(10, 'r:x', outbox => '$o')"),
			'0', "src $o: the rest of r:x held");
		$ids{$o} = { x => \@x, y => $y };
	}

	my $plain_dump = "$tempdir/ordered.sql";
	my $custom_dump = "$tempdir/ordered.dump";
	$node->command_checks_all([ 'pg_dump', '-Fp', '-f', $plain_dump, '-d', 'src' ],
		0, [qr/^$/], [qr/^$/], 'pg_dump -Fp runs without errors or warnings');
	$node->command_checks_all([ 'pg_dump', '-Fc', '-f', $custom_dump, '-d', 'src' ],
		0, [qr/^$/], [qr/^$/], 'pg_dump -Fc runs without errors or warnings');
	$node->safe_psql('postgres', 'CREATE DATABASE restored_plain');
	$node->command_checks_all(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', 'restored_plain', '-f', $plain_dump ],
		0, [qr/.*/s], [qr/^$/], 'plain dump restores with psql without errors');
	$node->safe_psql('postgres', 'CREATE DATABASE restored_custom');
	$node->command_checks_all(
		[ 'pg_restore', '--exit-on-error', '-d', 'restored_custom', $custom_dump ],
		0, [qr/^$/], [qr/^$/], 'custom dump restores with pg_restore without errors');

	for my $db ('restored_plain', 'restored_custom')
	{
		is( $node->safe_psql(
				$db, q{SELECT string_agg(outbox || '=' || ordered, ',' ORDER BY outbox) FROM delivery_outbox_tables}),
			'delivery_outbox=true,ord.delivery_outbox=true',
			"$db: both outboxes are ordered again");
		for my $o (@dumped)
		{
			my ($schema, $table) = $o =~ /\./ ? split(/\./, $o) : ('public', $o);
			my $x = $ids{$o}{x};
			my $y = $ids{$o}{y};
			# the created outbox's index is in the dump; the default
			# outbox's is not (an index made on an extension's table is
			# not dumped): its claims then find the runs in flight by
			# the sweeper's (delivered_at) index
			my $index = $node->safe_psql(
				$db, qq{
SELECT count(*) FROM pg_indexes
 WHERE schemaname = '$schema' AND tablename = '$table'
   AND indexdef LIKE '%USING btree (recipient, id) WHERE (delivery_state = ''delivered''::text)'});
			if ($o eq 'delivery_outbox')
			{
				note "$db $o: index of delivered rows by (recipient, id): $index";
			}
			else
			{
				is($index, '1', "$db $o: the index of delivered rows by (recipient, id) is back");
			}
			is( $node->safe_psql(
					$db, qq{
SELECT seqcache || ':' || seqincrement FROM pg_sequence
 WHERE seqrelid = pg_get_serial_sequence('$o', 'id')::regclass}),
				'1:1', "$db $o: the id sequence has CACHE 1 and INCREMENT 1");

			# behaviour: the run in flight holds r:x; r:y goes; an ack
			# lets the rest go, in order; an open lower insert holds
			my $try = sub {
				my ($q) = @_;
				my ($ret, $out, $err) = $node->psql($db, $q);
				return $ret == 0 ? $out : "ERROR: $err";
			};
			my $claim_x = "SELECT coalesce(string_agg(c.id::text, ',' ORDER BY c.ordinality), '') FROM outbox_claim(10, 'r:x', outbox => '$o') WITH ORDINALITY c";
			is($try->($claim_x), '', "$db $o: r:x's delivered head still holds its group");
			is($try->("SELECT coalesce(string_agg(id::text, ','), '') FROM outbox_claim(10, 'r:y', outbox => '$o')"),
				$y, "$db $o: r:y's row goes");
			$node->safe_psql($db, "SELECT outbox_ack($x->[0], outbox => '$o')");
			is($try->($claim_x), "$x->[1],$x->[2]", "$db $o: head acked: the rest of r:x, in order");
			my $s = $node->background_psql($db);
			$s->query_safe('BEGIN');
			my $low = $s->query_safe("SELECT outbox_enqueue('r:z', 'work', '\\x01', outbox => '$o')");
			my $high = $node->safe_psql($db, "SELECT outbox_enqueue('r:z', 'work', '\\x01', outbox => '$o')");
			is($try->("SELECT coalesce(string_agg(id::text, ','), '') FROM outbox_claim(10, 'r:z', outbox => '$o')"),
				'', "$db $o: an open lower insert holds r:z");
			is($try->("SELECT outbox_horizon('$o')"), $low - 1, "$db $o: and the horizon");
			$s->query_safe('COMMIT');
			$s->quit;
			is($try->("SELECT coalesce(string_agg(c.id::text, ',' ORDER BY c.ordinality), '') FROM outbox_claim(10, 'r:z', outbox => '$o') WITH ORDINALITY c"),
				"$low,$high", "$db $o: committed: both, in order");
		}
	}
}

###########################################################################
# The worker's reclaim of a stuck run (main)
###########################################################################

{
	my $node = $main;
	$node->safe_psql(
		'postgres', q{
ALTER SYSTEM SET delivery_outbox.sweep_interval = '200ms';
ALTER SYSTEM SET delivery_outbox.reclaim_after = '1s';
SELECT pg_reload_conf();
});
	$node->poll_query_until('postgres',
		q{SELECT setting = '1' FROM pg_settings WHERE name = 'delivery_outbox.reclaim_after'})
	  or die 'reclaim_after not reloaded';

	my @k = map { enq($node, 'r:k') } 1 .. 3;
	my $t_claim = time;
	is(claim($node, 10, 'r:k', undef, undef, 1), "$k[0]:1,$k[1]:1,$k[2]:1",
		'main: a run of three claimed, and never acked');
	# claim as a relay would, until something comes back
	my $got = '';
	my $deadline = time + 1 + $soon;
	while ($got eq '' && time < $deadline)
	{
		usleep(50_000);
		$got = claim($node, 1, 'r:k', undef, undef, 1);
	}
	cmp_ok(time - $t_claim, '>=', 1, 'main: nothing came back before reclaim_after');
	is($got, "$k[0]:2", 'main: after the worker\'s reclaim the head comes back first (attempt 2)');
	is(claim($node, 10, 'r:k'), '', 'main: ... and alone: the rest wait for it');
	ack($node, $k[0]);
	is(claim($node, 10, 'r:k', undef, undef, 1), "$k[1]:2,$k[2]:2",
		'main: head acked: the rest of the run, in order');

	# part of a run acked, the rest stuck
	ack($node, $k[1]);
	my @m = map { enq($node, 'r:k') } 1 .. 2;
	ok( $node->poll_query_until('postgres', qq{
SELECT delivery_state = 'pending' FROM $O WHERE id = $k[2]}),
		'main: the worker reclaims the stuck row');
	is(claim($node, 10, 'r:k', undef, undef, 1), "$k[2]:3,$m[0]:1,$m[1]:1",
		'main: it is the head again, the newer rows after it');
	ack($node, $k[2], @m);
}

###########################################################################
# A session's memory of where a recipient's open rows start (main: with the
# preload) is forgotten when the outbox is configured: a row re-addressed
# below it while the outbox was not ordered is the group's head again
# (found by review: the cache outlived an ordered => false/true toggle).
###########################################################################

{
	my $node = $main;
	my $s = $node->background_psql('postgres');
	my $q = sub { return $s->query_safe($_[0]); };
	my $low = $q->(qq{SELECT outbox_enqueue('lw:other', 'k', 'x', outbox => '$O')});
	my $first = $q->(qq{SELECT outbox_enqueue('lw:q', 'k', 'x', outbox => '$O')});
	is($q->(qq{SELECT string_agg(id::text, ',') FROM outbox_claim(10, 'lw:q', outbox => '$O')}),
		$first, 'low water: the recipient\'s head is claimed (its start remembered)');
	$q->(qq{SELECT outbox_ack(ARRAY[$first]::bigint[], outbox => '$O')});
	my $next = $q->(qq{SELECT outbox_enqueue('lw:q', 'k', 'x', outbox => '$O')});
	$q->(qq{SELECT outbox_configure('$O', ordered => false)});
	$q->(qq{UPDATE $O SET recipient = 'lw:q' WHERE id = $low});
	$q->(qq{SELECT outbox_configure('$O', ordered => true)});
	is($q->(qq{SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox_claim(10, 'lw:q', outbox => '$O')}),
		"$low,$next",
		'low water: after ordered => false and true, the row re-addressed below it goes first');
	$q->(qq{SELECT outbox_ack(ARRAY[$low, $next]::bigint[], outbox => '$O')});
	$s->quit;
}

$main->stop;
$plain->stop;
done_testing();
