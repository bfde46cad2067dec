#!/usr/bin/env bash
#
# bench/run.sh -- throughput and latency benchmark for delivery_outbox
#
# Like scripts/test.sh it installs what is missing, builds and installs the
# extension from this tree, and starts its own throwaway cluster as the
# unprivileged `postgres` user (when run as root) on a unix socket only
# (listen_addresses = ''), here with shared_preload_libraries =
# 'delivery_outbox' and delivery_outbox.database = 'bench'.  It stops and
# removes that cluster on exit and touches nothing else.
#
# Every workload of one cell (clients x synchronous_commit) runs in turn,
# then the whole round again (E1 E2 ... C1 ..., E1 E2 ...), BENCH_REPS times;
# each figure is the median of its runs, and every ratio is taken between
# workloads of the same cell of the same run, because the machine is shared
# and absolute numbers are noisy.
#
#   E1  raw INSERT into bench_plain: delivery_outbox's columns, defaults,
#       constraints and indexes, no trigger -- the reference
#   E2  the same INSERT into bench_notify, whose PL/pgSQL AFTER INSERT
#       trigger does pg_notify('delivery_outbox', NEW.id::text) (the seed
#       system's design)
#   E3  outbox_enqueue, delivery_outbox.notify = commit
#   E4  outbox_enqueue, delivery_outbox.notify = deferred
#   E5  outbox_enqueue_batch of 100 rows (rows/s = 100 x tx/s), notify = commit
#   E6  PgQ pgq.insert_event (Debian package postgresql-15-pgq3)
#   C1  claim 10 + ack (two transactions), whole table and per recipient
#       (100 recipients), on an outbox holding 2M acked + 500k pending rows
#       ("big") and on one holding the same pending rows and no acked ones
#       ("empty"), each in its own database; ratio = big / empty
#   L1  end-to-end latency: bench/relay.c (LISTEN, wake, claim 100, ack)
#       against pgbench producers at a fixed rate (-R), for notify = commit
#       and deferred; latency = acked_at - the commit timestamp of the
#       producer's transaction (track_commit_timestamp = on; the
#       transaction id travels in the payload), both server-side wall
#       clock: from the enqueue's commit to the relay's ack.  The notes also
#       give it from the producer's insert (acked_at - created_at), which
#       adds the producer's own commit: its WAL flush and, in commit mode,
#       its wait for the NOTIFY lock
#
# During every E run one listener (relay.c in counting mode) is connected and
# LISTENing on the channel; the table says how many notifications it got,
# and checks them (count, sum and XOR of the ids) against the rows enqueued.
#
# E4 runs only where `SET delivery_outbox.notify = deferred` works, E5 only
# where outbox_enqueue_batch exists, E6 only where the pgq extension can be
# created; otherwise the table says "not available".  The bench never fails
# because of a result: it prints PASS/FAIL lines for the targets listed in
# bench/README.md and exits 0 (non-zero only when it could not run at all).
#
# Usage: bench/run.sh            full run, ~10 minutes on 2 cores
#        QUICK=1 bench/run.sh    16 clients, synchronous_commit on, one
#                                round, 10x smaller C1 tables, ~1 minute
#
# Knobs (environment; QUICK=1 changes the defaults):
#   BENCH_CELLS    "clients:sync ..."      default "4:on 4:off 16:on 16:off"
#   BENCH_REPS     rounds per cell         default 3
#   BENCH_T        seconds per pgbench run default 3
#   BENCH_WORKLOADS which of E1..E6 C1 L1  default all
#   C1_ACKED, C1_PENDING                   default 2000000, 500000
#   L1_RATE, L1_T, L1_CLIENTS              default 2000 rows/s, 5 s, 8
#   L1_WARMUP_MS                           default 500: rows committed this
#                                          early in an L1 run are left out
#   BENCH_PORT     first port to try       default 5450
#   BENCH_NO_BUILD=1  use the extension already installed (no build/install)
#   BENCH_QUIET_PCT   the CPU busy share (percent, measured for 3 s before
#                     and after the runs with the bench idle) under which
#                     the report calls the machine quiet; default 10
#   KEEP_TMP=1     keep the work directory (cluster, logs, raw results)
# The table is also written to bench/out/ (git-ignored).

