#!/usr/bin/env bash
#
# bench/policy.sh -- what the delivery policy costs, and what backoff buys
#
# Three measurements, each side by side in one run (BENCH_PARTS picks):
#
#   P1  outbox_enqueue with a dedup_key (unique per row, bench/e7_enqueue_dedup.sql)
#       against without one (bench/e3_enqueue.sql), CLIENTS clients, with
#       synchronous_commit on and off, ROUNDS rounds alternating (ABBA),
#       BENCH_T seconds each: median tx/s and the ratio (target >= 0.9).
#   P2  claim 10 + ack (bench/c2_claim_outbox.sql) on an outbox t.target
#       holding TARGET_PENDING pending rows, alone ("plain") and with
#       SCHEDULED rows scheduled a day ahead, enqueued first (lower ids), and
#       DEAD dead letters ("loaded"), ABBA rounds: the ratio (target >= 0.8).
#   P3  a recipient that fails every push for P3_SECONDS: three outboxes
#       side by side, each with a relay (bench/p3_relay.sql: claim 10,
#       release the rows of recipient "failing", ack the others, every 20 ms) and a
#       producer of P3_RATE rows/s for healthy recipients
#       (bench/p3_produce.sql): t.base (nobody down), t.nobackoff (recipient "failing"
#       with DOWN_ROWS rows, no backoff) and t.backoff (the same, backoff_base
#       1s, backoff_max 1min).  From the counters: pushes of the failing recipient's rows
#       (released) per row in each, against the bound of a doubling backoff
#       (log2(max/base) + 1 + (T - max)/(max/2) pushes at most, jitter
#       included); and the healthy rows' latency (acked_at - created_at),
#       p50 and p99, in each.
#
# Usage (as root, like run.sh):  bench/policy.sh
# Knobs: BENCH_PARTS ("P1 P2 P3"), CLIENTS (16), BENCH_T (3), ROUNDS (4),
# TARGET_PENDING (1000000: more than the rounds claim), SCHEDULED (1000000), DEAD (1000000),
# P3_SECONDS (600), P3_RATE (50), DOWN_ROWS (100), BENCH_NO_BUILD=1, KEEP_TMP=1.
set -euo pipefail
OUTBOX_PORT=${BENCH_PORT:-5471}
OUTBOX_QUIET=1
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

BENCH_PARTS=${BENCH_PARTS:-P1 P2 P3}
CLIENTS=${CLIENTS:-16}
BENCH_T=${BENCH_T:-3}
ROUNDS=${ROUNDS:-4}
TARGET_PENDING=${TARGET_PENDING:-1000000}
SCHEDULED=${SCHEDULED:-1000000}
DEAD=${DEAD:-1000000}
P3_SECONDS=${P3_SECONDS:-600}
P3_RATE=${P3_RATE:-50}
DOWN_ROWS=${DOWN_ROWS:-100}

bench_setup
bench_build_extension
OUTBOX_EXTRA_CONF="
max_connections = 60
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 1h
shared_preload_libraries = 'delivery_outbox'
delivery_outbox.database = 'policy'
delivery_outbox.sweep_interval = '1s'
delivery_outbox.reclaim_after = '1h'"
outbox_start_cluster

