
# Copyright (c) 2026, delivery_outbox developers

# t/021_attack.pl
#
# The background worker runs an outbox owner's code as the owner (SPEC.md,
# "Trust: who runs what"): the worker connects as the bootstrap superuser,
# yet the triggers, CHECK, DEFAULT, index expressions and predicates a
# tenant puts on its outboxes and their dead-letter tables run, at the
# worker's sweeps, with the tenant's rights and gain nothing.  The library
# is preloaded, a worker serves "postgres" (sweep_interval 200 ms,
# reclaim_after 1 s, delivery_outbox.retain_acked -1).  The tenant, no
# superuser, owns a created outbox (retain_acked 0), a partitioned one (4
# ids a partition, retain_acked 0) and the seed's table, attached with its
# code already on it (ttl 1 s); each piece of code calls t.attempt(),
# which logs who it ran as (and its backend's pid) and tries
# ALTER ROLE ... SUPERUSER and an INSERT into a table only the superuser
# may write, each undone at once.  The test waits for, by the worker:
#
# - the reclaim of a row delivered more than 1 s ago (UPDATE triggers);
# - the expiry of a row past its expires_at and of one past the outbox's
#   ttl (DELETE from the outbox, INSERT into the dead-letter table);
# - the purge of acked rows (retain_acked 0: DELETE triggers);
# - the partition made ahead of rows a plain INSERT put in, and the drop
#   of a partition whose rows are all acked;
#
# and the partition made by an enqueue (a producer's).  Then: every logged
# run, of the worker and of the calls, ran as the tenant, never as a
# superuser, and gained nothing; the worker did run the tenant's UPDATE,
# DELETE and dead-letter INSERT code; the tenant is no superuser and the
# superuser's table is empty; the outboxes still work (claim and ack by a
# relay).  The test reads the tenant's tables only through t.q(), a
# function of the tenant's (SECURITY DEFINER), so that no read of the
# test's own runs the tenant's code as the superuser (the planner folds a
# predicate of constants whoever plans).

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
	preload => 1,
	conf => q{
delivery_outbox.database = 'postgres'
delivery_outbox.sweep_interval = '200ms'
delivery_outbox.reclaim_after = '1s'
delivery_outbox.retain_acked = -1
},
	extension => ['postgres']);
my $worker = wait_for_worker($node);

# the roles, the superuser's table, the tenant's schema
$node->safe_psql(
	'postgres', q{
CREATE ROLE regress_attack_owner;
CREATE ROLE regress_attack_producer;
CREATE ROLE regress_attack_relay;
GRANT EXECUTE ON FUNCTION
    outbox_create(name, name, text, bigint),
    outbox_attach(regclass, text),
    outbox_configure(regclass, text, integer, interval, interval, interval, boolean, interval),
    outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass),
    outbox_enqueue_batch(text[], text[], bytea[], text[], timestamptz[], timestamptz[], text[], regclass)
  TO regress_attack_owner;
GRANT EXECUTE ON FUNCTION
    outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass),
    outbox_enqueue_batch(text[], text[], bytea[], text[], timestamptz[], timestamptz[], text[], regclass)
  TO regress_attack_producer;
GRANT EXECUTE ON FUNCTION
    outbox_claim(integer, text, text, regclass),
    outbox_ack(bigint[], text, regclass)
  TO regress_attack_relay;
CREATE SCHEMA t AUTHORIZATION regress_attack_owner;
CREATE TABLE regress_attack_vault (probe text);
REVOKE ALL ON regress_attack_vault FROM PUBLIC;
});

