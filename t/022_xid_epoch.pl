
# Copyright (c) 2026, delivery_outbox developers

# t/022_xid_epoch.pl
#
# outbox_horizon() across an epoch of transaction ids: the insert markers
# name transactions by FullTransactionId (shared memory, with the preload:
# node "main") or by the 32 bits a lock tag holds, read as the latest
# transaction with them (without it: node "plain").  Each node is moved by
# pg_resetwal to epoch 1, a few hundred xids before the 32-bit counter
# wraps, and then:
#
# - a REPEATABLE READ snapshot taken while a lower insert (id N, epoch 1)
#   was open and a higher row (M) had committed keeps its horizon below N
#   after N commits and the counter has wrapped into epoch 2 (the producer
#   still connected): the marker's transaction is still running for that
#   snapshot, though its 32 bits are now far above the counter's;
# - a new snapshot then gets M, and in epoch 2 an open insert holds the
#   horizon below it until it commits.
#
# What this cannot show is the defect the full ids fix: history kept past
# 2^31 transactions (a producer idle or gone that long), which seemed to
# run for every snapshot.  That needs 2^31 transactions in one server's
# life (pg_resetwal runs on a stopped server, and the markers do not
# survive a restart); see the header of outbox_markers.c.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $O = 'ep.delivery_outbox';

# The xid pg_resetwal sets: 400 before the 32-bit wrap, in epoch 1.
my $xid = 4294966896;

for my $preload (1, 0)
{
	my $tag = $preload ? 'main' : 'plain';
	my $node = outbox_node($tag, preload => $preload);
	# every row frozen first: the ids of initdb's rows would otherwise
	# compare as in the future of the new counter
	$node->safe_psql($_, 'VACUUM FREEZE') for ('template1', 'postgres');
	$node->stop;

	# the pg_xact segment of the new xid, as pg_resetwal asks (32 pages of
	# 32768 xids each per segment)
	my $segment = sprintf('%04X', int($xid / (32768 * 32)));
	open(my $fh, '>', $node->data_dir . "/pg_xact/$segment")
	  or die "could not create pg_xact/$segment: $!";
	binmode $fh;
	print $fh "\0" x (8192 * 32);
	close $fh;
	command_ok(
		[ 'pg_resetwal', '-e', '1', '-u', $xid, '-x', $xid, $node->data_dir ],
		"$tag: pg_resetwal to epoch 1, xid $xid");
	$node->start;

	my $sql = sub { return $node->safe_psql('postgres', $_[0]); };
	$sql->(q{
CREATE EXTENSION delivery_outbox;
CREATE SCHEMA ep;
SELECT outbox_create('ep');
});
	is($sql->('SELECT txid_current() >> 32'), '1', "$tag: in epoch 1");
	my $enq = "SELECT outbox_enqueue('r:e', 'work', '\\x01', outbox => '$O')";
	my $h = sub { return $sql->("SELECT outbox_horizon('$O')"); };

	my $p = $node->background_psql('postgres');
	my $s = $node->background_psql('postgres');
	$p->query_safe('BEGIN');
	my $n = $p->query_safe($enq);
	my $pxid = $p->query_safe('SELECT txid_current()');
	my $m = $sql->($enq);
	is($h->(), $n - 1, "$tag: an open insert holds the horizon at " . ($n - 1));
	$s->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$s->query_safe('SELECT 1');
	$p->query_safe('COMMIT');

	# past the wrap: each statement a transaction of its own
	$sql->(join('', map { "SELECT txid_current();\n" } 1 .. 600));
	my $now = $sql->('SELECT txid_current()');
	ok($now >> 32 == 2 && ($pxid >> 32) == 1,
		"$tag: the producer's xid $pxid was in epoch 1, the counter ($now) is in epoch 2");
	ok(($pxid & 0xffffffff) > ($now & 0xffffffff),
		"$tag: the producer's 32 bits are above the counter's");

	is($s->query_safe("SELECT outbox_horizon('$O')"), $n - 1,
		"$tag: REPEATABLE READ across the wrap: the horizon stays below $n");
	$s->query_safe('COMMIT');
	is($h->(), $m, "$tag: a new snapshot: up to $m");

	# an insert of epoch 2
	$p->query_safe('BEGIN');
	my $k = $p->query_safe($enq);
	my $l = $sql->($enq);
	is($h->(), $k - 1, "$tag: epoch 2: an open insert holds the horizon at " . ($k - 1));
	$p->query_safe('COMMIT');
	is($h->(), $l, "$tag: epoch 2: committed, the horizon is $l");
	$p->quit;
	$s->quit;
	$node->stop;
}

done_testing();
