/* delivery_outbox--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION delivery_outbox" to load this file. \quit

--
-- The outbox table.  Column names and the three state strings are those of
-- the seed system, so applications written against it work unchanged.
-- Operators are schema-qualified so that nothing here depends on the
-- search_path in force at CREATE EXTENSION time.
--
CREATE TABLE delivery_outbox (
    id                bigserial PRIMARY KEY,
    recipient         text NOT NULL
                      CONSTRAINT delivery_outbox_recipient_check
                      CHECK (recipient OPERATOR(pg_catalog.<>) ''),
    kind              text NOT NULL
                      CONSTRAINT delivery_outbox_kind_check
                      CHECK (kind OPERATOR(pg_catalog.<>) ''),
    tenant_id         text,
    payload           bytea NOT NULL,
    delivery_state    text NOT NULL DEFAULT 'pending'
                      CONSTRAINT delivery_outbox_state_check
                      CHECK (delivery_state OPERATOR(pg_catalog.=)
                             ANY ('{pending,delivered,acked}'::text[])),
    delivery_attempts integer NOT NULL DEFAULT 0
                      CONSTRAINT delivery_outbox_attempts_check
                      CHECK (delivery_attempts OPERATOR(pg_catalog.>=) 0),
    created_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    delivered_at      timestamptz,
    acked_at          timestamptz
);

COMMENT ON TABLE delivery_outbox IS
    'push-delivery outbox: pending -> delivered -> acked, enforced by a trigger';

-- Whole-table claim: the pending rows in id order.  Acked rows, however many,
-- are not in this index, so a claim never walks past them.
CREATE INDEX delivery_outbox_pending_idx
    ON delivery_outbox (id)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'pending';

-- Per-recipient claim: a recipient's pending rows in id order.  An exact
-- match for the claim's WHERE and ORDER BY, so the planner picks it with or
-- without statistics and the claim reads only the rows it returns.
CREATE INDEX delivery_outbox_pending_recipient_idx
    ON delivery_outbox (recipient, id)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'pending';

-- Replay, resync and reassign: a recipient's open rows in
-- id order.  The predicate is written as "= ANY" (not "<> 'acked'") so that
-- the planner can prove it from "delivery_state = 'pending'" as well.
CREATE INDEX delivery_outbox_open_recipient_idx
    ON delivery_outbox (recipient, id)
    WHERE delivery_state OPERATOR(pg_catalog.=) ANY ('{pending,delivered}'::text[]);

-- The sweeper: delivered rows by the time they were pushed.
CREATE INDEX delivery_outbox_delivered_idx
    ON delivery_outbox (delivered_at)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered';

-- The state machine.  The trigger function is written in C, does no catalog or
-- search_path lookups, and is the single authority on transitions and
-- bookkeeping.  It is named to sort after ordinary BEFORE triggers, so it sees
-- (and judges) the row as any user trigger left it, and it fires ALWAYS, so
-- session_replication_role = replica does not switch it off either.
CREATE FUNCTION outbox_state_guard()
RETURNS trigger
AS 'MODULE_PATHNAME', 'outbox_state_guard'
LANGUAGE C;

CREATE TRIGGER zz_delivery_outbox_state_guard
    BEFORE INSERT OR UPDATE ON delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_state_guard();

ALTER TABLE delivery_outbox ENABLE ALWAYS TRIGGER zz_delivery_outbox_state_guard;

-- pg_dump keeps the rows and the sequence position.
SELECT pg_catalog.pg_extension_config_dump('delivery_outbox', '');
SELECT pg_catalog.pg_extension_config_dump('delivery_outbox_id_seq', '');

--
-- The API.  Every function is implemented in C, runs in the caller's
-- transaction, and raises on a NULL where a value is required (none is
-- STRICT).  They are SECURITY DEFINER so that producers and relays need
-- EXECUTE only, never privileges on the table itself.
--
CREATE FUNCTION outbox_enqueue(recipient text, kind text, payload bytea,
                               tenant_id text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_enqueue'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_claim(max_rows integer DEFAULT 100,
                             recipient text DEFAULT NULL,
                             tenant_id text DEFAULT NULL)
RETURNS SETOF delivery_outbox
AS 'MODULE_PATHNAME', 'outbox_claim'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_ack(id bigint, recipient text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_ack'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_ack(ids bigint[], recipient text DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_ack_array'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_release(ids bigint[])
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_release'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_reclaim(older_than interval DEFAULT '60 seconds',
                               max_rows integer DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_reclaim'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_reclaim_recipient(recipient text,
                                         tenant_id text DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_reclaim_recipient'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_reassign(from_recipient text, to_recipient text)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_reassign'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_replay(recipient text, after_id bigint DEFAULT 0,
                              max_rows integer DEFAULT 100,
                              tenant_id text DEFAULT NULL)
RETURNS SETOF delivery_outbox
AS 'MODULE_PATHNAME', 'outbox_replay'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_purge(older_than interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_purge'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_stats(OUT pending bigint,
                             OUT delivered bigint,
                             OUT acked bigint,
                             OUT oldest_pending_age interval,
                             OUT oldest_delivered_age interval,
                             OUT open_recipients bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'outbox_stats'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- Nothing is granted to PUBLIC: README shows the GRANTs per role.
REVOKE ALL ON TABLE delivery_outbox FROM PUBLIC;
REVOKE ALL ON SEQUENCE delivery_outbox_id_seq FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_state_guard() FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_enqueue(text, text, bytea, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_claim(integer, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_ack(bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_ack(bigint[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_release(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_reclaim(interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_reclaim_recipient(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_reassign(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_replay(text, bigint, integer, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_purge(interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_stats() FROM PUBLIC;