set -uo pipefail

OUTBOX_PORT=${BENCH_PORT:-5450}
OUTBOX_QUIET=1
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "$0")" && pwd)/common.sh"

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
    BENCH_CELLS=${BENCH_CELLS:-"16:on"}
    BENCH_REPS=${BENCH_REPS:-1}
    BENCH_T=${BENCH_T:-2}
    C1_ACKED=${C1_ACKED:-200000}
    C1_PENDING=${C1_PENDING:-50000}
    L1_T=${L1_T:-3}
else
    BENCH_CELLS=${BENCH_CELLS:-"4:on 4:off 16:on 16:off"}
    BENCH_REPS=${BENCH_REPS:-3}
    BENCH_T=${BENCH_T:-3}
    C1_ACKED=${C1_ACKED:-2000000}
    C1_PENDING=${C1_PENDING:-500000}
    L1_T=${L1_T:-5}
fi
BENCH_WORKLOADS=${BENCH_WORKLOADS:-"E1 E2 E3 E4 E5 E6 C1 L1"}
L1_RATE=${L1_RATE:-2000}
L1_CLIENTS=${L1_CLIENTS:-8}
L1_WARMUP_MS=${L1_WARMUP_MS:-500}
CHANNEL=delivery_outbox
RECIPIENTS=100
PAYLOAD_HEX=$(printf '%02x' $(seq 0 63))

want() { case " $BENCH_WORKLOADS " in *" $1 "*) return 0 ;; esac; return 1; }

# ---------------------------------------------------------------------------
# set-up: packages, build, relay, cluster
# ---------------------------------------------------------------------------

bench_install_pgq()
{
    pkg_installed postgresql-15-pgq3 && return 0
    log "installing postgresql-15-pgq3 (for E6; skipped if that fails)"
    {
        as_root apt-get update -q &&
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15-pgq3
    } >"$OUTBOX_WORK/pgq-install.log" 2>&1 ||
        warn "could not install postgresql-15-pgq3 (E6 will be skipped); see $OUTBOX_WORK/pgq-install.log"
}

bench_build()
{
    bench_build_extension
    log "building bench/relay.c"
    run_logged "$OUTBOX_WORK/relay-build.log" \
        as_user cc -O2 -Wall -Wextra -o "$OUTBOX_WORK/relay" "$OUTBOX_SRC/bench/relay.c" \
        -I"$("$PG_CONFIG" --includedir)" -L"$("$PG_CONFIG" --libdir)" -lpq ||
        die "building bench/relay.c failed (needs libpq-dev)"
}

# Our own cluster: scripts/common.sh's, plus the preload, the served
# database and settings that keep checkpoints out of the measured runs.
bench_start_cluster()
{
    OUTBOX_EXTRA_CONF="
# benchmark settings (bench/run.sh)
max_connections = 60
shared_buffers = 1GB
max_wal_size = 8GB
min_wal_size = 1GB
checkpoint_timeout = 1h
log_checkpoints = on
log_autovacuum_min_duration = -1
shared_preload_libraries = 'delivery_outbox'
delivery_outbox.database = 'bench'
# L1 measures from the producer's commit timestamp
track_commit_timestamp = on"
    outbox_start_cluster
    PRELOADED=yes
}

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

# bsql DB SQL: run SQL in DB, unaligned tuples only, stop at the first error.
bsql()
{
    local db=$1
    shift
    as_user psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" -c "$*"
}

# bsql_ok DB SQL: true if SQL runs without error (output discarded).
bsql_ok() { bsql "$@" >/dev/null 2>&1; }

# The settings that suppress wake-ups for bulk loads and top-ups: a notify
# queue limit of 0 skips every NOTIFY (1.0 and later), notify = off (1.1).
quiet_sql()
{
    local s="SET delivery_outbox.notify_queue_limit = 0;"
    [ "$HAVE_NOTIFY_GUC" = yes ] && s="$s SET delivery_outbox.notify = off;"
    printf '%s' "$s"
}

