
# Copyright (c) 2026, delivery_outbox developers

# t/002_notify_queue_limit.pl
#
# A stuck listener must never make a producer's COMMIT fail.  Above
# delivery_outbox.notify_queue_limit of notification-queue usage the
# extension skips the wake-up, keeps the row, and says so once in the
# server log; below it (the default is 0.5) wake-ups flow.  Also: COPY into
# the table wakes relays like any other insert.
#
# A relay is played by a background psql that LISTENs; psql prints every
# notification it holds after each statement it runs, so running a
# statement there collects what has arrived (the producers' transactions
# have committed, and so signalled it, before that).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $node = outbox_node('main', extension => ['postgres']);

# The relay; heard_payloads($relay) is what it received since the last
# call.
my $relay = listener($node);

# Baseline: the relay hears an enqueue with the default limit.
is( $node->safe_psql(
		'postgres',
		"LOAD 'delivery_outbox'; SHOW delivery_outbox.notify_queue_limit"),
	'0.5',
	'notify_queue_limit defaults to 0.5');
is( $node->safe_psql(
		'postgres', q{SELECT outbox_enqueue('agent:a', 'work', '\x01')}),
	'1',
	'enqueue with the default limit');
is(heard_payloads($relay), '1',
	'relay hears the enqueue, payload exactly the id');

# limit 0: every wake-up is skipped, the rows are committed, and one backend
# that skips several says so once.
my $offset = -s $node->logfile;
my ($ret, $stdout, $stderr) = $node->psql(
	'postgres', q{
SET delivery_outbox.notify_queue_limit = 0;
SELECT outbox_enqueue('agent:a', 'work', '\x02');
SELECT outbox_enqueue('agent:a', 'work', '\x03');
BEGIN;
SELECT outbox_enqueue('agent:a', 'work', '\x04');
COMMIT;
INSERT INTO delivery_outbox (recipient, kind, payload)
VALUES ('agent:a', 'work', '\x05') RETURNING id;
});
is($ret, 0, 'enqueues commit with notify_queue_limit = 0');
is($stdout, "2\n3\n4\n5", 'the skipped enqueues got ids 2-5');
is($stderr, '', 'no warning or error reaches the producer');
is($node->safe_psql('postgres',
		q{SELECT string_agg(id || ':' || delivery_state, ',' ORDER BY id)
		  FROM delivery_outbox WHERE id BETWEEN 2 AND 5}),
	'2:pending,3:pending,4:pending,5:pending',
	'the rows whose wake-up was skipped are kept, pending');
is(heard_payloads($relay), '', 'relay hears nothing for the skipped enqueues');
is(skip_lines($node, $offset), 1,
	'one "skipping wake-ups" log line for four skipped enqueues in one backend');
like(
	slurp_file($node->logfile, $offset),
	qr/LOG:\s+delivery_outbox: notification queue is [0-9.]+% full, skipping wake-ups for new rows/,
	'the log line says how full the queue is');

# Relays find the skipped rows by draining the table.
is( $node->safe_psql(
		'postgres',
		q{SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox_claim(10)}),
	'1,2,3,4,5',
	'a draining claim finds the rows whose wake-up was skipped');

# Back at the default, in a backend that was skipping: wake-ups flow again.
$offset = -s $node->logfile;
($ret, $stdout, $stderr) = $node->psql(
	'postgres', q{
SET delivery_outbox.notify_queue_limit = 0;
SELECT outbox_enqueue('agent:a', 'work', '\x06');
SET delivery_outbox.notify_queue_limit = 0.5;
SELECT outbox_enqueue('agent:a', 'work', '\x07');
RESET delivery_outbox.notify_queue_limit;
SELECT outbox_enqueue('agent:a', 'work', '\x08');
});
is($ret, 0, 'enqueues commit while the limit is switched back');
is($stdout, "6\n7\n8", 'ids 6-8');
is(heard_payloads($relay),
	'7,8', 'back at 0.5, only the rows enqueued since are heard');
