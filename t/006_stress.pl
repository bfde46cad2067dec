
# Copyright (c) 2026, delivery_outbox developers

# t/006_stress.pl
#
# A randomized, time-bounded stress run.  pgbench runs, at once and with
# weights, everything a deployment does to the outbox: producers enqueueing
# for several recipients and tenants (some rolling back), relays claiming
# and acking (in one transaction, or in autocommit statements, with and
# without a recipient filter), relays claiming and releasing, recipients
# acking recent ids late, sweepers reclaiming with '0 seconds', reconnect
# resyncs, reassigns, and readers (replay, stats, a purge that matches
# nothing).  Retries are off (--max-tries=1), so a deadlock or serialization
# failure would show as a failed transaction and any other error aborts a
# client: the run must end with zero of both.
#
# Bookkeeping done by the test itself, in the producers' and relays' own
# transactions: the ids whose enqueue committed (stress_enqueued), the ids
# whose enqueue rolled back (stress_rolled_back), every row a claim returned
# with its attempt number (stress_claims), and, through an AFTER UPDATE
# trigger, every state change of every row (stress_transitions).
#
# After a drain (reclaim, claim and ack until nothing is open):
#  - the rows are exactly the committed enqueues, none of the rolled-back;
#  - every row is acked, with delivery_attempts >= 1 and
#    created_at <= delivered_at <= acked_at;
#  - each row's changes form one legal chain from pending to acked, each
#    starting where the previous one ended (no lost or doubled update), and
#    delivery_attempts equals the number of moves to delivered in it;
#  - no two claims returned the same row with the same attempt number
#    (concurrent relays never claimed the same row).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $duration = 6;    # seconds of pgbench

my $node = outbox_node(
	'main',
	conf => qq{
log_statement = none
max_connections = 30
},
	extension => ['postgres']);

$node->safe_psql(
	'postgres', q{
CREATE TABLE stress_enqueued (id bigint PRIMARY KEY);
CREATE TABLE stress_rolled_back (id bigint PRIMARY KEY);
CREATE TABLE stress_claims (id bigint NOT NULL, attempts integer NOT NULL);
CREATE TABLE stress_transitions (
    seq          bigserial PRIMARY KEY,
    id           bigint NOT NULL,
    old_state    text NOT NULL,
    new_state    text NOT NULL,
    old_attempts integer NOT NULL,
    new_attempts integer NOT NULL,
    readdressed  boolean NOT NULL);
-- The extension's functions run with search_path = pg_catalog, pg_temp, so
-- the audit trigger names its table in full.
CREATE FUNCTION stress_audit() RETURNS trigger LANGUAGE plpgsql
SET search_path = public AS $$
BEGIN
    INSERT INTO public.stress_transitions
        (id, old_state, new_state, old_attempts, new_attempts, readdressed)
    VALUES (NEW.id, OLD.delivery_state, NEW.delivery_state,
            OLD.delivery_attempts, NEW.delivery_attempts,
            NEW.recipient IS DISTINCT FROM OLD.recipient);
    RETURN NULL;
END $$;
CREATE TRIGGER stress_audit AFTER UPDATE ON delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION stress_audit();
});

# A few rows to start from, so that relays have work from the first second.
$node->safe_psql(
	'postgres', q{
INSERT INTO stress_enqueued
SELECT outbox_enqueue('agent:' || (g % 4 + 1), 'work', '\x00'::bytea,
                      CASE WHEN g % 3 = 0 THEN NULL ELSE 'tenant-' || g % 3 END)
FROM generate_series(1, 40) g;
});

# The claim statement every relay script uses: claim, log what was claimed,
# and hand the ids to pgbench as an array literal.
sub claim_sql
{
	my ($args) = @_;
	return qq{WITH c AS (SELECT id, delivery_attempts FROM outbox_claim($args)),
     l AS (INSERT INTO stress_claims SELECT id, delivery_attempts FROM c)
SELECT coalesce(array_agg(id), '{}')::text AS ids FROM c \\gset};
}