# pgopts SYNC [NOTIFY]: the PGOPTIONS for a run.
pgopts()
{
    local o="-c synchronous_commit=$1"
    if [ -n "${2:-}" ] && [ "$HAVE_NOTIFY_GUC" = yes ]; then
        o="$o -c delivery_outbox.notify=$2"
    fi
    printf '%s' "$o"
}

# run_pgbench OUT DB PGOPTIONS CLIENTS LENGTH SCRIPT [extra pgbench args]:
# LENGTH is seconds (-T) or xN for N transactions per client (-t).  Prints
# the tps (excluding connection time), or nothing on failure.
run_pgbench()
{
    local out=$1 db=$2 opts=$3 clients=$4 len=$5 script=$6
    shift 6
    local threads=2 lenarg=(-T "$len")
    [ "$clients" -lt 2 ] && threads=1
    case $len in x*) lenarg=(-t "${len#x}") ;; esac
    as_user env PGOPTIONS="$opts" pgbench -n -M prepared -c "$clients" -j "$threads" \
        "${lenarg[@]}" "$@" -f "$OUTBOX_SRC/bench/$script" "$db" >"$out" 2>&1
    awk '/^tps = / { print $3; exit }' "$out"
}

# start_listener TAG TABLE IDCOL yes|no: start the counting listener, which
# truncates TABLE first (see relay.c); sets LISTENER_PID (relay.c's own pid),
# LISTENER_BG (the background job) and LISTENER_OUT.
start_listener()
{
    LISTENER_OUT=$RAW/listener.$1.out
    as_user_bg env PGDATABASE=bench "$OUTBOX_WORK/relay" listen "$CHANNEL" "$2" "$3" "$4" \
        >"$LISTENER_OUT" 2>&1
    LISTENER_BG=$OUTBOX_BG_PID
    LISTENER_PID=
    local i
    for i in $(seq 1 400); do
        LISTENER_PID=$(awk '/^ready / { print $2; exit }' "$LISTENER_OUT")
        [ -n "$LISTENER_PID" ] && return 0
        kill -0 "$LISTENER_BG" 2>/dev/null || break
        sleep 0.05
    done
    warn "the listener did not start: $(cat "$LISTENER_OUT")"
    return 1
}

# stop_listener: make it count the rows and wait for their notifications;
# sets LISTENER_RESULT to "rows rows_sum rows_xor count sum xor senders"
# ("- ..." if it failed).  Not in a subshell: only this shell can wait for
# the background job.
stop_listener()
{
    LISTENER_RESULT="- - - - - - -"
    [ -n "${LISTENER_PID:-}" ] || return 0
    kill -USR1 "$LISTENER_PID" 2>/dev/null
    wait "$LISTENER_BG" 2>/dev/null
    LISTENER_PID=
    LISTENER_RESULT=$(awk '/^rows=/ {
            for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            print v["rows"], v["rows_sum"], v["rows_xor"], v["notifications"], v["sum"], v["xor"], v["senders"]
            found = 1 }
         END { if (!found) print "- - - - - - -" }' "$LISTENER_OUT")
}

# record FIELDS...: one line of raw results, and a progress line (the time
# since the previous one includes the run's set-up and clean-up).
LAST_RECORD=${EPOCHREALTIME/,/.}
record()
{
    (IFS='|'; echo "$*") >>"$RAW/results"
    local now=${EPOCHREALTIME/,/.}
    printf '    %-20s %3s clients, sync %-3s rep %s: %8s tx/s  (%.1f s)%s\n' "$2" "$3" "$4" "$5" \
        "${6%%.*}" "$(awk -v a="$now" -v b="$LAST_RECORD" 'BEGIN { print a - b }')" \
        "${13:+  ${13}}"
    LAST_RECORD=$now
}

# ---------------------------------------------------------------------------
# the workloads
# ---------------------------------------------------------------------------