is(skip_lines($node, $offset),
	1, 'the one skip in that backend is logged once');

# A limit below the current usage, with a real stuck listener: a relay that
# LISTENs inside an open transaction holds the queue tail while more than a
# page of notifications goes by.
my $stuck = listener($node);
$stuck->query_safe('BEGIN');
$stuck->query_safe('SELECT 1');
$node->safe_psql('postgres',
	q{SELECT pg_notify('filler', g || repeat('x', 1000))
	  FROM generate_series(1, 40) g});
my $usage = $node->safe_psql('postgres',
	'SELECT pg_notification_queue_usage()');
cmp_ok($usage, '>', 0, 'a stuck listener holds the notification queue');
my $limit = sprintf('%.12f', $usage / 2);

$offset = -s $node->logfile;
($ret, $stdout, $stderr) = $node->psql(
	'postgres', qq{
SET delivery_outbox.notify_queue_limit = $limit;
SELECT outbox_enqueue('agent:b', 'work', '\\x09');
SELECT outbox_enqueue('agent:b', 'work', '\\x0a');
SELECT outbox_enqueue('agent:b', 'work', '\\x0b');
});
is($ret, 0, 'enqueues commit with the limit below the queue usage');
is($stdout, "9\n10\n11", 'ids 9-11');
is($stderr, '', 'no warning or error reaches the producer');
is(heard_payloads($relay), '', 'no wake-up sent above the limit');
is(skip_lines($node, $offset), 1,
	'one "skipping wake-ups" log line for three skipped enqueues');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM delivery_outbox
		  WHERE id BETWEEN 9 AND 11 AND delivery_state = 'pending'}),
	'3',
	'the rows are kept');

# With the default limit the same queue usage is far below 0.5.
is( $node->safe_psql(
		'postgres', q{SELECT outbox_enqueue('agent:b', 'work', '\x0c')}),
	'12',
	'enqueue at the default limit while the listener is stuck');
is(heard_payloads($relay), '12', 'relay hears it');

$stuck->query_safe('COMMIT');
$stuck->quit;

# COPY is an insert path too: each copied row wakes relays, in order.
$stdout = $node->safe_psql('postgres', <<'EOF');
COPY delivery_outbox (recipient, kind, payload, tenant_id) FROM STDIN;
agent:c	work	\\x0d	\N
agent:c	work	\\x0e	tenant-1
\.
SELECT string_agg(id || ':' || encode(payload, 'hex') || ':'
                  || coalesce(tenant_id, '-') || ':' || delivery_state,
                  ',' ORDER BY id)
FROM delivery_outbox WHERE recipient = 'agent:c';
EOF
is($stdout, '13:0d:-:pending,14:0e:tenant-1:pending',
	'COPY FROM STDIN inserts pending rows');
is(heard_payloads($relay), '13,14', 'relay hears every row copied in');

$stdout = $node->safe_psql('postgres', <<'EOF');
\copy delivery_outbox (recipient, kind, payload) from stdin
agent:d	work	\\x0f
\.
SELECT string_agg(id::text, ',' ORDER BY id)
FROM delivery_outbox WHERE recipient = 'agent:d';
EOF
is($stdout, '15', 'psql \copy inserts the row');
is(heard_payloads($relay), '15', 'relay hears the row copied in with \copy');

# A rolled-back COPY wakes nobody.
($ret, $stdout, $stderr) = $node->psql('postgres', <<'EOF');
BEGIN;
COPY delivery_outbox (recipient, kind, payload) FROM STDIN;
agent:e	work	\\x10
\.
ROLLBACK;
EOF
is($ret, 0, 'COPY in a rolled-back transaction');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM delivery_outbox WHERE recipient = 'agent:e'}),
	'0', 'no row from the rolled-back COPY');
is(heard_payloads($relay), '', 'no wake-up from the rolled-back COPY');

$relay->quit;
$node->stop;

done_testing();
