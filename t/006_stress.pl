
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
#
# Then the same on a created outbox with the delivery policy (1.2, issue
# 12): max_attempts 3, ttl 2 s, a small backoff, the worker preloaded
# (sweeping every 200 ms, reclaiming after 1 s), and more scripts:
# scheduled (not_before), expiring (expires_at) and idempotent (dedup_key)
# producers, releases with a retry_after, rejects and redrives.  After a
# drain every committed row is acked or dead-lettered, never both, never
# neither, and nothing else is there; dead letters are what their reason
# says; updates form legal chains (starting again only at a redrive); no
# claim handed out a row before its not_before or after its expiry; and
# every ending (acked, max_attempts, expired, rejected) and path (redrive,
# dedup) happened.
#
# Then ordered delivery: a created outbox with ordered = true, the worker
# preloaded, producers that hold an insert open a while (pg_sleep), insert
# several rows in one statement, roll back or let a row expire, relays
# that claim, ack, release and reject, sweepers reclaiming.  Every claim
# and every change is logged with a shared clock (a sequence).  After a
# drain, besides the checks above: per (recipient, tenant) group the first
# deliveries are in id order, and no row was delivered while a lower row
# of its group was not yet acked (or dead-lettered), except rows of the
# same run and rows already expired.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
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

###########################################################################
# The same with the delivery policy (1.2): a created outbox with
# max_attempts 3, a ttl of 2 s and a small backoff, a worker that sweeps
# every 200 ms and reclaims after 1 s (dead-lettering expired rows and
# rows at max_attempts), and besides the work above producers that
# schedule rows (not_before), give them an expiry (expires_at) or a
# dedup_key, relays that reject, releases with a retry_after, and
# operators redriving dead letters.  After a drain every row whose enqueue
# committed ends acked or dead-lettered: never both, never neither.
###########################################################################

my $pnode = outbox_node(
	'policy',
	preload => 1,
	conf => qq{
log_statement = none
max_connections = 30
delivery_outbox.database = 'postgres'
delivery_outbox.sweep_interval = '200ms'
delivery_outbox.reclaim_after = '1s'
delivery_outbox.retain_acked = -1
},
	extension => ['postgres']);
my $O = q{'tenant_s.delivery_outbox'};

$pnode->safe_psql(
	'postgres', qq{
CREATE SCHEMA tenant_s;
SELECT outbox_create('tenant_s');
SELECT outbox_configure($O, max_attempts => 3, ttl => '2 seconds',
                        backoff_base => '10 ms', backoff_max => '200 ms');
CREATE TABLE stress_enqueued (id bigint PRIMARY KEY);
CREATE TABLE stress_rolled_back (id bigint PRIMARY KEY);
CREATE TABLE stress_claims (id bigint NOT NULL, attempts integer NOT NULL,
                            created_at timestamptz NOT NULL,
                            not_before timestamptz, expires_at timestamptz,
                            claim_start timestamptz NOT NULL,
                            claim_end timestamptz NOT NULL);
CREATE TABLE stress_redrive_tried (id bigint NOT NULL);
CREATE TABLE stress_counts (what text NOT NULL, n bigint NOT NULL);
CREATE TABLE stress_transitions (
    seq          bigserial PRIMARY KEY,
    id           bigint NOT NULL,
    old_state    text NOT NULL,
    new_state    text NOT NULL,
    old_attempts integer NOT NULL,
    new_attempts integer NOT NULL);
CREATE FUNCTION stress_audit() RETURNS trigger LANGUAGE plpgsql
SET search_path = public AS \$\$
BEGIN
    INSERT INTO public.stress_transitions
        (id, old_state, new_state, old_attempts, new_attempts)
    VALUES (NEW.id, OLD.delivery_state, NEW.delivery_state,
            OLD.delivery_attempts, NEW.delivery_attempts);
    RETURN NULL;
END \$\$;
CREATE TRIGGER stress_audit AFTER UPDATE ON tenant_s.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION stress_audit();
-- every dead-lettering, with its reason (redrives put some back)
CREATE TABLE stress_dead_events (id bigint NOT NULL, reason text NOT NULL,
                                 attempts integer NOT NULL);
CREATE FUNCTION stress_dead_audit() RETURNS trigger LANGUAGE plpgsql
SET search_path = public AS \$\$
BEGIN
    INSERT INTO public.stress_dead_events VALUES (NEW.id, NEW.dead_reason, NEW.delivery_attempts);
    RETURN NULL;
END \$\$;
CREATE TRIGGER stress_dead_audit AFTER INSERT ON tenant_s.delivery_outbox_dead
    FOR EACH ROW EXECUTE FUNCTION stress_dead_audit();
INSERT INTO stress_enqueued
SELECT outbox_enqueue('agent:' || (g % 4 + 1), 'work', '\\x00'::bytea,
                      CASE WHEN g % 3 = 0 THEN NULL ELSE 'tenant-' || g % 3 END,
                      outbox => $O)
FROM generate_series(1, 40) g;
});