# run_e W CLIENTS SYNC REP
run_e()
{
    local w=$1 c=$2 s=$3 rep=$4
    local script table notify="" rows_per_tx=1 notifies=yes
    case $w in
        E1) script=e1_insert.sql; table=bench_plain; notifies=no ;;
        E2) script=e2_insert_notify.sql; table=bench_notify ;;
        E3) script=e3_enqueue.sql; table=delivery_outbox; notify=commit ;;
        E4) script=e3_enqueue.sql; table=delivery_outbox; notify=deferred ;;
        E5) script=e5_enqueue_batch.sql; table=delivery_outbox; notify=commit; rows_per_tx=100 ;;
        E6) script=e6_pgq.sql; table=$PGQ_TABLE; notifies=no ;;
    esac
    local tag="$w.c$c.$s.r$rep"
    local idcol=id
    [ "$w" = E6 ] && idcol=ev_id
    # the listener empties the table, LISTENs, and counts the rows at the end
    if ! start_listener "$tag" "$table" "$idcol" "$notifies"; then
        record E "$w" "$c" "$s" "$rep" "" "" no "" "" "" "" "the listener did not start"
        return
    fi
    local tps
    tps=$(run_pgbench "$RAW/pgbench.$tag" bench "$(pgopts "$s" "$notify")" "$c" "$BENCH_T" "$script")
    local n sum xor got gsum gxor senders
    stop_listener
    read -r n sum xor got gsum gxor senders <<<"$LISTENER_RESULT"
    local check=- note=""
    if [ "$got" = - ]; then
        note="the listener failed: $(grep -m1 -v '^ready' "$LISTENER_OUT")"
    elif [ "$notifies" = yes ]; then
        if [ "$got" = "$n" ] && [ "$gsum" = "$sum" ] && [ "$gxor" = "$xor" ]; then
            check=ok
        else
            check=bad
        fi
    fi
    [ -z "$tps" ] && note="pgbench failed: $(grep -m1 -iE 'error|abort' "$RAW/pgbench.$tag")"
    local rows=""
    [ -n "$tps" ] && rows=$(awk -v t="$tps" -v k="$rows_per_tx" 'BEGIN { printf "%.1f", t * k }')
    record E "$w" "$c" "$s" "$rep" "$tps" "$rows" yes "$n" "$got" "$check" "$senders" "$note"
}

# C1 tables: bench_big (C1_ACKED acked rows, then C1_PENDING pending rows)
# and bench_empty (C1_PENDING pending rows), 100 recipients round-robin.
# Acked rows are inserted restore-style, with consistent bookkeeping, through
# the trigger; pending rows with wake-ups suppressed.
c1_load()
{
    local db=$1 acked=$2
    local p="'\\x$PAYLOAD_HEX'::bytea"
    as_user createdb "$db" || die "createdb $db failed"
    bsql "$db" "CREATE EXTENSION delivery_outbox" || die "CREATE EXTENSION in $db failed"
    if [ "$acked" -gt 0 ]; then
        bsql "$db" "$(quiet_sql)
            INSERT INTO delivery_outbox (recipient, kind, payload, delivery_state,
                                         delivery_attempts, created_at, delivered_at, acked_at)
            SELECT 'agent:' || (g % $RECIPIENTS), 'work', $p, 'acked', 1,
                   now() - interval '2 days' + g * interval '1 ms',
                   now() - interval '2 days' + g * interval '1 ms' + interval '5 ms',
                   now() - interval '2 days' + g * interval '1 ms' + interval '10 ms'
              FROM generate_series(1, $acked) g" ||
            die "loading acked rows into $db failed"
    fi
    c1_topup "$db"
}

# c1_topup DB: ack what a run left delivered, drop the acked rows it made in
# the "empty" table, bring the pending rows back to C1_PENDING, VACUUM
# ANALYZE.  Analysing both tables every round keeps their statistics alike:
# left to autovacuum, one table may have statistics and the other none, and
# the plans of outbox_ack differ between the two (see bench/README.md).
c1_topup()
{
    local db=$1
    local p="'\\x$PAYLOAD_HEX'::bytea"
    local del=""
    [ "$db" = bench_empty ] && del="DELETE FROM delivery_outbox WHERE delivery_state = 'acked';"
    bsql "$db" "$(quiet_sql)
        UPDATE delivery_outbox SET delivery_state = 'acked' WHERE delivery_state = 'delivered';
        $del
        INSERT INTO delivery_outbox (recipient, kind, payload)
        SELECT 'agent:' || (g % $RECIPIENTS), 'work', $p
          FROM generate_series(1, $C1_PENDING - (SELECT count(*) FROM delivery_outbox
                                                 WHERE delivery_state = 'pending')) g" >/dev/null &&
        bsql "$db" "VACUUM ANALYZE delivery_outbox"
}

