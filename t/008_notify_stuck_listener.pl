
# Copyright (c) 2026, delivery_outbox developers

# t/008_notify_stuck_listener.pl
#
# A listener idling in a transaction holds the notification queue's tail
# while producers keep committing.  t/002 covers one producer and the
# settings; this covers the rest:
#
# - several producers at once (pgbench), with notify_queue_limit set the way
#   an operator would (ALTER SYSTEM + reload) below the queue usage: every
#   transaction commits, no error, every row kept, and each producer backend
#   logs the skip exactly once however many wake-ups it skips;
# - the stuck listener, once its transaction ends, hears none of the skipped
#   wake-ups, and a draining claim finds every row;
# - when the queue drains below the limit, the same producer backend that
#   skipped wakes relays again, without another log line; when the queue
#   fills up again, it skips again and says so once more.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $clients = 4;
my $per_client = 25;

my $node = outbox_node(
	'main',
	conf => "log_statement = none\n",
	extension => ['postgres']);

$node->safe_psql('postgres',
	'CREATE TABLE committed_ids (id bigint PRIMARY KEY)');

sub usage
{
	return $node->safe_psql('postgres', 'SELECT pg_notification_queue_usage()');
}

# About ten pages of notifications on another channel.
my $filler = q{SELECT count(pg_notify('filler', g || repeat('x', 1000)))
               FROM generate_series(1, 80) g};

# A relay that consumes its notifications, and a producer backend that lives
# through the whole test.
my $relay = listener($node);
my $producer = $node->background_psql('postgres');
my $producer_pid = $producer->query_safe('SELECT pg_backend_pid()');

# The stuck listener.
my $stuck = listener($node);
$stuck->query_safe('BEGIN');
$stuck->query_safe('SELECT 1');
$node->safe_psql('postgres', $filler);
my $full = usage();
cmp_ok($full, '>', 0, 'the stuck listener holds the queue');
my $limit = sprintf('%.12f', $full / 2);
# (ALTER SYSTEM knows the setting once the library is loaded)
$node->safe_psql('postgres',
	"LOAD 'delivery_outbox'; ALTER SYSTEM SET delivery_outbox.notify_queue_limit = $limit"
);
$node->reload;
ok( $node->poll_query_until(
		'postgres', q{
SELECT current_setting('delivery_outbox.notify_queue_limit', true)::float8 < 0.5}),
	'the lower limit is in force for new sessions');
$producer->query_safe('SELECT pg_reload_conf()');
ok( $node->poll_query_until(
		'postgres',
		"SELECT pg_notification_queue_usage() >= $limit"),
	'queue usage is above the limit');

#
# Producers at once, above the limit: all commit, rows kept, one log line
# per backend.
#
my $offset = -s $node->logfile;
$node->pgbench(
	"--no-vacuum --client=$clients --jobs=2 --transactions=$per_client --max-tries=1",
	0,
	[
		qr{number of transactions actually processed: @{[$clients * $per_client]}/@{[$clients * $per_client]}},
		qr{number of failed transactions: 0 \(0\.000%\)}
	],
	[qr{^((?!ERROR|WARNING|aborted).)*$}s],
	'producers commit while the listener is stuck',
	{
		'008_producer' => q{
\set r random(1, 3)
BEGIN;
SELECT outbox_enqueue('agent:' || :r, 'work', '\x01'::bytea) AS id \gset
INSERT INTO committed_ids VALUES (:id);
COMMIT;
}
	});
# (the producer backend lives on; this also picks up the reloaded setting)
cmp_ok($producer->query_safe('SHOW delivery_outbox.notify_queue_limit'),
	'==', $limit, 'the long-lived producer sees the limit too');
my $skipped_id = $producer->query_safe(
	q{SELECT outbox_enqueue('agent:p', 'work', '\x02')});

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE o.id IS NULL), count(*)
FROM committed_ids c LEFT JOIN delivery_outbox o USING (id)}),
	'0|' . ($clients * $per_client),
	'every committed enqueue kept its row');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM delivery_outbox WHERE delivery_state <> 'pending'}),
	'0',
	'... all pending');
is(skip_lines($node, $offset), $clients + 1,
	"one log line per producer backend ($clients pgbench clients and one more)");
is(skip_lines($node, $offset, $producer_pid), 1,
	'the long-lived producer logged its skip once');
is(heard_payloads($relay), '', 'no wake-up went out for the skipped rows');

# The stuck listener ends its transaction: the skipped wake-ups never come.
$stuck->query_safe('COMMIT');
is(heard_payloads($stuck), '',
	'the formerly stuck listener hears none of them either');

#
# The queue drains below the limit: the same backend wakes relays again
# (nothing logged); it fills up again: skipped, and logged once more.
#
ok( $node->poll_query_until(
		'postgres', qq{
SELECT pg_notification_queue_usage() < $limit
FROM (SELECT count(pg_notify('filler', g || repeat('x', 2000)))
      FROM generate_series(1, 4) g) s}),
	'with the listener caught up the queue drains below the limit');
$offset = -s $node->logfile;
my $woken_id = $producer->query_safe(
	q{SELECT outbox_enqueue('agent:p', 'work', '\x03')});
is(heard_payloads($relay), $woken_id,
	'below the limit again, the producer that skipped wakes relays');
is(skip_lines($node, $offset), 0, '... and logs nothing');

$stuck->query_safe('BEGIN');
$stuck->query_safe('SELECT 1');
$node->safe_psql('postgres', $filler);
cmp_ok(usage(), '>=', $limit, 'the listener is stuck again, above the limit');
my $skipped_again = $producer->query_safe(
	q{SELECT outbox_enqueue('agent:p', 'work', '\x04')});
$producer->query_safe(q{SELECT outbox_enqueue('agent:p', 'work', '\x05')});
is(heard_payloads($relay), '', 'skipped again');
is(skip_lines($node, $offset, $producer_pid), 1,
	'and the skip is logged once more, once');
$stuck->query_safe('COMMIT');

# Relays find every row by draining, whatever happened to the wake-ups.
is( $node->safe_psql(
		'postgres',
		'SELECT count(*) FROM outbox_claim(1000000)'),
	$clients * $per_client + 4,
	'a draining claim finds every row');

$node->safe_psql('postgres',
	"LOAD 'delivery_outbox'; ALTER SYSTEM RESET delivery_outbox.notify_queue_limit"
);
$relay->quit;
$producer->quit;
$stuck->quit;
$node->stop;

done_testing();