sub pclaim_sql
{
	my ($args) = @_;
	return qq{WITH c AS (SELECT id, delivery_attempts, created_at, not_before, expires_at
                   FROM outbox_claim($args, outbox => $O)),
     l AS (INSERT INTO stress_claims
           SELECT id, delivery_attempts, created_at, not_before, expires_at,
                  statement_timestamp(), clock_timestamp() FROM c)
SELECT coalesce(array_agg(id), '{}')::text AS ids FROM c \\gset};
}

my %pscripts = (
	'006p_producer@6' => qq{
\\set r random(1, 4)
\\set t random(0, 2)
BEGIN;
SELECT outbox_enqueue('agent:' || :r, 'work', '\\x0102'::bytea,
                      CASE WHEN :t = 0 THEN NULL ELSE 'tenant-' || :t END,
                      outbox => $O) AS id \\gset
INSERT INTO stress_enqueued VALUES (:id);
COMMIT;
},
	# a scheduled row, due within 300 ms
	'006p_producer_scheduled@1' => qq{
\\set r random(1, 4)
\\set d random(0, 300)
BEGIN;
SELECT outbox_enqueue('agent:' || :r, 'work', '\\x04'::bytea,
                      not_before => now() + :d * interval '1 ms', outbox => $O) AS id \\gset
INSERT INTO stress_enqueued VALUES (:id);
COMMIT;
},
	# a row that expires within half a second
	'006p_producer_expiring@2' => qq{
\\set r random(1, 4)
\\set d random(20, 500)
BEGIN;
SELECT outbox_enqueue('agent:' || :r, 'work', '\\x05'::bytea,
                      expires_at => now() + :d * interval '1 ms', outbox => $O) AS id \\gset
INSERT INTO stress_enqueued VALUES (:id);
COMMIT;
},
	# a row scheduled with a short window (it often expires unclaimed, and
	# the worker dead-letters it)
	'006p_producer_window@1' => qq{
\\set r random(1, 4)
\\set d random(0, 200)
\\set w random(1, 50)
BEGIN;
SELECT outbox_enqueue('agent:' || :r, 'work', '\\x07'::bytea,
                      not_before => now() + :d * interval '1 ms',
                      expires_at => now() + (:d + :w) * interval '1 ms', outbox => $O) AS id \\gset
INSERT INTO stress_enqueued VALUES (:id);
COMMIT;
},
	# idempotent producers: 100 keys per recipient, racing (a dedup hit
	# returns the existing id).  Their recipients (agent:5, agent:6) are
	# never reassigned: what outbox_reassign does with a row whose key the
	# new recipient already holds is not decided (today: 23505, and
	# nothing moves), so the run does not provoke it.
	'006p_producer_dedup@2' => qq{
\\set r random(5, 6)
\\set k random(1, 100)
BEGIN;
SELECT outbox_enqueue('agent:' || :r, 'work', '\\x06'::bytea,
                      dedup_key => 'key-' || :k, outbox => $O) AS id \\gset
INSERT INTO stress_enqueued VALUES (:id) ON CONFLICT DO NOTHING;
COMMIT;
},
	'006p_producer_rollback@1' => qq{
\\set r random(1, 4)
BEGIN;
SELECT outbox_enqueue('agent:' || :r, 'work', '\\x03'::bytea, outbox => $O) AS id \\gset
ROLLBACK;
INSERT INTO stress_rolled_back VALUES (:id);
},
	'006p_relay_tx@4' => "\\set n random(1, 8)\nBEGIN;\n"
	  . pclaim_sql(':n')
	  . "\nSELECT outbox_ack(':ids'::bigint[], outbox => $O);\nCOMMIT;\n",
	'006p_relay_autocommit@3' => "\\set n random(1, 8)\n"
	  . pclaim_sql(':n')
	  . "\nSELECT outbox_ack(':ids'::bigint[], outbox => $O);\n",
	'006p_relay_recipient@1' => "\\set r random(1, 4)\n"
	  . pclaim_sql(q{5, 'agent:' || :r})
	  . "\nSELECT outbox_ack(':ids'::bigint[], 'agent:' || :r, $O);\n",
	# pushes that failed: released (backoff), or with a retry_after
	'006p_relay_release@3' => "\\set n random(1, 4)\nBEGIN;\n"
	  . pclaim_sql(':n')
	  . "\nSELECT outbox_release(':ids'::bigint[], error => 'push failed', outbox => $O);\nCOMMIT;\n",
	'006p_relay_retry_after@1' => "\\set n random(1, 4)\n\\set d random(0, 200)\n"
	  . pclaim_sql(':n')
	  . "\nSELECT outbox_release(':ids'::bigint[], :d * interval '1 ms', 'busy', $O);\n",
	# rows the recipient can never take
	'006p_relay_reject@1' => "\\set n random(1, 2)\n"
	  . pclaim_sql(':n')
	  . "\nSELECT outbox_reject(':ids'::bigint[], 'malformed', $O);\n",
	'006p_late_ack@2' => qq{
\\set k random(0, 30)
SELECT outbox_ack((SELECT max(id) FROM stress_enqueued) - :k, outbox => $O);
},
	'006p_sweeper@2' => qq{
\\set m random(1, 20)
SELECT outbox_reclaim('0 seconds', outbox => $O);
SELECT outbox_reclaim('0 seconds', :m, $O);
},
	'006p_resync@1' => qq{
\\set r random(1, 4)
\\set t random(0, 2)
SELECT outbox_reclaim_recipient('agent:' || :r,
                                CASE WHEN :t = 0 THEN NULL ELSE 'tenant-' || :t END, $O);
},
	'006p_reassign@1' => qq{
\\set a random(1, 4)
\\set b random(1, 4)
SELECT outbox_reassign('agent:' || :a, 'agent:' || :b, $O);
},
	# an operator redriving a few dead letters
	'006p_redrive@1' => qq{
BEGIN;
SELECT coalesce(array_agg(id), '{}')::text AS dead_ids
  FROM (SELECT id FROM tenant_s.delivery_outbox_dead ORDER BY random() LIMIT 3) d \\gset
INSERT INTO stress_redrive_tried SELECT unnest(':dead_ids'::bigint[]);
INSERT INTO stress_counts SELECT 'redriven', outbox_redrive(':dead_ids'::bigint[], $O);
COMMIT;
},
	'006p_reader@1' => qq{
\\set r random(1, 4)
SELECT count(*) FROM outbox_replay('agent:' || :r, 0, 50, outbox => $O);
SELECT * FROM outbox_stats($O);
SELECT outbox_next_due(outbox => $O);
SELECT outbox_purge('1 hour', $O);
});