c1_pending() { bsql "$1" "SELECT count(*) FROM delivery_outbox WHERE delivery_state = 'pending'"; }

# c1_prepare: before each round's C1 runs, both tables back to their shape.
declare -A C1_NOW=()
c1_prepare()
{
    local db
    for db in bench_big bench_empty; do
        C1_NOW[$db]=
        c1_topup "$db" || warn "preparing $db failed"
        C1_NOW[$db]=$(c1_pending "$db")
    done
}

# run_c1 TABLE(big|empty) MODE(all|recipient) CLIENTS SYNC REP: one run on
# the table as the previous run (or c1_prepare) left it.
run_c1()
{
    local which=$1 mode=$2 c=$3 s=$4 rep=$5
    local db=bench_$which
    local tag="C1-$mode-$which.c$c.$s.r$rep"
    # QUICK's small tables could run dry in a timed run: a fixed number of
    # claims instead, for a fifth of the pending rows.
    local C1_LEN=$BENCH_T
    [ "$QUICK" = 1 ] && C1_LEN=x$(( (C1_PENDING / 50 + c - 1) / c ))
    local before=${C1_NOW[$db]:-} after tps
    [ -n "$before" ] || before=$(c1_pending "$db")
    tps=$(run_pgbench "$RAW/pgbench.$tag" "$db" "$(pgopts "$s")" "$c" "$C1_LEN" "c1_claim_$mode.sql")
    after=$(c1_pending "$db")
    C1_NOW[$db]=$after
    local rows=$((before - after)) rps="" per="" note="" ntx
    ntx=$(awk '/^number of transactions actually processed:/ { split($NF, a, "/"); print a[1]; exit }' "$RAW/pgbench.$tag")
    if [ -n "$tps" ] && [ -n "$ntx" ] && [ "$ntx" -gt 0 ]; then
        per=$(awk -v r="$rows" -v n="$ntx" 'BEGIN { printf "%.2f", r / n }')
        rps=$(awk -v p="$per" -v x="$tps" 'BEGIN { printf "%.1f", p * x }')
        [ "$after" -lt $((C1_PENDING / 10)) ] && note="ran low on pending rows ($after left)"
    else
        note="pgbench failed: $(grep -m1 -iE 'error|abort' "$RAW/pgbench.$tag")"
    fi
    record C "C1-$mode-$which" "$c" "$s" "$rep" "$tps" "$rps" no "$rows" "$per" "" "" "$note"
}