COMMIT=$(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio_line() { awk -v a="$2" -v b="$3" -v t="$4" -v what="$1" 'BEGIN { r = a / b; printf "%s  %s = %.2f (target >= %s)\n", (r >= t ? "PASS" : "FAIL"), what, r, t }'; }
pg_tps() { awk '/^tps = / { print $3; exit }'; }
header()
{
    echo
    echo "$1, PostgreSQL $("$PG_CONFIG" --version | cut -d' ' -f2)"
    echo "command: bench/policy.sh (BENCH_PARTS=$2); commit $COMMIT, $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

as_user createdb policy
as_user psql -X -q -v ON_ERROR_STOP=1 -d policy -c "CREATE EXTENSION delivery_outbox; CREATE SCHEMA t" >/dev/null

# --- P1: enqueue with and without a dedup_key ------------------------------
if [[ " $BENCH_PARTS " == *" P1 "* ]]; then
    for sync in on off; do
        declare -a PLAIN=() KEYED=()
        for r in $(seq 1 "$ROUNDS"); do
            if [ $((r % 2)) = 1 ]; then order="plain keyed"; else order="keyed plain"; fi
            for w in $order; do
                f=e3_enqueue.sql
                [ "$w" = keyed ] && f=e7_enqueue_dedup.sql
                tps=$(as_user env PGOPTIONS="-c synchronous_commit=$sync" \
                      pgbench -n -M prepared -c "$CLIENTS" -j 2 -T "$BENCH_T" \
                      -f "$OUTBOX_SRC/bench/$f" policy 2>&1 | pg_tps)
                log "P1 sync $sync round $r: $w $tps tx/s"
                if [ "$w" = plain ]; then PLAIN+=("$tps"); else KEYED+=("$tps"); fi
            done
            as_user psql -X -q -d policy -c "TRUNCATE delivery_outbox" -c "VACUUM delivery_outbox" >/dev/null
        done
        p=$(median "${PLAIN[@]}"); k=$(median "${KEYED[@]}")
        header "P1 outbox_enqueue with a dedup_key vs without ($CLIENTS clients, synchronous_commit=$sync, ${BENCH_T}s x $ROUNDS rounds, ABBA)" P1
        printf 'without: median %.0f tx/s (%s)\n' "$p" "${PLAIN[*]}"
        printf 'with:    median %.0f tx/s (%s)\n' "$k" "${KEYED[*]}"
        ratio_line "with/without" "$k" "$p" 0.9
    done
fi

# --- P2: claims beside scheduled rows and dead letters ---------------------
if [[ " $BENCH_PARTS " == *" P2 "* ]]; then
    for db in plain loaded; do
        as_user createdb "p2_$db"
        as_user psql -X -q -v ON_ERROR_STOP=1 -d "p2_$db" \
            -c "CREATE EXTENSION delivery_outbox; CREATE SCHEMA t; SELECT outbox_create('t', 'target')" >/dev/null
    done
    log "P2: loading $SCHEDULED scheduled rows and $DEAD dead letters into p2_loaded"
    as_user psql -X -q -v ON_ERROR_STOP=1 -d p2_loaded -c "
        SET synchronous_commit = off;
        INSERT INTO t.target (recipient, kind, payload, not_before)
        SELECT 'agent:' || (g % 100), 'work', '\\x00010203'::bytea, now() + interval '1 day'
          FROM generate_series(1, $SCHEDULED) g;
        INSERT INTO t.target_dead (id, recipient, kind, payload, delivery_state,
                                   delivery_attempts, created_at, dead_reason)
        SELECT -g, 'agent:' || (g % 100), 'work', '\\x00010203'::bytea, 'delivered', 5,
               now() - interval '1 day', 'max_attempts'
          FROM generate_series(1, $DEAD) g" >/dev/null
    for db in plain loaded; do
        as_user psql -X -q -v ON_ERROR_STOP=1 -d "p2_$db" -c "
            SET synchronous_commit = off;
            INSERT INTO t.target (recipient, kind, payload)
            SELECT 'agent:' || (g % 100), 'work', '\\x00010203'::bytea
              FROM generate_series(1, $TARGET_PENDING) g" -c "VACUUM ANALYZE" >/dev/null
    done
    declare -a PL=() LO=()
    for r in $(seq 1 "$ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then order="plain loaded"; else order="loaded plain"; fi
        for db in $order; do
            tps=$(as_user pgbench -n -M prepared -c 4 -j 2 -T "$BENCH_T" \
                  -f "$OUTBOX_SRC/bench/c2_claim_outbox.sql" "p2_$db" 2>&1 | pg_tps)
            log "P2 round $r: $db $tps claims/s"
            if [ "$db" = plain ]; then PL+=("$tps"); else LO+=("$tps"); fi
        done
    done
    p=$(median "${PL[@]}"); l=$(median "${LO[@]}")
    header "P2 claim 10 + ack on t.target, $TARGET_PENDING pending; loaded: + $SCHEDULED scheduled a day ahead (lower ids) + $DEAD dead letters (4 clients, ${BENCH_T}s x $ROUNDS rounds, ABBA)" P2
    printf 'plain:  median %.0f claims/s (%s)\n' "$p" "${PL[*]}"
    printf 'loaded: median %.0f claims/s (%s)\n' "$l" "${LO[*]}"
    ratio_line "loaded/plain" "$l" "$p" 0.8
fi

# --- P3: a recipient that fails every push ---------------------------------
if [[ " $BENCH_PARTS " == *" P3 "* ]]; then
    as_user psql -X -q -v ON_ERROR_STOP=1 -d policy -c "
        SELECT outbox_create('t', 'base'), outbox_create('t', 'nobackoff'), outbox_create('t', 'backoff');
        SELECT outbox_configure('t.backoff', backoff_base => '1 second', backoff_max => '1 minute');
        SELECT outbox_enqueue_batch(array_fill('failing'::text, ARRAY[$DOWN_ROWS]),
                                    array_fill('work'::text, ARRAY[$DOWN_ROWS]),
                                    array_fill('\\x01'::bytea, ARRAY[$DOWN_ROWS]), outbox => o)
          FROM unnest(ARRAY['t.nobackoff', 't.backoff']::regclass[]) o" >/dev/null
    log "P3: three relays and three producers for ${P3_SECONDS}s"
    pids=()
    for o in base nobackoff backoff; do
        as_user pgbench -n -M prepared -c 1 -T "$P3_SECONDS" -D tbl="t.$o" \
            -f "$OUTBOX_SRC/bench/p3_relay.sql" policy >"$OUTBOX_WORK/p3_relay_$o.log" 2>&1 &
        pids+=($!)
        as_user pgbench -n -M prepared -c 1 -R "$P3_RATE" -T "$P3_SECONDS" -D tbl="t.$o" \
            -f "$OUTBOX_SRC/bench/p3_produce.sql" policy >"$OUTBOX_WORK/p3_produce_$o.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || die "a P3 pgbench failed (see $OUTBOX_WORK/p3_*.log)"; done
    header "P3 recipient 'failing' fails every push for ${P3_SECONDS}s; relays claim 10 every 20 ms; $P3_RATE rows/s for 10 healthy recipients per outbox" P3
    as_user psql -X -q -v ON_ERROR_STOP=1 -d policy -v secs="$P3_SECONDS" -v down="$DOWN_ROWS" <<'SQL'
\pset footer off
-- pushes of the failing recipient's rows: each one failed and was released
WITH lat AS (
    SELECT 'base' AS outbox, extract(epoch FROM acked_at - created_at) AS s
      FROM t.base WHERE delivery_state = 'acked'
    UNION ALL
    SELECT 'nobackoff', extract(epoch FROM acked_at - created_at)
      FROM t.nobackoff WHERE delivery_state = 'acked'
    UNION ALL
    SELECT 'backoff', extract(epoch FROM acked_at - created_at)
      FROM t.backoff WHERE delivery_state = 'acked'
)
SELECT right(a.outbox::text, -2) AS outbox,
       a.released AS down_pushes,
       round(a.released::numeric / :down, 1) AS per_down_row,
       (SELECT count(*) FROM lat WHERE lat.outbox = right(a.outbox::text, -2)) AS healthy_acked,
       round((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s) FROM lat
               WHERE lat.outbox = right(a.outbox::text, -2))::numeric * 1000, 1) AS healthy_p50_ms,
       round((SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY s) FROM lat
               WHERE lat.outbox = right(a.outbox::text, -2))::numeric * 1000, 1) AS healthy_p99_ms
  FROM delivery_outbox_activity a
 WHERE a.datname = 'policy' AND a.outbox::text IN ('t.base', 't.nobackoff', 't.backoff')
 ORDER BY 1;
-- a doubling backoff from 1 s capped at 60 s, jitter in [0.5, 1): at most
-- log2(60) + 1 pushes until the cap, then one per 30 s at most
SELECT round(log(2, 60) + 1 + (:secs - 60) / 30.0, 1) AS bound_per_down_row,
       CASE WHEN (SELECT released FROM delivery_outbox_activity
                   WHERE datname = 'policy' AND outbox = 't.backoff'::regclass)::numeric / :down
                 <= log(2, 60) + 1 + (:secs - 60) / 30.0
            THEN 'PASS' ELSE 'FAIL' END AS backoff_within_bound;
SQL
fi