$pnode->pgbench(
	"--no-vacuum --client=8 --jobs=2 --time=$duration --max-tries=1 --protocol=simple",
	0,
	[
		qr{number of transactions actually processed: [1-9]\d*},
		qr{number of failed transactions: 0 \(0\.000%\)}
	],
	[qr{^((?!ERROR|aborted|deadlock).)*$}s],
	'policy: pgbench stress run with max_attempts, ttl and backoff: every client finished, zero failed transactions',
	\%pscripts);

# Drain, as a relay would, until nothing is pending or delivered: expired
# rows are the worker's to dead-letter, rows not yet due wait.
my $drained = 0;
my $drain_deadline = time + 60;
while (time < $drain_deadline)
{
	$pnode->safe_psql(
		'postgres', qq{
SELECT outbox_reclaim('0 seconds', outbox => $O);
SELECT outbox_ack(ARRAY(SELECT id FROM outbox_claim(1000000, outbox => $O)), outbox => $O);
});
	if ($pnode->safe_psql('postgres', "SELECT pending + delivered FROM outbox_stats($O)") eq '0')
	{
		$drained = 1;
		last;
	}
	usleep(200_000);
}
ok($drained, 'policy: drained: nothing pending or delivered');

# Every row whose enqueue committed ends acked or dead-lettered: never
# both, never neither, and nothing else is there.
is( $pnode->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE o.id IS NOT NULL AND d.id IS NOT NULL) || '|'
    || count(*) FILTER (WHERE o.id IS NULL AND d.id IS NULL) || '|'
    || count(*) FILTER (WHERE o.id IS NOT NULL AND o.delivery_state <> 'acked')
  FROM stress_enqueued e
  LEFT JOIN tenant_s.delivery_outbox o USING (id)
  LEFT JOIN tenant_s.delivery_outbox_dead d USING (id)}),
	'0|0|0',
	'policy: every committed row is acked or dead-lettered: never both (0), never neither (0), none left open (0)');
is( $pnode->safe_psql(
		'postgres', q{
SELECT count(*) FROM (SELECT id FROM tenant_s.delivery_outbox
                      UNION ALL SELECT id FROM tenant_s.delivery_outbox_dead
                      EXCEPT ALL SELECT id FROM stress_enqueued) x}),
	'0', 'policy: no other row, and no id twice among the rows and dead letters');
is( $pnode->safe_psql(
		'postgres', q{
SELECT count(*) FROM stress_rolled_back r
 WHERE EXISTS (SELECT FROM tenant_s.delivery_outbox o WHERE o.id = r.id)
    OR EXISTS (SELECT FROM tenant_s.delivery_outbox_dead d WHERE d.id = r.id)}),
	'0', 'policy: no row, live or dead, from a rolled-back enqueue');

# The dead letters are what their reason says.
is( $pnode->safe_psql(
		'postgres', q{
SELECT count(*) FROM tenant_s.delivery_outbox_dead
 WHERE dead_reason IS NULL OR dead_at IS NULL
    OR delivery_state NOT IN ('pending', 'delivered') OR acked_at IS NOT NULL
    OR (dead_reason = 'max_attempts' AND delivery_attempts < 3)
    OR (dead_reason = 'expired'
        AND NOT (dead_at >= created_at + interval '2 seconds' OR dead_at >= expires_at))
    OR (dead_reason = 'rejected' AND (delivery_attempts < 1 OR last_error IS DISTINCT FROM 'malformed'))
    OR dead_reason NOT IN ('max_attempts', 'expired', 'rejected')}),
	'0',
	'policy: every dead letter is unacked; max_attempts ones have 3 attempts, expired ones are past their ttl or expires_at, rejected ones were delivered');