# run_l1 MODE(commit|deferred) REP
run_l1()
{
    local mode=$1 rep=$2
    local tag="L1-$mode.r$rep"
    bsql bench "TRUNCATE delivery_outbox" || return
    local out=$RAW/relay.$tag.out
    # the relay commits claims and acks without waiting for the WAL flush,
    # as README recommends: a claim or ack lost in a crash only means a
    # redelivery
    as_user_bg env PGDATABASE=bench PGOPTIONS='-c synchronous_commit=off' \
        "$OUTBOX_WORK/relay" relay "$CHANNEL" >"$out" 2>&1
    local bg=$OUTBOX_BG_PID pid="" i
    for i in $(seq 1 100); do
        pid=$(awk '/^ready / { print $2; exit }' "$out")
        [ -n "$pid" ] && break
        kill -0 "$bg" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$pid" ]; then
        record L "L1-$mode" "$L1_CLIENTS" on "$rep" "" "" relay "" "" "" "" "relay did not start: $(head -c 200 "$out")"
        return
    fi
    local tps
    tps=$(run_pgbench "$RAW/pgbench.$tag" bench "$(pgopts on "$mode")" "$L1_CLIENTS" "$L1_T" \
        l1_enqueue.sql -R "$L1_RATE")
    # let the relay finish: every row acked, or 5 s
    for i in $(seq 1 50); do
        [ "$(bsql bench "SELECT count(*) FROM delivery_outbox WHERE delivery_state <> 'acked'")" = 0 ] && break
        sleep 0.1
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$bg" 2>/dev/null
    # The latency of each row from its producer's commit (and from its
    # insert), in the steady state: rows committed in the first
    # L1_WARMUP_MS of the run (connections starting, every backend's first
    # calls building its caches) are counted but left out of the figures.
    local stats
    stats=$(bsql bench "
        WITH c AS (
            SELECT delivery_state, created_at, acked_at,
                   pg_catalog.pg_xact_commit_timestamp(
                       ((pg_catalog.convert_from(payload, 'UTF8')::bigint
                         % 4294967296)::text)::xid) AS committed
              FROM delivery_outbox),
        l AS (
            SELECT delivery_state, acked_at - committed AS from_commit,
                   acked_at - created_at AS from_insert,
                   committed >= min(committed) OVER ()
                       + interval '$L1_WARMUP_MS ms' AS steady
              FROM c)
        SELECT count(*),
               count(*) FILTER (WHERE delivery_state = 'acked'),
               round((1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY from_commit) FILTER (WHERE steady)))::numeric, 2),
               round((1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY from_commit) FILTER (WHERE steady)))::numeric, 2),
               round((1000 * extract(epoch FROM max(from_commit) FILTER (WHERE steady)))::numeric, 2),
               round((1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY from_insert) FILTER (WHERE steady)))::numeric, 2),
               round((1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY from_insert) FILTER (WHERE steady)))::numeric, 2),
               round((1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY from_commit)))::numeric, 2),
               count(*) FILTER (WHERE NOT steady)
          FROM l")
    local n acked p50 p99 max ip50 ip99 ap99 nwarm
    IFS='|' read -r n acked p50 p99 max ip50 ip99 ap99 nwarm <<<"$stats"
    local note="" rstats
    rstats="first ${L1_WARMUP_MS} ms ($nwarm rows) left out, p99 with them $ap99 ms; from the insert: p50 $ip50 p99 $ip99 ms; $(grep -m1 '^wakeups=' "$out")"
    local lag
    lag=$(awk '/^rate limit schedule lag:/ { print $6; exit }' "$RAW/pgbench.$tag")
    [ -n "$lag" ] && rstats="$rstats; producers' schedule lag avg $lag ms"
    [ -z "$tps" ] && note="pgbench failed: $(grep -m1 -iE 'error|abort' "$RAW/pgbench.$tag")"
    [ "$acked" != "$n" ] && note="$note only $acked of $n rows acked"
    record L "L1-$mode" "$L1_CLIENTS" on "$rep" "$tps" "$p50" relay "$n" "$p99" "$max" "$rstats" "$note"
}

# cpu_busy SECS: the share of the machine's CPU time that was busy over the
# next SECS seconds, in percent (from /proc/stat).  Taken while nothing of
# the bench runs, it says how quiet the machine is.
cpu_busy()
{
    local a b
    a=$(awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $5 + $6 }' /proc/stat)
    sleep "$1"
    b=$(awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $5 + $6 }' /proc/stat)
    awk -v a="$a" -v b="$b" 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        t = y[1] - x[1]; idle = y[2] - x[2]
        printf "%.0f", (t > 0 ? 100 * (t - idle) / t : 0) }'
}

# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

BENCH_START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
bench_setup libpq-dev
RAW=$OUTBOX_WORK/raw
mkdir -p "$RAW"
is_root && chown "$OUTBOX_RUN_USER:" "$RAW"
want E6 && bench_install_pgq
bench_build
bench_start_cluster

log "creating the bench database"
as_user createdb bench || die "createdb bench failed"
bsql bench "CREATE EXTENSION delivery_outbox" || die "CREATE EXTENSION delivery_outbox failed"
EXT_VERSION=$(bsql bench "SELECT extversion FROM pg_extension WHERE extname = 'delivery_outbox'")
bench_e12_tables bench || die "creating the E1/E2 tables failed"

