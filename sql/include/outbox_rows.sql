-- sql/include/outbox_rows.sql: the outbox as the regress tests look at it,
-- in id order, the bookkeeping timestamps as booleans
CREATE VIEW outbox_rows AS
SELECT id, recipient, kind, tenant_id, payload, delivery_state,
       delivery_attempts,
       delivered_at IS NOT NULL AS has_delivered_at,
       acked_at IS NOT NULL AS has_acked_at
  FROM delivery_outbox
 ORDER BY id;