is( $pnode->safe_psql(
		'postgres', q{
SELECT count(*) FROM tenant_s.delivery_outbox
 WHERE delivery_attempts < 1 OR delivered_at IS NULL OR acked_at IS NULL
    OR NOT (created_at <= delivered_at AND delivered_at <= acked_at)}),
	'0', 'policy: every acked row has attempts >= 1 and created_at <= delivered_at <= acked_at');

# Each kind of ending and each policy path happened, so the run proved
# something (dead-letterings counted over the run: redrives put some back).
my $kinds = $pnode->safe_psql(
	'postgres', q{
SELECT (SELECT count(*) FROM tenant_s.delivery_outbox WHERE delivery_state = 'acked') || '|'
    || (SELECT count(*) FROM stress_dead_events WHERE reason = 'max_attempts') || '|'
    || (SELECT count(*) FROM stress_dead_events WHERE reason = 'expired') || '|'
    || (SELECT count(*) FROM stress_dead_events WHERE reason = 'rejected') || '|'
    || (SELECT coalesce(sum(n), 0) FROM stress_counts WHERE what = 'redriven') || '|'
    || (SELECT count(*) FROM tenant_s.delivery_outbox WHERE dedup_key IS NOT NULL)
       + (SELECT count(*) FROM tenant_s.delivery_outbox_dead WHERE dedup_key IS NOT NULL)});
note "policy: acked|dead-lettered by max_attempts, expiry, reject (over the run)|redriven|with a dedup_key: $kinds";
like($kinds, qr/^[1-9]\d*\|[1-9]\d*\|[1-9]\d*\|[1-9]\d*\|[1-9]\d*\|[1-9]\d*$/,
	'policy: rows were acked, dead-lettered by max_attempts, by expiry and by reject, redriven, and deduplicated');

# Each row's updates form legal chains, each from where the last one left
# it; a chain starts again at pending/0 only for a row that was redriven.
is( $pnode->safe_psql(
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
   OR NOT ((old_state IS NOT DISTINCT FROM coalesce(prev_state, 'pending')
            AND old_attempts IS NOT DISTINCT FROM coalesce(prev_attempts, 0))
           OR (old_state = 'pending' AND old_attempts = 0
               AND id IN (SELECT id FROM stress_redrive_tried)))
   OR new_attempts <> old_attempts
        + CASE WHEN old_state = 'pending' AND new_state = 'delivered'
               THEN 1 ELSE 0 END}),
	'0',
	'policy: each row changed by legal transitions only, each from where the last one (or a redrive) left it');
is( $pnode->safe_psql(
		'postgres', q{
SELECT count(*) FROM tenant_s.delivery_outbox o
LEFT JOIN (SELECT id,
                  count(*) FILTER (WHERE old_state = 'pending'
                                     AND new_state = 'delivered') AS deliveries,
                  count(*) FILTER (WHERE new_state = 'acked') AS acks
           FROM stress_transitions GROUP BY id) t USING (id)
WHERE t.acks IS DISTINCT FROM 1
   OR (o.id NOT IN (SELECT id FROM stress_redrive_tried)
       AND t.deliveries IS DISTINCT FROM o.delivery_attempts)}),
	'0',
	'policy: one ack per acked row; delivery_attempts counts every move to delivered (rows never redriven)');
is( $pnode->safe_psql(
		'postgres', q{
SELECT count(*) FROM (SELECT id, attempts, created_at FROM stress_claims
                      GROUP BY 1, 2, 3 HAVING count(*) > 1) d}),
	'0', 'policy: no two claims returned the same row for the same attempt');
# No claim handed out a row before its not_before, or one past its
# expires_at or ttl at the time the claim ran (50 ms of slack for a claim
# inside a transaction that judges by the transaction's start).
is( $pnode->safe_psql(
		'postgres', q{
SELECT count(*) FROM stress_claims
 WHERE not_before > claim_end
    OR expires_at <= claim_start - interval '50 ms'
    OR created_at + interval '2 seconds' <= claim_start - interval '50 ms'}),
	'0', 'policy: no claim before not_before, none after expires_at or the ttl');
cmp_ok($pnode->safe_psql('postgres',
		'SELECT count(*) FROM stress_claims WHERE expires_at IS NOT NULL'),
	'>', 0, 'policy: rows with an expires_at were claimed');

note 'policy: enqueued: ' . $pnode->safe_psql('postgres', 'SELECT count(*) FROM stress_enqueued')
  . ', transitions: ' . $pnode->safe_psql('postgres', 'SELECT count(*) FROM stress_transitions')
  . ', claims: ' . $pnode->safe_psql('postgres', 'SELECT count(*) FROM stress_claims');

$pnode->stop;

