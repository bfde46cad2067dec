/* delivery_outbox--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION delivery_outbox UPDATE TO '1.1'" to load this file. \quit

--
-- The guard also sees deletes now, so that the open-backlog counters of
-- outbox_activity() follow purges and hand-written DELETEs.  Inserted rows
-- are woken and counted by an AFTER INSERT trigger instead of the guard
-- (argument 'after_insert'), so that a row an INSERT ... ON CONFLICT did not
-- insert neither notifies nor counts.
--
DROP TRIGGER zz_delivery_outbox_state_guard ON delivery_outbox;

CREATE TRIGGER zz_delivery_outbox_state_guard
    BEFORE INSERT OR UPDATE OR DELETE ON delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_state_guard('after_insert');

ALTER TABLE delivery_outbox ENABLE ALWAYS TRIGGER zz_delivery_outbox_state_guard;

CREATE FUNCTION outbox_inserted()
RETURNS trigger
AS 'MODULE_PATHNAME', 'outbox_inserted'
LANGUAGE C;

CREATE TRIGGER zz_delivery_outbox_inserted
    AFTER INSERT ON delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_inserted();

ALTER TABLE delivery_outbox ENABLE ALWAYS TRIGGER zz_delivery_outbox_inserted;

REVOKE ALL ON FUNCTION outbox_inserted() FROM PUBLIC;

-- Purging (outbox_purge, the sweeper's retain_acked) reads acked rows by
-- the time they were acked, instead of scanning the whole table.
CREATE INDEX delivery_outbox_acked_idx
    ON delivery_outbox (acked_at)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'acked';

-- Many rows in one call: ids come back in input order.
CREATE FUNCTION outbox_enqueue_batch(recipients text[], kinds text[],
                                     payloads bytea[],
                                     tenant_ids text[] DEFAULT NULL)
RETURNS SETOF bigint
AS 'MODULE_PATHNAME', 'outbox_enqueue_batch'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- Block until a row is pending (for a recipient) or the timeout passes:
-- a relay's wait where LISTEN is not available (transaction pooling).
CREATE FUNCTION outbox_wait(timeout interval, recipient text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_wait'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- Counters since server start, per database, from shared memory.
CREATE FUNCTION outbox_activity(OUT datname text,
                                OUT enqueued bigint,
                                OUT claimed bigint,
                                OUT acked bigint,
                                OUT released bigint,
                                OUT reclaimed bigint,
                                OUT purged bigint,
                                OUT notified bigint,
                                OUT notify_skipped bigint,
                                OUT handover_dropped bigint,
                                OUT backlog_pending bigint,
                                OUT backlog_delivered bigint,
                                OUT stats_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_activity'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE VIEW delivery_outbox_activity AS
    SELECT * FROM outbox_activity();

REVOKE ALL ON FUNCTION outbox_enqueue_batch(text[], text[], bytea[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_wait(interval, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_activity() FROM PUBLIC;
REVOKE ALL ON TABLE delivery_outbox_activity FROM PUBLIC;
