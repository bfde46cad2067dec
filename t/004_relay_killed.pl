
# Copyright (c) 2026, delivery_outbox developers

# t/004_relay_killed.pl
#
# A relay dies while it holds claims.  Claims it had not committed vanish
# with its transaction: the rows are pending again, with the attempts they
# had before, and the next claim takes them.  Claims it had committed but
# never acked stay delivered, invisible to other relays, until the sweeper
# (outbox_reclaim) finds them older than its timeout and makes them pending
# again; they are never lost.
#
# Two ways to die: pg_terminate_backend (the backend aborts its transaction
# and exits), and SIGKILL of the backend process, after which the postmaster
# kills every other backend, reinitializes shared memory and recovers from
# WAL (restart_after_crash).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $node = outbox_node(
	'main',
	conf => "restart_after_crash = on\n",
	extension => ['postgres']);

# A relay (background psql) that claims agent's rows in a transaction it
# leaves open; returns the session and its backend pid.
sub open_claim
{
	my ($recipient, $expect) = @_;
	my $relay = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $relay->query_safe('SELECT pg_backend_pid()');
	$relay->query_safe('BEGIN');
	is( $relay->query_safe(
			qq{SELECT string_agg(delivery_state || ':' || delivery_attempts, ',')
			   FROM outbox_claim(10, '$recipient')}),
		$expect,
		"a relay claims $recipient\'s rows in an open transaction");
	return ($relay, $pid);
}

# Per round:
#   <round>:open       3 rows, claimed and released once (pending, 1 attempt),
#                      then claimed again by the relay that dies
#   <round>:committed  2 rows claimed in a committed transaction, never acked
foreach my $round ('term', 'kill')
{
	$node->safe_psql(
		'postgres', qq{
SELECT outbox_enqueue('$round:open', 'work', '\\x01') FROM generate_series(1, 3);
SELECT outbox_enqueue('$round:committed', 'work', '\\x02') FROM generate_series(1, 2);
SELECT outbox_release(ARRAY(SELECT id FROM outbox_claim(10, '$round:open')));
SELECT count(*) FROM outbox_claim(10, '$round:committed');
});
}

#
# pg_terminate_backend
#
my $open_before = rows_of($node, where => q{recipient = 'term:open'});
my ($relay, $pid) = open_claim('term:open', 'delivered:2,delivered:2,delivered:2');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox_claim(10, \'term:open\')'),
	'0', 'another relay cannot claim them meanwhile');

is($node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)"),
	't', 'the relay backend is terminated');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'... and gone');
$relay->quit;

is(rows_of($node, where => q{recipient = 'term:open'}), $open_before,
	'terminated relay: its uncommitted claims left the rows exactly as before');
is(states_of($node, q{recipient = 'term:open'}),
	'pending:1,pending:1,pending:1',
	'... pending, attempts unchanged');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(delivery_state || ':' || delivery_attempts, ',' ORDER BY id)
FROM outbox_claim(10, 'term:open')}),
	'delivered:2,delivered:2,delivered:2',
	'... and the next claim takes them (attempt 2)');

#
# SIGKILL of a relay backend: the postmaster restarts every backend
#
$open_before = rows_of($node, where => q{recipient = 'kill:open'});
my $committed_before = rows_of($node, where => q{recipient = 'kill:committed'});
($relay, $pid) = open_claim('kill:open', 'delivered:2,delivered:2,delivered:2');
# a bystander: a session with an open acking transaction, killed along
my $bystander = $node->background_psql('postgres', on_error_stop => 0);
$bystander->query_safe('BEGIN');
is( $bystander->query_safe(
		q{SELECT outbox_ack(ARRAY(SELECT id FROM delivery_outbox
		                          WHERE recipient = 'kill:committed'))}),
	'2',
	'a bystander acks kill:committed\'s rows in an open transaction');

my $offset = -s $node->logfile;
is(kill('KILL', $pid), 1, 'SIGKILL the relay backend');
$node->wait_for_log(qr/(?:server process|client backend) \(PID $pid\) was terminated by signal 9/,
	$offset);
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$offset);
$node->wait_for_log(qr/database system is ready to accept connections/,
	$offset);
ok($node->poll_query_until('postgres', 'SELECT true'),
	'the server accepts connections again');
$relay->quit;
$bystander->quit;

is(rows_of($node, where => q{recipient = 'kill:open'}), $open_before,
	'killed relay: its uncommitted claims left the rows exactly as before');
is(states_of($node, q{recipient = 'kill:open'}),
	'pending:1,pending:1,pending:1',
	'... pending, attempts unchanged');
is(rows_of($node, where => q{recipient = 'kill:committed'}), $committed_before,
	'the bystander\'s uncommitted acks are gone; the committed claims stay');
is(states_of($node, q{recipient = 'kill:committed'}), 'delivered:1,delivered:1',
	'... delivered, attempt 1');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(delivery_state || ':' || delivery_attempts, ',' ORDER BY id)
FROM outbox_claim(10, 'kill:open')}),
	'delivered:2,delivered:2,delivered:2',
	'the rows whose claim was lost are claimed again (attempt 2)');

#
# Committed but never acked: reclaimable after the timeout, not before
#
is(states_of($node, q{recipient = 'term:committed'}), 'delivered:1,delivered:1',
	'term:committed rows are delivered, unacked');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox_claim(10, 'term:committed')}),
	'0', 'a delivered row is not claimable');
is($node->safe_psql('postgres', q{SELECT outbox_reclaim('1 hour')}),
	'0', 'before the timeout the sweeper leaves delivered rows alone');
is( states_of($node, q{recipient = 'term:committed'}) . ' '
	  . states_of($node, q{recipient = 'kill:committed'}),
	'delivered:1,delivered:1 delivered:1,delivered:1',
	'... still delivered');

# Wait until the committed claims are older than one second (no fixed sleep:
# poll the clock against the rows' delivered_at).
ok( $node->poll_query_until(
		'postgres', q{
SELECT bool_and(delivered_at < clock_timestamp() - interval '1 second')
FROM delivery_outbox
WHERE recipient IN ('term:committed', 'kill:committed')}),
	'the committed claims are older than the timeout');
# (The sweep may take the *:open rows claimed again above as well, if they
# are that old by now; only the committed claims are asserted.)
$node->safe_psql('postgres', q{SELECT outbox_reclaim('1 second')});
is( states_of($node, q{recipient = 'term:committed'}) . ' '
	  . states_of($node, q{recipient = 'kill:committed'}),
	'pending:1,pending:1 pending:1,pending:1',
	'after the timeout the sweeper makes them pending again, attempts kept');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(recipient || ':' || delivery_state || ':' || delivery_attempts,
                  ',' ORDER BY id)
FROM outbox_claim(10) WHERE recipient LIKE '%:committed'}),
	'term:committed:delivered:2,term:committed:delivered:2,'
	  . 'kill:committed:delivered:2,kill:committed:delivered:2',
	'... and claimable again, attempt 2');

# Nothing lost: every row is acked in the end.
$node->safe_psql('postgres',
	q{SELECT outbox_ack(ARRAY(SELECT id FROM delivery_outbox))});
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(delivery_state || ':' || n, ',')
FROM (SELECT delivery_state, count(*) n FROM delivery_outbox GROUP BY 1) s}),
	'acked:10',
	'every row is acked in the end');

$node->stop;

done_testing();