###########################################################################
# Ordered delivery (issue: ordered outboxes): a created outbox with
# ordered = true, the worker preloaded (sweeping every 200 ms, reclaiming
# after 1 s, dead-lettering expired rows).  Producers for four recipients
# and three tenants (twelve groups) commit, roll back, hold their
# transaction open a little (pg_sleep) after an insert, insert three rows
# in one statement, or give their row a short expiry; relays claim and ack
# (in one transaction, in autocommit, slowly, for a recipient or a
# group), release (with and without a retry_after) and reject; sweepers
# reclaim and resync.  Every claim is logged in the relay's transaction
# (with the transaction's id and a clock: a sequence shared with the
# transition log), every state change and every row leaving the outbox
# by AFTER UPDATE and AFTER DELETE triggers, with that clock.  The clock
# orders the changes: a claim that saw an ack (or a dead-lettering)
# committed drew its number after the ack did.
#
# After a drain, besides the checks of the runs above (deliveries are the
# claims' moves to delivered: a late ack of a row put back to pending
# passes through delivered too, and is not one):
#  - per (recipient, tenant) group, the first deliveries are in id order
#    (rows first delivered by the same claim, one run, count as one step);
#  - no row was moved to delivered while a lower-id row of its group was
#    not yet done, where done means acked or gone from the outbox (a dead
#    letter) before, and rows whose enqueue rolled back are not rows; a
#    lower row delivered by the same claim (the same run) and a lower row
#    already past its expiry (a claim skips it) are not in the way.
###########################################################################

my $onode = outbox_node(
	'ordered',
	preload => 1,
	conf => qq{
log_statement = none
max_connections = 30
delivery_outbox.database = 'postgres'
delivery_outbox.sweep_interval = '200ms'
delivery_outbox.reclaim_after = '1s'
delivery_outbox.retain_acked = -1
},
	extension => ['postgres']);
my $OO = q{'tenant_o.delivery_outbox'};
my $oduration = 15;    # seconds of pgbench

