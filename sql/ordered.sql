--
-- ordered.sql: ordered delivery (1.2, issue 13) and outbox_horizon() in one
-- session: outbox_configure(ordered => ...) and what it checks and makes;
-- ordered claims (runs from each (recipient, tenant_id) group's head, one
-- run in flight per group, a released head first again, a rejected head
-- letting the next go, a not-yet-due head holding its group, an expired
-- row skipped, tenants as groups, recipient and tenant filters);
-- outbox_wait on an ordered outbox; outbox_horizon() and its errors; every
-- bad input with its SQLSTATE and nothing changed.  Races between sessions
-- are in specs/iso_ordered.spec and specs/iso_horizon.spec, the worker and
-- the preload in t/019_ordered.pl.  This suite runs without the preload:
-- the insert markers are then locks.
--
-- Rows are shown by label (the payload as text) and state, never by id.
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

CREATE SCHEMA tenant_o;
SELECT outbox_create('tenant_o');
CREATE TABLE not_an_outbox (id bigint);

-- labels of rows as a claim returned them, in id order
CREATE FUNCTION labels(p bytea[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $f$
    SELECT coalesce(string_agg(convert_from(x, 'UTF8'), ' ' ORDER BY n), '-')
      FROM unnest(p) WITH ORDINALITY AS u(x, n)
$f$;
-- an ordered claim of the outbox, shown as its labels
CREATE FUNCTION claim(n int, r text DEFAULT NULL, t text DEFAULT NULL)
RETURNS text LANGUAGE sql AS $f$
    SELECT labels(array_agg(payload ORDER BY id))
      FROM outbox_claim(n, r, t, outbox => 'tenant_o.delivery_outbox')
$f$;
-- ack (or reject, release) rows by label
CREATE FUNCTION ids(l text[]) RETURNS bigint[]
LANGUAGE sql STABLE AS $f$
    SELECT array_agg(id ORDER BY id) FROM tenant_o.delivery_outbox
     WHERE convert_from(payload, 'UTF8') = ANY (l)
$f$;
CREATE FUNCTION enq(r text, l text, t text DEFAULT NULL,
                    nb timestamptz DEFAULT NULL, ea timestamptz DEFAULT NULL)
RETURNS void LANGUAGE sql AS $f$
    SELECT outbox_enqueue(r, 'work', convert_to(l, 'UTF8'), t, nb, ea,
                          outbox => 'tenant_o.delivery_outbox')
$f$;

--
-- outbox_configure(ordered => ...)
--
SELECT outbox, ordered FROM delivery_outbox_tables ORDER BY outbox::text;
SELECT outbox_configure('tenant_o.delivery_outbox', ordered => true);
SELECT outbox, ordered FROM delivery_outbox_tables ORDER BY outbox::text;
-- the index the claims find runs in flight by
SELECT indexname, indexdef ~ '\(recipient, id\) WHERE \(delivery_state = ''delivered''::text\)$' AS delivered_by_recipient
  FROM pg_indexes WHERE schemaname = 'tenant_o' AND indexname LIKE '%delivered_recipient%';
-- configuring it again changes nothing
SELECT outbox_configure('tenant_o.delivery_outbox', ordered => true);
SELECT count(*) AS indexes FROM pg_indexes
 WHERE schemaname = 'tenant_o' AND tablename = 'delivery_outbox';

-- a sequence with a cache cannot give an order: 55000, nothing changed
CREATE SCHEMA tenant_c;
SELECT outbox_create('tenant_c');
ALTER SEQUENCE tenant_c.delivery_outbox_id_seq CACHE 10;
SELECT outbox_configure('tenant_c.delivery_outbox', ordered => true);
\echo :SQLSTATE
SELECT ordered FROM delivery_outbox_tables WHERE outbox = 'tenant_c.delivery_outbox'::regclass;
-- nor one counting down
ALTER SEQUENCE tenant_c.delivery_outbox_id_seq CACHE 1 INCREMENT -1 MINVALUE -1000 START -1 RESTART;
SELECT outbox_configure('tenant_c.delivery_outbox', ordered => true);
\echo :SQLSTATE
-- nor can outbox_horizon() read either
SELECT outbox_horizon('tenant_c.delivery_outbox');
\echo :SQLSTATE
ALTER SEQUENCE tenant_c.delivery_outbox_id_seq INCREMENT 1 MINVALUE 1 START 1 RESTART CACHE 10;
SELECT outbox_horizon('tenant_c.delivery_outbox');
\echo :SQLSTATE
SET client_min_messages = warning;
DROP SCHEMA tenant_c CASCADE;
RESET client_min_messages;
-- not an outbox: 42809; NULL table: 22004
SELECT outbox_configure('not_an_outbox', ordered => true);
\echo :SQLSTATE
SELECT outbox_configure(NULL, ordered => true);
\echo :SQLSTATE
SELECT outbox_horizon('not_an_outbox');
\echo :SQLSTATE

--
-- Ordered claims
--
-- r1: a1 a2 a3, r2: b1 b2, r3: c1 (by a plain INSERT), r1: a4
SELECT enq('r1', 'a1'), enq('r1', 'a2'), enq('r1', 'a3'), enq('r2', 'b1'), enq('r2', 'b2');
INSERT INTO tenant_o.delivery_outbox (recipient, kind, payload) VALUES ('r3', 'work', 'c1');
SELECT enq('r1', 'a4');
-- one run per recipient, from its head, in id order
SELECT claim(2, 'r1') AS r1_run;
-- r1 has a run in flight: nothing more of r1, others' heads go
SELECT claim(10, 'r1') AS r1_in_flight;
SELECT claim(1) AS one_head;
SELECT claim(10) AS the_rest_of_the_heads;
SELECT claim(10) AS all_in_flight;
-- an ack of part of a run leaves the group in flight
SELECT outbox_ack(ids('{a1}'), outbox => 'tenant_o.delivery_outbox') AS acked;
SELECT claim(10) AS still_in_flight;
-- the run acked: r1's next run goes
SELECT outbox_ack(ids('{a2}'), outbox => 'tenant_o.delivery_outbox') AS acked;
SELECT claim(10) AS r1_next;
-- a released head is the head again: nothing after it goes first
SELECT outbox_release(ids('{a3,a4}'), outbox => 'tenant_o.delivery_outbox') AS released;
SELECT claim(1, 'r1') AS r1_head_again;
SELECT claim(10, 'r1') AS r1_in_flight;
SELECT outbox_release(ids('{a3}'), outbox => 'tenant_o.delivery_outbox') AS released;
SELECT claim(10, 'r1') AS r1_from_the_head;
-- a rejected (dead-lettered) head lets the next row go
SELECT enq('r4', 'd1'), enq('r4', 'd2');
SELECT claim(1, 'r4') AS r4_head;
SELECT outbox_reject(ids('{d1}'), 'poison', outbox => 'tenant_o.delivery_outbox') AS rejected;
SELECT claim(10, 'r4') AS r4_after_the_reject;
-- a head released for later holds its group until it is due
SELECT enq('r5', 'e1'), enq('r5', 'e2');
SELECT claim(1, 'r5') AS r5_head;
SELECT outbox_release(ids('{e1}'), retry_after => '1 hour',
                      outbox => 'tenant_o.delivery_outbox') AS released;
SELECT claim(10, 'r5') AS r5_held_by_its_head;
-- a scheduled head too; an expired row is skipped and holds nothing
SELECT enq('r6', 'f1', nb => now() + interval '1 hour'), enq('r6', 'f2');
SELECT claim(10, 'r6') AS r6_held_by_a_scheduled_head;
SELECT enq('r7', 'g1', ea => now() - interval '1 second'), enq('r7', 'g2');
SELECT claim(10, 'r7') AS r7_past_the_expired;
-- tenants of one recipient are groups of their own, the NULL tenant too
SELECT enq('r8', 'h1', 't1'), enq('r8', 'h2', 't2'), enq('r8', 'h3', 't1'), enq('r8', 'h4');
SELECT claim(1, 'r8', 't1') AS r8_t1_head;
SELECT claim(10, 'r8', 't1') AS r8_t1_in_flight;
SELECT claim(10, 'r8', 't2') AS r8_t2_head_past_t1_in_flight;
SELECT claim(10, 'r8') AS r8_other_groups;
-- a tenant filter alone
SELECT enq('r9', 'i1', 't9'), enq('r10', 'j1', 't9'), enq('r10', 'j2', 'tx');
SELECT claim(10, NULL, 't9') AS tenant_t9_heads;
-- outbox_wait sees only what an ordered claim would hand out
SELECT outbox_wait('0', outbox => 'tenant_o.delivery_outbox') AS claimable_now;
SELECT claim(100) IS NOT NULL AS drained;
SELECT count(*) FILTER (WHERE delivery_state = 'pending') AS pending_left
  FROM tenant_o.delivery_outbox;
SELECT outbox_wait('0', outbox => 'tenant_o.delivery_outbox') AS claimable_now;

-- without its (recipient, id) index of delivered rows (a restored default
-- outbox has none: it is not dumped), the claims list the runs in flight
-- from the sweeper's index instead: the same rules
SELECT enq('r11', 'k1'), enq('r11', 'k2');
DROP INDEX tenant_o.delivery_outbox_delivered_recipient_idx;
SELECT claim(1, 'r11') AS r11_head;
SELECT claim(10) AS r11_in_flight;
SELECT outbox_ack(ids('{k1}'), outbox => 'tenant_o.delivery_outbox') AS acked;
SELECT claim(10) AS r11_next;
-- outbox_configure makes it again
SELECT outbox_configure('tenant_o.delivery_outbox', ordered => true);
SELECT count(*) AS delivered_recipient_indexes FROM pg_indexes
 WHERE schemaname = 'tenant_o' AND indexname LIKE '%delivered_recipient%';

-- ordered => false: claims in id order again, the index dropped
SELECT outbox_configure('tenant_o.delivery_outbox', ordered => false);
SELECT count(*) AS delivered_recipient_indexes FROM pg_indexes
 WHERE schemaname = 'tenant_o' AND indexname LIKE '%delivered_recipient%';
SELECT enq('r12', 'l1'), enq('r12', 'l2');
SELECT claim(1, 'r12') AS first, claim(1, 'r12') AS second_while_in_flight;

--
-- outbox_horizon()
--
SELECT outbox_configure('tenant_o.delivery_outbox', ordered => true);
SELECT last_value AS last FROM tenant_o.delivery_outbox_id_seq \gset
SELECT outbox_horizon('tenant_o.delivery_outbox') = :last AS at_the_last_id;
-- the caller's own open insert holds it below its row
BEGIN;
SELECT outbox_enqueue('r13', 'work', 'm1', outbox => 'tenant_o.delivery_outbox') AS own \gset
SELECT outbox_horizon('tenant_o.delivery_outbox') < :own AS below_own_open_insert;
COMMIT;
SELECT outbox_horizon('tenant_o.delivery_outbox') = :own AS up_to_it_after_commit;
-- the default outbox has one too
SELECT outbox_horizon() AS default_outbox_empty;
SELECT outbox_enqueue('r', 'k', 'x') AS d \gset
SELECT outbox_horizon() = :d AS default_outbox_up_to_its_row;

--
-- The markers' trigger misused: 39P01
--
CREATE TABLE trig_test (id bigint);
CREATE TRIGGER wrong BEFORE INSERT ON trig_test FOR EACH ROW
    EXECUTE FUNCTION outbox_insert_statement();
INSERT INTO trig_test VALUES (1);
\echo :SQLSTATE
SELECT count(*) FROM trig_test;
DROP TABLE trig_test;

SET client_min_messages = warning;
DROP SCHEMA tenant_o CASCADE;
RESET client_min_messages;
DROP TABLE not_an_outbox;
DROP FUNCTION labels(bytea[]), claim(int, text, text), ids(text[]),
              enq(text, text, text, timestamptz, timestamptz);
DROP EXTENSION delivery_outbox;