HAVE_NOTIFY_GUC=no
bsql_ok bench "SET delivery_outbox.notify = off" && HAVE_NOTIFY_GUC=yes
HAVE_DEFERRED=no
DEFERRED_NOTE="not available: SET delivery_outbox.notify = deferred fails (extension $EXT_VERSION)"
if bsql_ok bench "SET delivery_outbox.notify = deferred"; then
    HAVE_DEFERRED=yes
    DEFERRED_NOTE=""
    # the worker serving "bench" retries until the database exists
    for i in $(seq 1 150); do
        [ "$(bsql bench "SELECT count(*) FROM pg_stat_activity
                          WHERE datname = 'bench' AND backend_type LIKE 'delivery_outbox%'")" != 0 ] && break
        sleep 0.1
    done
    if [ "$(bsql bench "SELECT count(*) FROM pg_stat_activity
                        WHERE datname = 'bench' AND backend_type LIKE 'delivery_outbox%'")" = 0 ]; then
        DEFERRED_NOTE="no worker serves database bench (preloaded: $PRELOADED): deferred may fall back to commit"
    fi
fi
HAVE_BATCH=no
BATCH_NOTE="not available: no outbox_enqueue_batch (extension $EXT_VERSION)"
if [ "$(bsql bench "SELECT to_regprocedure('outbox_enqueue_batch(text[],text[],bytea[],text[],timestamptz[],timestamptz[],text[],regclass)') IS NOT NULL")" = t ]; then
    HAVE_BATCH=yes
    BATCH_NOTE=""
fi
HAVE_PGQ=no
PGQ_NOTE="not available: CREATE EXTENSION pgq failed (package postgresql-15-pgq3)"
PGQ_TABLE=
if want E6 && bsql_ok bench "CREATE EXTENSION pgq" &&
    bsql_ok bench "SELECT pgq.create_queue('bench_q')"; then
    PGQ_TABLE=$(bsql bench "SELECT queue_data_pfx FROM pgq.queue WHERE queue_name = 'bench_q'")
    [ -n "$PGQ_TABLE" ] && HAVE_PGQ=yes && PGQ_NOTE=""
fi
log "extension $EXT_VERSION; preloaded: $PRELOADED; notify GUC: $HAVE_NOTIFY_GUC; deferred: $HAVE_DEFERRED; batch: $HAVE_BATCH; pgq: $HAVE_PGQ"

if want C1; then
    log "building the C1 tables: bench_big ($C1_ACKED acked + $C1_PENDING pending), bench_empty ($C1_PENDING pending)"
    t0=$(date +%s)
    # both at once (2 cores, nothing is measured yet)
    (trap - EXIT; c1_load bench_big "$C1_ACKED") &
    c1_big_job=$!
    (trap - EXIT; c1_load bench_empty 0) &
    c1_empty_job=$!
    wait "$c1_big_job" || die "building bench_big failed"
    wait "$c1_empty_job" || die "building bench_empty failed"
    log "C1 tables ready in $(($(date +%s) - t0)) s"
fi

E_LIST=()
for w in E1 E2 E3 E4 E5 E6; do
    want "$w" || continue
    case $w in
        E4) [ "$HAVE_DEFERRED" = yes ] || continue ;;
        E5) [ "$HAVE_BATCH" = yes ] || continue ;;
        E6) [ "$HAVE_PGQ" = yes ] || continue ;;
    esac
    E_LIST+=("$w")
done

# Warm-up: one short unrecorded run of each enqueue workload.
if [ "$QUICK" != 1 ]; then
    log "warm-up"
    for w in "${E_LIST[@]}"; do
        run_pgbench "$RAW/warmup.$w" bench "$(pgopts on)" 4 1 \
            "$(case $w in E1) echo e1_insert.sql ;; E2) echo e2_insert_notify.sql ;;
                          E3|E4) echo e3_enqueue.sql ;; E5) echo e5_enqueue_batch.sql ;;
                          E6) echo e6_pgq.sql ;; esac)" >/dev/null
    done