$onode->safe_psql(
	'postgres', qq{
CREATE SCHEMA tenant_o;
SELECT outbox_create('tenant_o');
SELECT outbox_configure($OO, ordered => true);
CREATE SEQUENCE stress_clock;
CREATE TABLE stress_enqueued (id bigint PRIMARY KEY, recipient text NOT NULL,
                              tenant_id text, expires_at timestamptz,
                              how text NOT NULL);
CREATE TABLE stress_rolled_back (id bigint PRIMARY KEY);
CREATE TABLE stress_claims (
    seq       bigint NOT NULL DEFAULT nextval('stress_clock'),
    id        bigint NOT NULL,
    attempts  integer NOT NULL,
    xid       xid8 NOT NULL,
    n         integer NOT NULL);   -- rows the claim returned
CREATE TABLE stress_transitions (
    seq          bigint PRIMARY KEY DEFAULT nextval('stress_clock'),
    id           bigint NOT NULL,
    old_state    text NOT NULL,
    new_state    text NOT NULL,    -- 'gone': deleted (dead-lettered)
    old_attempts integer NOT NULL,
    new_attempts integer NOT NULL,
    xid          xid8 NOT NULL DEFAULT pg_current_xact_id(),
    at           timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION stress_audit() RETURNS trigger LANGUAGE plpgsql
SET search_path = public AS \$\$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO public.stress_transitions
            (id, old_state, new_state, old_attempts, new_attempts)
        VALUES (OLD.id, OLD.delivery_state, 'gone', OLD.delivery_attempts,
                OLD.delivery_attempts);
    ELSE
        INSERT INTO public.stress_transitions
            (id, old_state, new_state, old_attempts, new_attempts)
        VALUES (NEW.id, OLD.delivery_state, NEW.delivery_state,
                OLD.delivery_attempts, NEW.delivery_attempts);
    END IF;
    RETURN NULL;
END \$\$;
CREATE TRIGGER stress_audit AFTER UPDATE OR DELETE ON tenant_o.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION stress_audit();
INSERT INTO stress_enqueued
SELECT id, 'agent:' || (g % 4 + 1), CASE WHEN g % 3 = 0 THEN NULL ELSE 'tenant-' || g % 3 END,
       NULL, 'seed'
  FROM generate_series(1, 60) g,
       LATERAL outbox_enqueue('agent:' || (g % 4 + 1), 'work', '\\x00'::bytea,
                              CASE WHEN g % 3 = 0 THEN NULL ELSE 'tenant-' || g % 3 END,
                              outbox => $OO) id;
});

# The claim every relay script (and the drain) uses: claim, log what was
# claimed in the same transaction, hand the ids to pgbench.
sub oclaim_sql
{
	my ($args) = @_;
	return qq{WITH c AS (SELECT id, delivery_attempts FROM outbox_claim($args, outbox => $OO)),
     l AS (INSERT INTO stress_claims (id, attempts, xid, n)
           SELECT id, delivery_attempts, pg_current_xact_id(), count(*) OVER () FROM c)
SELECT coalesce(array_agg(id), '{}')::text AS ids FROM c};
}

# the group of a producer: recipient :r, tenant :t (0: none)
my $ogroup = q{'agent:' || :r, 'work', '\x0102'::bytea,
                      CASE WHEN :t = 0 THEN NULL ELSE 'tenant-' || :t END};
my $orec = q{INSERT INTO stress_enqueued
SELECT id, recipient, tenant_id, expires_at, '%s' FROM tenant_o.delivery_outbox WHERE id IN (%s);};
my $oset = "\\set r random(1, 4)\n\\set t random(0, 2)\n";

my %oscripts = (
	'006o_producer@6' => $oset . qq{BEGIN;
SELECT outbox_enqueue($ogroup, outbox => $OO) AS id \\gset
} . sprintf($orec, 'plain', ':id') . qq{
COMMIT;
},
	# an insert whose transaction stays open a little, then another row of
	# the same group
	'006o_producer_slow@3' => $oset . qq{\\set d random(5, 80)
BEGIN;
SELECT outbox_enqueue($ogroup, outbox => $OO) AS a \\gset
SELECT pg_sleep(:d / 1000.0);
SELECT outbox_enqueue($ogroup, outbox => $OO) AS b \\gset
} . sprintf($orec, 'slow', ':a, :b') . qq{
COMMIT;
},
	# three rows of one INSERT statement, the transaction open after it
	'006o_producer_insert@1' => $oset . qq{\\set d random(0, 40)
BEGIN;
WITH i AS (INSERT INTO tenant_o.delivery_outbox (recipient, kind, payload, tenant_id)
           SELECT 'agent:' || :r, 'work', '\\x09'::bytea,
                  CASE WHEN :t = 0 THEN NULL ELSE 'tenant-' || :t END
             FROM generate_series(1, 3)
           RETURNING id, recipient, tenant_id, expires_at)
INSERT INTO stress_enqueued SELECT *, 'insert' FROM i;
SELECT pg_sleep(:d / 1000.0);
COMMIT;
},
	# a row that expires soon (a claim skips it, the worker dead-letters it)
	'006o_producer_expiring@1' => $oset . qq{\\set d random(20, 400)
BEGIN;
SELECT outbox_enqueue($ogroup, expires_at => clock_timestamp() + :d * interval '1 ms',
                      outbox => $OO) AS id \\gset
} . sprintf($orec, 'expiring', ':id') . qq{
COMMIT;
},
	# an insert that stays open, then rolls back
	'006o_producer_rollback@2' => $oset . qq{\\set d random(0, 60)
BEGIN;
SELECT outbox_enqueue($ogroup, outbox => $OO) AS id \\gset
SELECT pg_sleep(:d / 1000.0);
ROLLBACK;
INSERT INTO stress_rolled_back VALUES (:id);
},
	'006o_relay_tx@4' => "\\set n random(1, 8)\nBEGIN;\n"
	  . oclaim_sql(':n') . " \\gset"
	  . "\nSELECT outbox_ack(':ids'::bigint[], outbox => $OO);\nCOMMIT;\n",
	'006o_relay_autocommit@3' => "\\set n random(1, 8)\n"
	  . oclaim_sql(':n') . " \\gset"
	  . "\nSELECT outbox_ack(':ids'::bigint[], outbox => $OO);\n",
	# a slow relay: the claimed run stays delivered a while
	'006o_relay_slow@1' => "\\set n random(1, 8)\n\\set d random(0, 100)\n"
	  . oclaim_sql(':n') . " \\gset"
	  . "\nSELECT pg_sleep(:d / 1000.0);\nSELECT outbox_ack(':ids'::bigint[], outbox => $OO);\n",
	'006o_relay_recipient@2' => "\\set r random(1, 4)\n"
	  . oclaim_sql(q{5, 'agent:' || :r}) . " \\gset"
	  . "\nSELECT outbox_ack(':ids'::bigint[], 'agent:' || :r, $OO);\n",
	'006o_relay_group@1' => "\\set r random(1, 4)\n\\set t random(1, 2)\n"
	  . oclaim_sql(q{5, 'agent:' || :r, 'tenant-' || :t}) . " \\gset"
	  . "\nSELECT outbox_ack(':ids'::bigint[], outbox => $OO);\n",
	'006o_relay_release@2' => "\\set n random(1, 4)\nBEGIN;\n"
	  . oclaim_sql(':n') . " \\gset"
	  . "\nSELECT outbox_release(':ids'::bigint[], error => 'push failed', outbox => $OO);\nCOMMIT;\n",
	'006o_relay_retry_after@1' => "\\set n random(1, 4)\n\\set d random(0, 200)\n"
	  . oclaim_sql(':n') . " \\gset"
	  . "\nSELECT outbox_release(':ids'::bigint[], :d * interval '1 ms', 'busy', $OO);\n",
	'006o_relay_reject@1' => "\\set n random(1, 2)\n"
	  . oclaim_sql(':n') . " \\gset"
	  . "\nSELECT outbox_reject(':ids'::bigint[], 'malformed', $OO);\n",
	'006o_sweeper@1' => qq{
\\set m random(1, 20)
SELECT outbox_reclaim('0 seconds', outbox => $OO);
SELECT outbox_reclaim('0 seconds', :m, $OO);
},
	'006o_resync@1' => $oset . qq{
SELECT outbox_reclaim_recipient('agent:' || :r,
                                CASE WHEN :t = 0 THEN NULL ELSE 'tenant-' || :t END, $OO);
},
	'006o_reader@1' => qq{
\\set r random(1, 4)
SELECT outbox_horizon($OO);
SELECT count(*) FROM outbox_replay('agent:' || :r, 0, 50, outbox => $OO);
SELECT * FROM outbox_stats($OO);
});

$onode->pgbench(
	"--no-vacuum --client=10 --jobs=2 --time=$oduration --max-tries=1 --protocol=simple",
	0,
	[
		qr{number of transactions actually processed: [1-9]\d*},
		qr{number of failed transactions: 0 \(0\.000%\)}
	],
	[qr{^((?!ERROR|aborted|deadlock).)*$}s],
	'ordered: pgbench stress run: every client finished, zero failed transactions',
	\%oscripts);

# Drain, as a relay would (logging its claims), until nothing is pending
# or delivered: expired rows are the worker's to dead-letter, released
# rows wait for their retry_after.
my $odrained = 0;
my $odrain_deadline = time + 60;
while (time < $odrain_deadline)
{
	$onode->safe_psql('postgres', "SELECT outbox_reclaim('0 seconds', outbox => $OO)");
	my $ids = $onode->safe_psql('postgres', oclaim_sql(1000000));
	$onode->safe_psql('postgres', "SELECT outbox_ack('$ids'::bigint[], outbox => $OO)");
	if ($onode->safe_psql('postgres', "SELECT pending + delivered FROM outbox_stats($OO)") eq '0')
	{
		$odrained = 1;
		last;
	}
	usleep(100_000);
}
ok($odrained, 'ordered: drained: nothing pending or delivered');

# The run did what it is meant to try.
my $okinds = $onode->safe_psql(
	'postgres', q{
SELECT (SELECT count(*) FROM stress_enqueued WHERE how = 'slow') || '|'
    || (SELECT count(*) FROM stress_enqueued WHERE how = 'insert') || '|'
    || (SELECT count(*) FROM stress_rolled_back) || '|'
    || (SELECT count(DISTINCT xid) FROM (SELECT c.xid FROM stress_claims c JOIN stress_enqueued e USING (id)
                                          GROUP BY c.xid, e.recipient, e.tenant_id
                                         HAVING count(*) > 1) r) || '|'
    || (SELECT count(*) FROM stress_transitions WHERE old_state = 'delivered' AND new_state = 'pending') || '|'
    || (SELECT count(*) FROM tenant_o.delivery_outbox_dead WHERE dead_reason = 'rejected') || '|'
    || (SELECT count(*) FROM tenant_o.delivery_outbox_dead WHERE dead_reason = 'expired') || '|'
    || (SELECT count(*) FROM stress_transitions WHERE new_state = 'acked')});
note "ordered: slow|insert|rolled back|claims with a run of 2+ rows of a group|back to pending|rejected|expired|acked: $okinds";
like($okinds, qr/^[1-9]\d*\|[1-9]\d*\|[1-9]\d*\|[1-9]\d*\|[1-9]\d*\|[1-9]\d*\|[1-9]\d*\|[1-9]\d*$/,
	'ordered: the run had slow, multi-row and rolled-back inserts, runs of several rows, releases or reclaims, rejects, expiries and acks');

# Every committed row ends acked or dead-lettered, nothing else is there.
is( $onode->safe_psql(
		'postgres', q{
SELECT count(*) FILTER (WHERE o.id IS NOT NULL AND d.id IS NOT NULL) || '|'
    || count(*) FILTER (WHERE o.id IS NULL AND d.id IS NULL) || '|'
    || count(*) FILTER (WHERE o.id IS NOT NULL AND o.delivery_state <> 'acked') || '|'
    || count(*) FILTER (WHERE d.id IS NOT NULL AND d.dead_reason NOT IN ('rejected', 'expired'))
  FROM stress_enqueued e
  LEFT JOIN tenant_o.delivery_outbox o USING (id)
  LEFT JOIN tenant_o.delivery_outbox_dead d USING (id)}),
	'0|0|0|0',
	'ordered: every committed row is acked or dead-lettered (rejected, expired): never both, never neither, none open');
is( $onode->safe_psql(
		'postgres', q{
SELECT count(*) FROM (SELECT id FROM tenant_o.delivery_outbox
                      UNION ALL SELECT id FROM tenant_o.delivery_outbox_dead
                      EXCEPT ALL SELECT id FROM stress_enqueued) x}),
	'0', 'ordered: no other row, and no id twice');
is( $onode->safe_psql(
		'postgres', q{
SELECT count(*) FROM stress_rolled_back r
 WHERE EXISTS (SELECT FROM tenant_o.delivery_outbox o WHERE o.id = r.id)
    OR EXISTS (SELECT FROM tenant_o.delivery_outbox_dead d WHERE d.id = r.id)}),
	'0', 'ordered: no row from a rolled-back enqueue');

# Legal chains, each change from where the last one left the row.
is( $onode->safe_psql(
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
                                     ('delivered', 'delivered'),
                                     ('delivered', 'gone'),
                                     ('pending', 'gone'))
   OR old_state IS DISTINCT FROM coalesce(prev_state, 'pending')
   OR old_attempts IS DISTINCT FROM coalesce(prev_attempts, 0)
   OR prev_state = 'gone'
   OR new_attempts <> old_attempts
        + CASE WHEN old_state = 'pending' AND new_state = 'delivered'
               THEN 1 ELSE 0 END}),
	'0',
	'ordered: each row changed by legal transitions only, each from where the last one left it');

