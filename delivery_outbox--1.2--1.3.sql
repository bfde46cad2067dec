/* delivery_outbox--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION delivery_outbox UPDATE TO '1.3'" to load this file. \quit

--
-- 1.3 (unreleased).  CREATE EXTENSION runs delivery_outbox--1.2.sql and then
-- this script; sql/upgrade.sql proves that every way to 1.3 ends alike.
--

--
-- outbox_grant_triggers(tbl): as in 1.2, and safe when two sessions make
-- outboxes at once.  Two GRANTs on one function update its pg_proc row;
-- the second of two concurrent ones fails with "tuple concurrently
-- updated" (XX000) instead of waiting.  A lock taken with LOCK TABLE (not
-- an advisory lock: only a relation lock makes this backend read the
-- catalogs afresh once granted) serializes the grants, and an owner that
-- already may execute the three functions is granted nothing.  SHARE
-- UPDATE EXCLUSIVE on the registry conflicts with itself, not with the
-- ROW EXCLUSIVE that registering an outbox takes, so holding it cannot
-- deadlock with a session that registered first.  Not for direct use.
--
CREATE OR REPLACE FUNCTION outbox_grant_triggers(tbl regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    owner regrole;
BEGIN
    -- a NULL or missing table: 22004 or 42P01, not a broken statement
    PERFORM @extschema@.outbox_check_relation(tbl);
    SELECT relowner::regrole INTO owner FROM pg_class WHERE oid = tbl;
    LOCK TABLE @extschema@.delivery_outbox_registry IN SHARE UPDATE EXCLUSIVE MODE;
    IF has_function_privilege(owner, '@extschema@.outbox_state_guard()', 'EXECUTE')
       AND has_function_privilege(owner, '@extschema@.outbox_inserted()', 'EXECUTE')
       AND has_function_privilege(owner, '@extschema@.outbox_insert_statement()', 'EXECUTE')
    THEN
        RETURN;
    END IF;
    EXECUTE format('GRANT EXECUTE ON FUNCTION @extschema@.outbox_state_guard(),'
                   ' @extschema@.outbox_inserted(), @extschema@.outbox_insert_statement()'
                   ' TO %s', owner);
END
$$;

--
-- outbox_ack_claim(ids, max_rows, recipient, tenant_id, outbox): a relay's
-- round in one statement and one transaction: ack the rows of its last
-- batch (as outbox_ack(ids, recipient, outbox)), then claim the next (as
-- outbox_claim(max_rows, recipient, tenant_id, outbox)).  A relay's first
-- call passes '{}'.  One commit per batch instead of two.
--
CREATE FUNCTION outbox_ack_claim(ids bigint[], max_rows integer DEFAULT 100,
                                 recipient text DEFAULT NULL,
                                 tenant_id text DEFAULT NULL,
                                 outbox regclass DEFAULT NULL)
RETURNS SETOF delivery_outbox
AS 'MODULE_PATHNAME', 'outbox_ack_claim'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION outbox_ack_claim(bigint[], integer, text, text, regclass) FROM PUBLIC;
