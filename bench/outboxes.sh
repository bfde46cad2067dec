#!/usr/bin/env bash
#
# bench/outboxes.sh -- does one outbox's backlog slow another's claims?
#
# Two databases, each with a created outbox t.target holding TARGET_PENDING
# pending rows:
#
#   solo  the target outbox alone (and the extension's own, empty)
#   many  the target outbox among 20 outboxes: t.big with BIG_ACKED acked
#         and BIG_PENDING pending rows, and 18 others with 1,000 pending
#         rows each
#
# C2: pgbench clients claim 10 rows from t.target and ack them (two
# transactions, as a relay does; bench/c2_claim_outbox.sql), ROUNDS rounds
# alternating solo/many (ABBA), BENCH_T seconds each; the report gives the
# median claims/s of each and the ratio many/solo (the target: >= 0.9).
#
# Usage (as root, like run.sh):  bench/outboxes.sh
# Knobs: BIG_ACKED (2000000), BIG_PENDING (500000), TARGET_PENDING (300000),
# CLIENTS (4), BENCH_T (3), ROUNDS (4), BENCH_NO_BUILD=1, KEEP_TMP=1.
set -euo pipefail
OUTBOX_PORT=${BENCH_PORT:-5470}
OUTBOX_QUIET=1
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

BIG_ACKED=${BIG_ACKED:-2000000}
BIG_PENDING=${BIG_PENDING:-500000}
TARGET_PENDING=${TARGET_PENDING:-300000}
CLIENTS=${CLIENTS:-4}
BENCH_T=${BENCH_T:-3}
ROUNDS=${ROUNDS:-4}

bench_setup
bench_build_extension
OUTBOX_EXTRA_CONF="
max_connections = 60
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 1h"
outbox_start_cluster

# rows DB TABLE N STATE: N rows in STATE, 100 recipients
rows()
{
    local bookkeeping="'pending', 0, NULL::timestamptz, NULL::timestamptz"
    [ "$4" = acked ] && bookkeeping="'acked', 1, now() - interval '1 day', now() - interval '1 day'"
    as_user psql -X -q -v ON_ERROR_STOP=1 -d "$1" -c "
        SET synchronous_commit = off;
        INSERT INTO $2 (recipient, kind, payload, delivery_state, delivery_attempts,
                        delivered_at, acked_at)
        SELECT 'agent:' || (g % 100), 'work', '\\x00010203'::bytea, $bookkeeping
          FROM generate_series(1, $3) g"
}

log "loading: solo (t.target, $TARGET_PENDING pending) and many (20 outboxes, t.big $BIG_ACKED acked + $BIG_PENDING pending)"
for db in solo many; do
    as_user createdb "$db"
    as_user psql -X -q -v ON_ERROR_STOP=1 -d "$db" \
        -c "CREATE EXTENSION delivery_outbox; CREATE SCHEMA t;
            SELECT outbox_create('t', 'target')" >/dev/null
    rows "$db" t.target "$TARGET_PENDING" pending
done
as_user psql -X -q -v ON_ERROR_STOP=1 -d many -c "
    SELECT outbox_create('t', 'big');
    SELECT outbox_create('t', 'other_' || g) FROM generate_series(1, 18) g" >/dev/null
rows many t.big "$BIG_ACKED" acked
rows many t.big "$BIG_PENDING" pending
for g in $(seq 1 18); do rows many "t.other_$g" 1000 pending; done
for db in solo many; do
    as_user psql -X -q -d "$db" -c "VACUUM ANALYZE" >/dev/null
done

# run DB: claims/s of one pgbench run
run()
{
    as_user pgbench -n -M prepared -c "$CLIENTS" -j 2 -T "$BENCH_T" \
        -f "$OUTBOX_SRC/bench/c2_claim_outbox.sql" "$1" 2>&1 |
        awk '/^tps = / { print $3; exit }'
}

declare -a SOLO MANY
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="solo many"; else order="many solo"; fi
    for db in $order; do
        tps=$(run "$db")
        log "round $r: $db $tps claims/s"
        if [ "$db" = solo ]; then SOLO+=("$tps"); else MANY+=("$tps"); fi
    done
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
s=$(median "${SOLO[@]}")
m=$(median "${MANY[@]}")
echo
echo "C2 claim 10 + ack on t.target ($CLIENTS clients, ${BENCH_T}s x $ROUNDS rounds, ABBA), PostgreSQL $("$PG_CONFIG" --version | cut -d' ' -f2)"
echo "command: bench/outboxes.sh; commit $(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'), load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
printf 'solo: median %.0f claims/s (%s)\n' "$s" "${SOLO[*]}"
printf 'many: median %.0f claims/s (%s)\n' "$m" "${MANY[*]}"
awk -v s="$s" -v m="$m" 'BEGIN { r = m / s; printf "%s  many/solo = %.2f (target >= 0.90)\n", (r >= 0.9 ? "PASS" : "FAIL"), r }'