# The claims' log and the transition log agree: each row a claim returned
# is a move to delivered of that attempt in that transaction; every other
# move to delivered is a late ack's (of a row a reclaim or a release had
# put back: it passes through delivered to acked, in one transaction).
# Only the claimed ones are deliveries below.
$onode->safe_psql(
	'postgres', q{
CREATE INDEX ON stress_claims (id);
CREATE TABLE stress_deliveries AS
SELECT t.seq, t.id, t.xid, t.at, e.recipient, coalesce(e.tenant_id, '') AS tenant
  FROM stress_transitions t JOIN stress_enqueued e USING (id)
 WHERE t.old_state = 'pending' AND t.new_state = 'delivered'
   AND EXISTS (SELECT FROM stress_claims c
                WHERE c.id = t.id AND c.attempts = t.new_attempts AND c.xid = t.xid);
CREATE INDEX ON stress_deliveries (id, xid);
ANALYZE stress_deliveries;
});
is( $onode->safe_psql(
		'postgres', q{
SELECT (SELECT count(*) FROM (SELECT id, attempts, xid FROM stress_claims
                              EXCEPT ALL
                              SELECT id, new_attempts, xid FROM stress_transitions
                               WHERE old_state = 'pending' AND new_state = 'delivered') a)
    || '|' ||
       (SELECT count(*) FROM (
            SELECT t.*, lead(new_state) OVER w AS next_state, lead(xid) OVER w AS next_xid
              FROM stress_transitions t WINDOW w AS (PARTITION BY id ORDER BY seq)) t
         WHERE old_state = 'pending' AND new_state = 'delivered'
           AND NOT EXISTS (SELECT FROM stress_deliveries d WHERE d.id = t.id AND d.seq = t.seq)
           AND NOT (next_state = 'acked' AND next_xid = xid))}),
	'0|0', 'ordered: every claim logged is a move to delivered in its transaction; every other move to delivered is a late ack passing through');