my %scripts = (
	# producers: commit, or roll back and remember the id they had taken
	'006_producer@8' => q{
\set r random(1, 4)
\set t random(0, 2)
BEGIN;
SELECT outbox_enqueue('agent:' || :r, 'work', '\x0102'::bytea,
                      CASE WHEN :t = 0 THEN NULL ELSE 'tenant-' || :t END) AS id \gset
INSERT INTO stress_enqueued VALUES (:id);
COMMIT;
},
	'006_producer_rollback@1' => q{
\set r random(1, 4)
BEGIN;
SELECT outbox_enqueue('agent:' || :r, 'work', '\x03'::bytea) AS id \gset
ROLLBACK;
INSERT INTO stress_rolled_back VALUES (:id);
},
	# relays: claim and ack in one transaction
	'006_relay_tx@4' => "\\set n random(1, 8)\nBEGIN;\n"
	  . claim_sql(':n')
	  . "\nSELECT outbox_ack(':ids'::bigint[]);\nCOMMIT;\n",
	# ... in autocommit statements (a sweeper may get in between)
	'006_relay_autocommit@3' => "\\set n random(1, 8)\n"
	  . claim_sql(':n')
	  . "\nSELECT outbox_ack(':ids'::bigint[]);\n",
	# ... a relay serving one recipient, acking as that recipient
	'006_relay_recipient@2' => "\\set r random(1, 4)\n"
	  . claim_sql(q{5, 'agent:' || :r})
	  . "\nSELECT outbox_ack(':ids'::bigint[], 'agent:' || :r);\n",
	# ... a relay whose pushes failed
	'006_relay_release@2' => "\\set n random(1, 4)\nBEGIN;\n"
	  . claim_sql(':n')
	  . "\nSELECT outbox_release(':ids'::bigint[]);\nCOMMIT;\n",
	# recipients acking recent ids on their own, perhaps late
	'006_late_ack@2' => q{
\set k random(0, 30)
SELECT outbox_ack((SELECT max(id) FROM stress_enqueued) - :k);
},
	# sweepers
	'006_sweeper@2' => q{
\set m random(1, 20)
SELECT outbox_reclaim('0 seconds');
SELECT outbox_reclaim('0 seconds', :m);
},
	# reconnect resyncs and reassigns
	'006_resync@2' => q{
\set r random(1, 4)
\set t random(0, 2)
SELECT outbox_reclaim_recipient('agent:' || :r,
                                CASE WHEN :t = 0 THEN NULL ELSE 'tenant-' || :t END);
},
	'006_reassign@1' => q{
\set a random(1, 4)
\set b random(1, 4)
SELECT outbox_reassign('agent:' || :a, 'agent:' || :b);
},
	# readers
	'006_reader@1' => q{
\set r random(1, 4)
SELECT count(*) FROM outbox_replay('agent:' || :r, 0, 50);
SELECT * FROM outbox_stats();
SELECT outbox_purge('1 hour');
});

$node->pgbench(
	"--no-vacuum --client=8 --jobs=2 --time=$duration --max-tries=1 --protocol=simple",
	0,
	[
		qr{number of transactions actually processed: [1-9]\d*},
		qr{number of failed transactions: 0 \(0\.000%\)}
	],
	[qr{^((?!ERROR|aborted|deadlock).)*$}s],
	'pgbench stress run: every client finished, zero failed transactions',
	\%scripts);

# Each kind of change happened, so the run proved something.
is( $node->safe_psql(
		'postgres', q{
SELECT bool_and(n > 0) FROM (
    SELECT count(*) FILTER (WHERE old_state = 'pending' AND new_state = 'delivered') n
      FROM stress_transitions
    UNION ALL
    SELECT count(*) FILTER (WHERE old_state = 'delivered' AND new_state = 'acked')
      FROM stress_transitions
    UNION ALL
    SELECT count(*) FILTER (WHERE old_state = 'delivered' AND new_state = 'pending')
      FROM stress_transitions
    UNION ALL
    SELECT count(*) FILTER (WHERE readdressed) FROM stress_transitions
    UNION ALL
    SELECT count(*) FROM stress_rolled_back
    UNION ALL
    SELECT count(*) - 40 FROM stress_enqueued) s}),
	't',
	'the run claimed, acked, released or reclaimed, re-addressed, rolled back and enqueued');