fi

# How busy the machine is with the bench's cluster idle: the neighbours
# (and the cluster's own background work), before and after the runs.
BUSY_BEFORE=$(cpu_busy 3)
log "machine CPU busy before the runs: ${BUSY_BEFORE}% (load average $(cut -d' ' -f1-3 /proc/loadavg))"

LAST_RECORD=${EPOCHREALTIME/,/.}
for cell in $BENCH_CELLS; do
    c=${cell%%:*}
    s=${cell##*:}
    for rep in $(seq 1 "$BENCH_REPS"); do
        log "cell $c clients, synchronous_commit $s: round $rep/$BENCH_REPS ($(($(date +%s) - BENCH_START)) s)"
        for w in "${E_LIST[@]}"; do
            run_e "$w" "$c" "$s" "$rep"
        done
        if want C1; then
            c1_prepare
            # ABBA: odd rounds run the big table first, even rounds the
            # empty one, so that neither always follows the other
            for mode in all recipient; do
                if [ $((rep % 2)) = 1 ]; then
                    run_c1 big "$mode" "$c" "$s" "$rep"
                    run_c1 empty "$mode" "$c" "$s" "$rep"
                else
                    run_c1 empty "$mode" "$c" "$s" "$rep"
                    run_c1 big "$mode" "$c" "$s" "$rep"
                fi
            done
        fi
    done
done

if want L1; then
    for rep in $(seq 1 "$BENCH_REPS"); do
        log "L1 round $rep/$BENCH_REPS ($(($(date +%s) - BENCH_START)) s)"
        run_l1 commit "$rep"
        [ "$HAVE_DEFERRED" = yes ] && run_l1 deferred "$rep"
    done
fi

BUSY_AFTER=$(cpu_busy 3)
QUIET=no
[ "$BUSY_BEFORE" -le "${BENCH_QUIET_PCT:-10}" ] && [ "$BUSY_AFTER" -le "${BENCH_QUIET_PCT:-10}" ] && QUIET=yes

# ---------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------

REPORT=$RAW/report.txt
{
    echo "delivery_outbox bench: extension $EXT_VERSION, PostgreSQL $(bsql postgres "SHOW server_version"), $(nproc) cores"
    echo "command: ${BENCH_CMD:-bench/run.sh}  (QUICK=$QUICK; cells: $BENCH_CELLS; median of $BENCH_REPS run(s) of ${BENCH_T}s each)"
    echo "C1 tables: big = $C1_ACKED acked + $C1_PENDING pending rows, empty = $C1_PENDING pending rows; $RECIPIENTS recipients"
    echo "machine load average (1/5/15 min) at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null); run took $(($(date +%s) - BENCH_START)) s"
    echo "quiet machine: $QUIET (CPU busy with the bench idle: ${BUSY_BEFORE}% before the runs, ${BUSY_AFTER}% after; quiet means both <= ${BENCH_QUIET_PCT:-10}%)"
    echo "commit: $(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)$( [ -n "$(git -C "$OUTBOX_TOP" status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (with uncommitted changes)'), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    awk -F'|' \
        -v deferred_note="$DEFERRED_NOTE" -v batch_note="$BATCH_NOTE" -v pgq_note="$PGQ_NOTE" \
        -v cells="$BENCH_CELLS" -v want="$BENCH_WORKLOADS" -v l1rate="$L1_RATE" -v l1c="$L1_CLIENTS" \
        -v acked="$(awk -v n="$C1_ACKED" 'BEGIN { if (n % 1000000 == 0) print n / 1000000 "M"; else if (n % 1000 == 0) print n / 1000 "k"; else print n }')" \
        -f "$BENCH_DIR/report.awk" "$RAW/results"
} >"$REPORT"

cat "$REPORT"
mkdir -p "$BENCH_DIR/out"
OUT_FILE=$BENCH_DIR/out/run-$(date +%Y%m%d-%H%M%S).txt
cp "$REPORT" "$OUT_FILE"
cp "$RAW/results" "$OUT_FILE.raw"
log "table written to $OUT_FILE; total $(($(date +%s) - BENCH_START)) s"
