#!/usr/bin/env bash
#
# scripts/demo.sh -- one minute of delivery_outbox, for real
#
# Builds and installs the extension, starts a throwaway cluster (see
# scripts/common.sh), then:
#   - a relay (scripts/demo_relay.py) LISTENs on channel delivery_outbox;
#   - a producer commits orders, each with its outbox row in the same
#     transaction, for recipients agent:1..agent:4, kinds work and
#     execution_event; one transaction is rolled back;
#   - the relay is woken by the notifications (payload = row id only),
#     claims with outbox_claim(50), pushes, acks with outbox_ack(ids[]),
#     and leaves one row unacked, as a crashed recipient would;
#   - the sweeper's outbox_reclaim('0 seconds') puts that row back to
#     pending; the relay is woken again, pushes it a second time, acks it.
# Ends with outbox_stats() and a summary.  Exits non-zero if any step of the
# lifecycle did not happen.
#
# Usage: scripts/demo.sh     (KEEP_TMP=1 keeps the cluster's directory)

set -euo pipefail

OUTBOX_PACKAGES="python3-psycopg ${OUTBOX_PACKAGES:-}"
OUTBOX_QUIET=${OUTBOX_QUIET:-1}
# shellcheck source=scripts/common.sh
. "$(dirname "$0")/common.sh"

TXNS=6              # committed producer transactions
PER_TXN=50          # orders (and outbox rows) per transaction
ROWS=$((TXNS * PER_TXN))
RELAY_PID=

fail()
{
    printf '\ndemo FAILED: %s\n' "$*" >&2
    exit 1
}

# shellcheck disable=SC2317  # called from the EXIT trap in common.sh
outbox_on_exit()
{
    local child
    if [ -n "$RELAY_PID" ] && kill -0 "$RELAY_PID" 2>/dev/null; then
        # As root RELAY_PID is runuser's: stop the relay it started first.
        for child in $(ps -o pid= --ppid "$RELAY_PID" 2>/dev/null); do
            kill "$child" 2>/dev/null || true
        done
        for _ in $(seq 20); do
            kill -0 "$RELAY_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill "$RELAY_PID" 2>/dev/null || true
        wait "$RELAY_PID" 2>/dev/null || true
    fi
}