is( $onode->safe_psql(
		'postgres', q{
SELECT count(*) FROM (SELECT id, attempts FROM stress_claims
                      GROUP BY id, attempts HAVING count(*) > 1) d}),
	'0', 'ordered: no two claims returned the same row for the same attempt');

# Per group, the first deliveries (by a claim) are in id order: no row was
# first delivered after a higher row of its group was, except within one
# claim.
my $first_out_of_order = $onode->safe_psql(
	'postgres', q{
WITH first AS (
    SELECT DISTINCT ON (id) id, seq, xid, recipient, tenant
      FROM stress_deliveries ORDER BY id, seq)
SELECT count(*) || coalesce(' e.g. ' || min(lo.id || ' after ' || hi.id), '')
  FROM first lo JOIN first hi
    ON hi.recipient = lo.recipient AND hi.tenant = lo.tenant
   AND hi.id > lo.id AND hi.seq < lo.seq AND hi.xid <> lo.xid});
is($first_out_of_order, '0',
	'ordered: per (recipient, tenant) group, the first deliveries are in id order');

# No row moved to delivered while a lower row of its group was not yet
# done (acked, or gone from the outbox), unless that row was delivered by
# the same claim or was already past its expiry.
my $overtaken = $onode->safe_psql(
	'postgres', q{
WITH done AS (
    SELECT id, min(seq) AS seq FROM stress_transitions
     WHERE new_state IN ('acked', 'gone') GROUP BY id),
rows AS (
    SELECT e.id, e.recipient, coalesce(e.tenant_id, '') AS tenant, e.expires_at,
           coalesce(d.seq, 9223372036854775807) AS done_seq
      FROM stress_enqueued e LEFT JOIN done d USING (id))
SELECT count(*) || coalesce(' e.g. ' || min(v.id || ' (clock ' || v.seq || ') while ' || r.id || ' was open'), '')
  FROM stress_deliveries v JOIN rows r
    ON r.recipient = v.recipient AND r.tenant = v.tenant AND r.id < v.id
 WHERE r.done_seq > v.seq
   AND NOT (r.expires_at IS NOT NULL AND r.expires_at <= v.at)
   AND NOT EXISTS (SELECT FROM stress_deliveries w WHERE w.id = r.id AND w.xid = v.xid)});
is($overtaken, '0',
	'ordered: no row was delivered while a lower row of its group was unacked (not dead-lettered, not rolled back, not in the same run)');

note 'ordered: enqueued: ' . $onode->safe_psql('postgres', 'SELECT count(*) FROM stress_enqueued')
  . ', transitions: ' . $onode->safe_psql('postgres', 'SELECT count(*) FROM stress_transitions')
  . ', claims: ' . $onode->safe_psql('postgres', 'SELECT count(*) FROM stress_claims')
  . ', claim statements that got rows: ' . $onode->safe_psql('postgres', 'SELECT count(DISTINCT xid) FROM stress_claims');

$onode->stop;

done_testing();