# Drain, as a relay would: sweep, claim everything, ack it.
$node->safe_psql(
	'postgres', q{
SELECT outbox_reclaim('0 seconds');
SELECT outbox_ack(ARRAY(SELECT id FROM outbox_claim(1000000)));
});
is($node->safe_psql('postgres',
		'SELECT pending, delivered FROM outbox_stats()'),
	'0|0', 'drained: nothing pending or delivered');

is( $node->safe_psql(
		'postgres', q{
SELECT (SELECT count(*) FROM delivery_outbox) = (SELECT count(*) FROM stress_enqueued)
   AND NOT EXISTS (SELECT id FROM delivery_outbox EXCEPT SELECT id FROM stress_enqueued)
   AND NOT EXISTS (SELECT id FROM stress_enqueued EXCEPT SELECT id FROM delivery_outbox)}),
	't',
	'the rows are exactly the committed enqueues');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM delivery_outbox JOIN stress_rolled_back USING (id)}),
	'0', 'no row from a rolled-back enqueue');

is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM delivery_outbox
WHERE delivery_state <> 'acked' OR delivery_attempts < 1
   OR delivered_at IS NULL OR acked_at IS NULL
   OR NOT (created_at <= delivered_at AND delivered_at <= acked_at)}),
	'0',
	'every row acked, attempts >= 1, created_at <= delivered_at <= acked_at');

# Every row's changes, in the order they were made (the row lock orders
# them), form one legal chain.
is( $node->safe_psql(
		'postgres', q{
WITH t AS (
    SELECT *, lag(new_state) OVER w AS prev_state,
              lag(new_attempts) OVER w AS prev_attempts
    FROM stress_transitions WINDOW w AS (PARTITION BY id ORDER BY seq))
SELECT count(*) FROM t
WHERE (old_state, new_state) NOT IN (('pending', 'delivered'),
                                     ('delivered', 'acked'),
                                     ('delivered', 'pending'),
                                     ('pending', 'pending'),
                                     ('delivered', 'delivered'))
   OR old_state IS DISTINCT FROM coalesce(prev_state, 'pending')
   OR old_attempts IS DISTINCT FROM coalesce(prev_attempts, 0)
   OR new_attempts <> old_attempts
        + CASE WHEN old_state = 'pending' AND new_state = 'delivered'
               THEN 1 ELSE 0 END}),
	'0',
	'each row changed by legal transitions only, each from where the last one left it');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM delivery_outbox o
LEFT JOIN (SELECT id,
                  count(*) FILTER (WHERE old_state = 'pending'
                                     AND new_state = 'delivered') AS deliveries,
                  count(*) FILTER (WHERE new_state = 'acked') AS acks,
                  (array_agg(new_state ORDER BY seq DESC))[1] AS last_state
           FROM stress_transitions GROUP BY id) t USING (id)
WHERE t.deliveries IS DISTINCT FROM o.delivery_attempts
   OR t.acks IS DISTINCT FROM 1
   OR t.last_state IS DISTINCT FROM 'acked'}),
	'0',
	'delivery_attempts counts every move to delivered exactly once; one ack per row, the last change');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*) FROM (SELECT id, attempts FROM stress_claims
                      GROUP BY id, attempts HAVING count(*) > 1) d}),
	'0', 'no two claims returned the same row for the same attempt');
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM stress_claims'),
	'>', 0, 'relays claimed rows');

note 'enqueued: ' . $node->safe_psql('postgres', 'SELECT count(*) FROM stress_enqueued')
  . ', transitions: ' . $node->safe_psql('postgres', 'SELECT count(*) FROM stress_transitions')
  . ', claims: ' . $node->safe_psql('postgres', 'SELECT count(*) FROM stress_claims');

$node->stop;

done_testing();