sql()   { as_user psql -X -q -v ON_ERROR_STOP=1 "$@"; }
# sqlv [SQL]: unaligned, tuples only; the SQL comes from stdin if not given.
sqlv()
{
    if [ $# -gt 0 ]; then
        as_user psql -X -q -A -t -v ON_ERROR_STOP=1 -c "$1"
    else
        as_user psql -X -q -A -t -v ON_ERROR_STOP=1
    fi
}

log "setting up: packages, build, install, throwaway cluster"
outbox_setup

log "CREATE EXTENSION delivery_outbox; a business table 'orders'"
sql <<'SQL'
CREATE EXTENSION delivery_outbox;
CREATE TABLE orders (
    id           bigserial PRIMARY KEY,
    customer     text NOT NULL,
    amount_cents integer NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
SQL

log "relay: LISTEN first, then drain, claim, push, ack"
as_user_bg /usr/bin/python3 "$OUTBOX_SRC/scripts/demo_relay.py" \
    --expect "$ROWS" --hold 1 --batch 50 --timeout 60 \
    --ready "$OUTBOX_WORK/relay.ready" --summary "$OUTBOX_WORK/relay.summary"
RELAY_PID=$OUTBOX_BG_PID
for _ in $(seq 150); do
    [ -e "$OUTBOX_WORK/relay.ready" ] && break
    kill -0 "$RELAY_PID" 2>/dev/null || fail "the relay exited before it was listening"
    sleep 0.1
done
[ -e "$OUTBOX_WORK/relay.ready" ] || fail "the relay did not start listening in 15 s"

log "producer: $TXNS transactions of $PER_TXN orders, each order with its outbox row"
produce()
{
    local t=$1
    sqlv <<SQL
BEGIN;
WITH o AS (
    INSERT INTO orders (customer, amount_cents)
    SELECT 'customer-' || ($((t - 1)) * $PER_TXN + g), 100 + (g * 7919) % 9900
      FROM generate_series(1, $PER_TXN) g
    RETURNING id, customer, amount_cents
), e AS (
    SELECT outbox_enqueue(
               'agent:' || (o.id % 4 + 1),
               CASE WHEN o.id % 3 = 0 THEN 'execution_event' ELSE 'work' END,
               convert_to(jsonb_build_object('order_id', o.id,
                                            'customer', o.customer,
                                            'amount_cents', o.amount_cents)::text,
                          'UTF8')) AS outbox_id
      FROM o
)
SELECT count(*) || ' orders + ' || count(*) || ' outbox rows (ids '
       || min(outbox_id) || '-' || max(outbox_id) || ')'
  FROM e;
COMMIT;
SQL
}
for t in $(seq 1 "$TXNS"); do
    out=$(produce "$t") || fail "producer transaction $t failed"
    echo "[producer] tx $t committed: $out"
    if [ "$t" -eq 3 ]; then
        # The one that changes its mind: both writes vanish, nothing is sent.
        read -r rb_order rb_id < <(sqlv <<'SQL' | tr '|' ' '
BEGIN;
INSERT INTO orders (customer, amount_cents) VALUES ('customer-rollback', 4200)
RETURNING id AS order_id \gset
SELECT :order_id, outbox_enqueue('agent:1', 'work',
                  convert_to('{"order_id": ' || :order_id || '}', 'UTF8'));
ROLLBACK;
SQL
)
        [ -n "${rb_id:-}" ] || fail "the rolled-back transaction did not run"
        left=$(sqlv "SELECT (SELECT count(*) FROM orders WHERE id = $rb_order)
                          + (SELECT count(*) FROM delivery_outbox WHERE id = $rb_id)")
        echo "[producer] tx rolled back: order $rb_order and outbox row $rb_id -> $left rows left"
        [ "$left" = 0 ] || fail "a rolled-back transaction left $left rows"
    fi
    sleep 0.2
done

log "sweeper: waiting until only the unacked row is left 'delivered'"
state=
for _ in $(seq 300); do
    state=$(sqlv "SELECT pending || ' ' || delivered || ' ' || acked FROM outbox_stats()")
    [ "$state" = "0 1 $((ROWS - 1))" ] && break
    kill -0 "$RELAY_PID" 2>/dev/null || break
    sleep 0.1
done
read -r pending delivered acked <<<"$state"
echo "[sweeper]  outbox_stats(): pending $pending, delivered $delivered, acked $acked"
[ "$state" = "0 1 $((ROWS - 1))" ] ||
    fail "expected 0 pending, 1 delivered, $((ROWS - 1)) acked; got: $state"
sleep 0.5
echo "[sweeper]  SELECT outbox_reclaim('0 seconds'): delivered rows not acked in time go back to 'pending'"
reclaimed=$(sqlv "SELECT outbox_reclaim('0 seconds')")
echo "[sweeper]  outbox_reclaim returned $reclaimed (one row back to 'pending', one NOTIFY)"
[ "$reclaimed" = 1 ] || fail "outbox_reclaim returned $reclaimed, expected 1"

relay_rc=0
wait "$RELAY_PID" || relay_rc=$?
RELAY_PID=
[ "$relay_rc" -eq 0 ] || fail "the relay exited with status $relay_rc"

log "SELECT * FROM outbox_stats();"
sql -c "SELECT * FROM outbox_stats()"

# The relay's counts, and the database's.
declare -A R=()
while IFS='=' read -r k v; do
    [[ "$k" =~ ^[A-Z_]+$ && "$v" =~ ^[0-9]+$ ]] && R[$k]=$v
done <"$OUTBOX_WORK/relay.summary"
read -r pending delivered acked <<<"$(sqlv "SELECT pending || ' ' || delivered || ' ' || acked FROM outbox_stats()")"
orders=$(sqlv "SELECT count(*) FROM orders")
attempts=$(sqlv "SELECT delivery_attempts FROM delivery_outbox WHERE id = ${R[REDELIVERED_ID]:-0}")

log "what happened"
cat <<EOF
    enqueued     $ROWS outbox rows in $TXNS transactions, each beside its orders ($orders orders)
    rolled back  1 transaction: its order and its outbox row are gone (0 rows), never notified
    notified     ${R[NOTIFICATIONS]:-?} notifications (one per enqueue, one per reclaim), payload = the row id
    woken        ${R[WAKEUPS]:-?} times; ${R[DELIVERIES]:-?} pushes in ${R[BATCHES]:-?} claimed batches of at most 50
    acked        $acked of $ROWS rows; pending $pending, delivered $delivered
    reclaimed    $reclaimed row (id ${R[REDELIVERED_ID]:-?}) left unacked, swept back, pushed again, acked: delivery_attempts = ${attempts:-?}
EOF

{ [ "$pending" = 0 ] && [ "$delivered" = 0 ] && [ "$acked" = "$ROWS" ]; } ||
    fail "not every row was acked: pending $pending, delivered $delivered, acked $acked"
[ "$orders" = "$ROWS" ] || fail "expected $ROWS orders, found $orders"
[ "${R[ERRORS]:-1}" = 0 ] || fail "the relay reported errors"
[ "${R[NOTIFICATIONS]:-0}" = $((ROWS + 1)) ] ||
    fail "expected $((ROWS + 1)) notifications, the relay got ${R[NOTIFICATIONS]:-0}"
[ "${R[DELIVERIES]:-0}" = $((ROWS + 1)) ] ||
    fail "expected $((ROWS + 1)) pushes, the relay made ${R[DELIVERIES]:-0}"
{ [ "${R[REDELIVERED]:-0}" = 1 ] && [ "$attempts" = 2 ]; } ||
    fail "the unacked row was not delivered a second time"

echo
echo "demo OK: every committed row was delivered at least once and acked; the rolled-back one never existed"
