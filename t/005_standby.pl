
# Copyright (c) 2026, delivery_outbox developers

# t/005_standby.pl
#
# A streaming standby holds the outbox as the primary committed it.  There,
# every function that writes (enqueue, claim, ack, release, reclaim, resync,
# reassign, purge), and a plain INSERT or UPDATE, fails with SQLSTATE 25006
# (read_only_sql_transaction) and PostgreSQL's "cannot execute ... in a
# read-only transaction" message, and changes nothing; the read-only ones
# (replay, stats) answer as on the primary.  After promotion every committed
# row is there in its state, claims the primary had not committed are not,
# and the outbox works: pending rows are claimable, delivered ones
# reclaimable, and enqueue takes ids past every id the primary handed out.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $primary = outbox_node(
	'primary',
	init => { allows_streaming => 1 },
	extension => ['postgres']);

# Rows committed before the base backup.
$primary->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:a', 'work', '\x02', 'tenant-1');
SELECT outbox_enqueue('agent:b', 'work', '\x03');
SELECT count(*) FROM outbox_claim(1, 'agent:b');
SELECT outbox_ack(3);
});

$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;

# Rows committed after the backup, streamed: every state, a released row,
# and claims the primary holds in a transaction it has not committed.
$primary->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:c', 'work', '\x04') FROM generate_series(1, 4);
SELECT count(*) FROM outbox_claim(2, 'agent:c');
SELECT outbox_ack(4);
SELECT outbox_release(ARRAY[5]::bigint[]);
SELECT outbox_enqueue('agent:open', 'work', '\x05') FROM generate_series(1, 2);
});
my $open = $primary->background_psql('postgres');
$open->query_safe('BEGIN');
is( $open->query_safe(
		q{SELECT string_agg(id::text, ',') FROM outbox_claim(10, 'agent:open')}),
	'8,9',
	'the primary holds agent:open\'s rows claimed in an open transaction');
$primary->wait_for_catchup($standby);

my $summary_sql = q{
SELECT string_agg(id || ':' || recipient || ':' || delivery_state || ':'
                  || delivery_attempts, ',' ORDER BY id)
FROM delivery_outbox};
my $committed_rows = rows_of($primary);
my $expected_summary = '1:agent:a:pending:0,2:agent:a:pending:0,'
  . '3:agent:b:acked:1,4:agent:c:acked:1,5:agent:c:pending:1,'
  . '6:agent:c:pending:0,7:agent:c:pending:0,'
  . '8:agent:open:pending:0,9:agent:open:pending:0';
is($primary->safe_psql('postgres', $summary_sql),
	$expected_summary, 'primary: committed rows in the states under test');

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'the standby is in recovery');
is(rows_of($standby),
	$committed_rows, 'standby: every committed row, exactly as on the primary');

# Every writing path fails with 25006 and a read-only message.
my @writes = (
	[ 'outbox_enqueue', q{SELECT outbox_enqueue('agent:a', 'work', '\x09')} ],
	[ 'outbox_claim', q{SELECT * FROM outbox_claim(10)} ],
	[ 'outbox_claim (recipient)', q{SELECT * FROM outbox_claim(10, 'agent:a')} ],
	[ 'outbox_ack', q{SELECT outbox_ack(5)} ],
	[ 'outbox_ack (array)', q{SELECT outbox_ack(ARRAY[5, 6]::bigint[])} ],
	[ 'outbox_release', q{SELECT outbox_release(ARRAY[5]::bigint[])} ],
	[ 'outbox_reclaim', q{SELECT outbox_reclaim('0 seconds')} ],
	[ 'outbox_reclaim_recipient', q{SELECT outbox_reclaim_recipient('agent:c')} ],
	[ 'outbox_reassign', q{SELECT outbox_reassign('agent:a', 'agent:z')} ],
	[ 'outbox_purge', q{SELECT outbox_purge('0 seconds')} ],
	[
		'plain INSERT',
		q{INSERT INTO delivery_outbox (recipient, kind, payload) VALUES ('agent:a', 'work', '\x09')}
	],
	[
		'plain UPDATE',
		q{UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE id = 1}
	]);
foreach my $w (@writes)
{
	my ($name, $sql) = @$w;
	my ($ret, $stdout, $stderr) = $standby->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	isnt($ret, 0, "standby: $name fails");
	like(
		$stderr,
		qr/ERROR:\s+25006: cannot execute \S+(?: \S+ \S+)? in a read-only transaction/,
		"standby: $name raises 25006, read-only transaction");
}
is(rows_of($standby),
	$committed_rows, 'standby: nothing changed');

# Reading works on the standby.
is( $standby->safe_psql(
		'postgres', q{
SELECT string_agg(id || ':' || delivery_state, ',' ORDER BY id)
FROM outbox_replay('agent:c')}),
	'5:pending,6:pending,7:pending',
	'standby: outbox_replay reads the open rows');
my $stats_sql =
  'SELECT pending, delivered, acked, open_recipients FROM outbox_stats()';
is($standby->safe_psql('postgres', $stats_sql),
	'7|0|2|3', 'standby: outbox_stats counts the committed states');
is($standby->safe_psql('postgres', $stats_sql),
	$primary->safe_psql('postgres', $stats_sql),
	'... as the primary does');

# Promote while the primary still holds its claims open; then retire the
# primary.
$standby->promote;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	'f', 'the standby is promoted');
$open->quit;
$primary->stop;

is(rows_of($standby),
	$committed_rows,
	'promoted: every committed row is there as committed; the primary\'s open claims are not');
is($standby->safe_psql('postgres', $summary_sql),
	$expected_summary, 'promoted: states and attempts as committed');

# The outbox works on the promoted standby.
my ($ret, $new_id, $stderr) = $standby->psql('postgres',
	q{SELECT outbox_enqueue('agent:new', 'work', '\x0a')});
is($ret, 0, 'promoted: enqueue works') or diag $stderr;
cmp_ok($new_id, '>', 9, 'promoted: the new id is past every id handed out');
is( $standby->safe_psql(
		'postgres', q{
SELECT string_agg(id || ':' || delivery_state || ':' || delivery_attempts,
                  ',' ORDER BY id)
FROM outbox_claim(100) WHERE id <= 9}),
	'1:delivered:1,2:delivered:1,5:delivered:2,6:delivered:1,'
	  . '7:delivered:1,8:delivered:1,9:delivered:1',
	'promoted: every pending row is claimable, the open claims included');
is($standby->safe_psql('postgres', q{SELECT outbox_reclaim('0 seconds')}),
	'8', 'promoted: the delivered rows are reclaimable');
is( $standby->safe_psql(
		'postgres',
		q{SELECT count(*) FROM outbox_claim(100)}),
	'8', 'promoted: and claimable again');
is( $standby->safe_psql(
		'postgres',
		q{SELECT outbox_ack(ARRAY(SELECT id FROM delivery_outbox))}),
	'8', 'promoted: and ackable');
is( $standby->safe_psql(
		'postgres',
		'SELECT pending, delivered, acked FROM outbox_stats()'),
	'0|0|10', 'promoted: every row acked');

$standby->stop;

done_testing();