# The tenant's code (as sql/attack.sql plants it), its outboxes, the
# grants its producer and relay need.
$node->safe_psql(
	'postgres', q{
SET ROLE regress_attack_owner;
CREATE TABLE t.log (
    n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    probe text NOT NULL, ran_as name NOT NULL, superuser boolean,
    alter_role text NOT NULL, vault text NOT NULL, pid integer);
GRANT USAGE ON SCHEMA t TO PUBLIC;
GRANT INSERT ON t.log TO PUBLIC;
CREATE FUNCTION t.attempt(probe text) RETURNS boolean
LANGUAGE plpgsql AS $f$
DECLARE
    alter_role text;
    vault text;
BEGIN
    BEGIN
        ALTER ROLE regress_attack_owner SUPERUSER;
        alter_role := 'GAINED';
        RAISE EXCEPTION 'undo it';
    EXCEPTION WHEN OTHERS THEN
        alter_role := coalesce(alter_role, SQLSTATE);
    END;
    BEGIN
        INSERT INTO public.regress_attack_vault VALUES (probe);
        vault := 'GAINED';
        RAISE EXCEPTION 'undo it';
    EXCEPTION WHEN OTHERS THEN
        vault := coalesce(vault, SQLSTATE);
    END;
    INSERT INTO t.log (probe, ran_as, superuser, alter_role, vault, pid)
    VALUES (probe, current_user,
            (SELECT r.rolsuper FROM pg_catalog.pg_roles r
              WHERE r.rolname OPERATOR(pg_catalog.=) current_user),
            alter_role, vault, pg_catalog.pg_backend_pid());
    RETURN true;
END
$f$;
CREATE FUNCTION t.trigger_probe() RETURNS trigger
LANGUAGE plpgsql AS $f$
BEGIN
    PERFORM t.attempt(pg_catalog.concat(TG_ARGV[0],
        pg_catalog.lower(TG_WHEN), ' ', pg_catalog.lower(TG_OP),
        CASE TG_LEVEL WHEN 'STATEMENT' THEN ' statement' END));
    IF TG_LEVEL OPERATOR(pg_catalog.=) 'STATEMENT' THEN
        RETURN NULL;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$f$;
CREATE FUNCTION t.check_probe(kind text) RETURNS boolean
LANGUAGE sql AS $f$ SELECT t.attempt('check') $f$;
CREATE FUNCTION t.default_probe() RETURNS text
LANGUAGE sql AS $f$ SELECT CASE WHEN t.attempt('default') THEN 'd' END $f$;
CREATE FUNCTION t.expression_probe(kind text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN
    PERFORM t.attempt('index expression');
    RETURN kind;
END
$f$;
CREATE FUNCTION t.predicate_probe(kind text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN
    RETURN t.attempt(coalesce(
        CASE WHEN kind OPERATOR(pg_catalog.=) 'folded' THEN 'folded predicate' END,
        'index predicate'));
END
$f$;
CREATE FUNCTION t.plant(tbl regclass) RETURNS void
LANGUAGE plpgsql AS $f$
BEGIN
    EXECUTE format('CREATE TRIGGER attack_before BEFORE INSERT OR UPDATE OR DELETE ON %s'
                   ' FOR EACH ROW EXECUTE FUNCTION t.trigger_probe('''')', tbl);
    EXECUTE format('CREATE TRIGGER attack_after AFTER INSERT OR UPDATE OR DELETE ON %s'
                   ' FOR EACH ROW EXECUTE FUNCTION t.trigger_probe('''')', tbl);
    EXECUTE format('CREATE TRIGGER attack_statement AFTER INSERT OR UPDATE OR DELETE ON %s'
                   ' FOR EACH STATEMENT EXECUTE FUNCTION t.trigger_probe('''')', tbl);
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT attack_check CHECK (t.check_probe(kind))', tbl);
    EXECUTE format('ALTER TABLE %s ADD COLUMN attack_default text DEFAULT t.default_probe()', tbl);
    EXECUTE format('CREATE INDEX ON %s ((t.expression_probe(kind)))', tbl);
    EXECUTE format('CREATE INDEX ON %s (id) WHERE t.predicate_probe(kind)', tbl);
    EXECUTE format('CREATE INDEX ON %s (id) WHERE t.predicate_probe(''folded'')', tbl);
    EXECUTE format('CREATE TRIGGER attack_before BEFORE INSERT OR UPDATE OR DELETE ON %s_dead'
                   ' FOR EACH ROW EXECUTE FUNCTION t.trigger_probe(''dead '')', tbl);
END
$f$;
-- the tenant's reads, for the test: as the tenant, whoever calls
CREATE FUNCTION t.q(query text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $f$
DECLARE
    r text;
BEGIN
    EXECUTE query INTO r;
    RETURN r;
END
$f$;

SELECT outbox_create('t', 'plain');
SELECT outbox_create('t', 'parted', partition_rows => 4);
-- the seed's table (migrations 027 and 028), and a dead-letter table of
-- the tenant's, which outbox_attach takes up
CREATE TABLE t.seed (
    id BIGSERIAL PRIMARY KEY,
    recipient TEXT NOT NULL,
    kind TEXT NOT NULL,
    tenant_id TEXT NULL,
    payload BYTEA NOT NULL,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMP NOT NULL,
    delivered_at TIMESTAMP NULL,
    acked_at TIMESTAMP NULL
);
CREATE INDEX idx_delivery_outbox_recipient_open
    ON t.seed (recipient, id) WHERE delivery_state <> 'acked';
CREATE FUNCTION t.delivery_outbox_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('delivery_outbox', NEW.id::text);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER delivery_outbox_notify_trg AFTER INSERT ON t.seed
    FOR EACH ROW EXECUTE FUNCTION t.delivery_outbox_notify();
CREATE TABLE t.seed_dead (
    id bigint PRIMARY KEY, recipient text NOT NULL, kind text NOT NULL,
    tenant_id text, payload bytea NOT NULL, delivery_state text NOT NULL,
    delivery_attempts integer NOT NULL, created_at timestamp NOT NULL,
    delivered_at timestamp, acked_at timestamp, not_before timestamptz,
    expires_at timestamptz, dedup_key text, last_error text,
    dead_at timestamptz NOT NULL DEFAULT now(), dead_reason text NOT NULL);
SELECT t.plant(tbl) FROM unnest('{t.plain,t.parted,t.seed}'::regclass[]) tbl;
SELECT outbox_attach('t.seed');
SELECT outbox_configure('t.plain', retain_acked => '0');
SELECT outbox_configure('t.parted', retain_acked => '0');
SELECT outbox_configure('t.seed', ttl => '1 second');
GRANT INSERT ON t.plain, t.parted, t.seed TO regress_attack_producer;
GRANT UPDATE, SELECT ON t.plain, t.parted, t.seed TO regress_attack_relay;
});
my $planted = $node->safe_psql('postgres', 'SELECT max(n) FROM t.log');

# the rows the worker is to sweep
$node->safe_psql(
	'postgres', q{
SET ROLE regress_attack_producer;
-- to be reclaimed (plain, seed) or acked and purged (plain)
SELECT outbox_enqueue('agent:r', 'work', '\x01', outbox => 't.plain');
SELECT outbox_enqueue('agent:a', 'work', '\x02', outbox => 't.plain');
SELECT outbox_enqueue('agent:r', 'work', '\x03', outbox => 't.seed');
-- past its expires_at; past the seed's ttl in a second
SELECT outbox_enqueue('agent:x', 'work', '\x04', expires_at => '2001-01-01', outbox => 't.plain');
SELECT outbox_enqueue('agent:x', 'work', '\x05', outbox => 't.seed');
-- ids 1 to 10 of the partitioned outbox (made with the partitions of 1
-- to 8): the enqueue makes the partition of 9 to 12, which its rows need,
-- and the one after it
SELECT count(*) FROM outbox_enqueue_batch(array_fill('agent:p'::text, '{10}'),
    array_fill('work'::text, '{10}'), array_fill('\x06'::bytea, '{10}'), outbox => 't.parted');
});
# read before the acks below: once they are in, the worker's retention may
# drop the acked partition at any sweep (test 6 waits for that)
my $parts = q{SELECT string_agg(c.relname, ',' ORDER BY c.relname)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 't.parted'::regclass};
is($node->safe_psql('postgres', $parts),
	'parted_p0,parted_p1,parted_p2,parted_p3',
	'the enqueue made the partitions of its rows and the one after');
$node->safe_psql(
	'postgres', q{
SET ROLE regress_attack_relay;
SELECT count(*) FROM outbox_claim(10, 'agent:r', outbox => 't.plain');
SELECT count(*) FROM outbox_claim(10, 'agent:r', outbox => 't.seed');
SELECT outbox_ack(ARRAY(SELECT id FROM outbox_claim(10, 'agent:a', outbox => 't.plain')),
                  outbox => 't.plain');
SELECT outbox_ack(ARRAY(SELECT id FROM outbox_claim(10, 'agent:p', outbox => 't.parted')),
                  outbox => 't.parted');
-- plain INSERTs of ids 11 to 13 (by the tenant: a plain INSERT runs the
-- table's code as the role that inserts), which the worker's upkeep
-- answers with the partition of 17 to 20
SET ROLE regress_attack_owner;
INSERT INTO t.parted (recipient, kind, payload)
SELECT 'agent:i', 'work', '\x07' FROM generate_series(1, 3);
});

# The worker's sweeps: reclaim, expiry (expires_at, ttl), purge, the
# partition made ahead and the one dropped.
ok( $node->poll_query_until(
		'postgres', q{
SELECT t.q($$SELECT delivery_state FROM t.plain WHERE recipient = 'agent:r'$$)}, 'pending'),
	'the worker reclaimed the row of the created outbox');
ok( $node->poll_query_until(
		'postgres', q{
SELECT t.q($$SELECT string_agg(recipient || ' ' || dead_reason, ', ' ORDER BY id)
               FROM t.plain_dead$$)}, 'agent:x expired'),
	'the worker expired the row past its expires_at');
ok( $node->poll_query_until(
		'postgres', q{
SELECT t.q($$SELECT string_agg(recipient || ' ' || dead_reason, ', ' ORDER BY recipient)
               FROM t.seed_dead$$)}, 'agent:r expired, agent:x expired'),
	'the worker expired the rows of the attached outbox past its ttl');
ok( $node->poll_query_until(
		'postgres', q{
SELECT t.q($$SELECT count(*) FROM t.plain WHERE recipient = 'agent:a'$$)}, '0'),
	'the worker purged the acked row');
ok( $node->poll_query_until(
		'postgres', "SELECT ($parts) = 'parted_p2,parted_p3,parted_p4'")
	  || diag('partitions: ' . $node->safe_psql('postgres', $parts)),
	'the worker dropped the two acked partitions and made one ahead of the rows inserted');

# Who ran the tenant's code: only the tenant, gaining nothing; the worker
# ran its UPDATE, DELETE and dead-letter INSERT code.
is( $node->safe_psql(
		'postgres', qq{
SELECT string_agg(format('%s by %s (%s) as %s: %s %s', probe,
                         CASE pid WHEN $worker THEN 'the worker' ELSE 'pid ' || pid END,
                         CASE WHEN superuser THEN 'superuser' ELSE 'no superuser' END,
                         ran_as, alter_role, vault), E'\\n' ORDER BY n)
  FROM t.log
 WHERE n > $planted
   AND (ran_as <> 'regress_attack_owner' OR superuser
        OR alter_role <> '42501' OR vault <> '42501')}),
	'',
	'every run of the tenant\'s code ran as the tenant and gained nothing');
my $worker_probes = $node->safe_psql(
	'postgres', qq{
SELECT string_agg(DISTINCT probe, ', ' ORDER BY probe) FROM t.log
 WHERE n > $planted AND pid = $worker});
like($worker_probes, qr/\bbefore update\b/,
	'the worker\'s reclaim ran the UPDATE trigger');
like($worker_probes, qr/\bbefore delete\b/,
	'the worker\'s expiry and purge ran the DELETE trigger');
like($worker_probes, qr/\bdead before insert\b/,
	'the worker\'s expiry ran the dead-letter table\'s trigger');
like($worker_probes, qr/\bindex predicate\b/,
	'the worker\'s reclaim ran the index predicate');
is( $node->safe_psql(
		'postgres', qq{
SELECT string_agg(DISTINCT ran_as, ', ') FROM t.log
 WHERE pid = $worker}),
	'regress_attack_owner',
	'the worker ran the tenant\'s code as the tenant');
is( $node->safe_psql(
		'postgres', q{
SELECT rolsuper, (SELECT count(*) FROM regress_attack_vault)
  FROM pg_roles WHERE rolname = 'regress_attack_owner'}),
	'f|0',
	'the tenant is no superuser, the superuser\'s table is empty');

# and the outboxes keep working
is( $node->safe_psql(
		'postgres', q{
SET ROLE regress_attack_relay;
SELECT outbox_ack(ARRAY(SELECT id FROM outbox_claim(10, outbox => 't.plain')), outbox => 't.plain'),
       outbox_ack(ARRAY(SELECT id FROM outbox_claim(10, outbox => 't.parted')), outbox => 't.parted')
}),
	'1|3',
	'a relay claims and acks the reclaimed row and the inserted rows');

$node->stop;
done_testing();
