#!/usr/bin/env bash
#
# bench/notify_lock.sh -- how long a notifying commit holds the NOTIFY lock
#
# In commit mode every notifying commit of the cluster serializes on one
# heavyweight lock: PostgreSQL takes it in PreCommit_Notify (after writing
# nothing yet) and releases it with the transaction's other locks, after the
# commit record's WAL flush.  This script measures that window directly with
# uprobes (perf probe) on three functions the server binary exports:
#
#   LockSharedObject, on return   the lock is held from here
#   ProcArrayEndTransaction       the commit record is flushed and visible
#   LockReleaseAll                the lock is released
#
# For each notifying commit it reports the hold (first to last) and its two
# parts: "flush" (queue insert, commit record, WAL flush) and "after"
# (XACT_EVENT_COMMIT callbacks, resource-owner cleanup before the locks),
# the part an extension's commit callbacks add to.  Workloads, as in run.sh,
# each with a listener connected: E2 (PL/pgSQL pg_notify trigger) and E3
# (outbox_enqueue, notify = commit), ROUNDS rounds, alternating, 16 clients,
# synchronous_commit = on.  The probes themselves cost about a microsecond
# per hit, in every workload alike: compare the workloads, not the absolute
# figures.
#
# Usage (as root, like run.sh; installs linux-perf and what run.sh needs):
#   bench/notify_lock.sh
# Knobs: ROUNDS (default 3), BENCH_T (seconds per run, default 6),
# CLIENTS (16), BENCH_NO_BUILD=1, KEEP_TMP=1.  Exits 0 whatever it measures.
set -euo pipefail
OUTBOX_PORT=${BENCH_PORT:-5460}
OUTBOX_QUIET=1
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

ROUNDS=${ROUNDS:-3}
BENCH_T=${BENCH_T:-6}
CLIENTS=${CLIENTS:-16}
PROBES=(LockSharedObject%return ProcArrayEndTransaction LockReleaseAll)

is_root || die "perf probe needs root"
bench_setup linux-perf libpq-dev
command -v perf >/dev/null || die "perf is missing (package linux-perf)"
bench_build_extension
log "building bench/relay.c"
as_user cc -O2 -Wall -Wextra -o "$OUTBOX_WORK/relay" "$OUTBOX_SRC/bench/relay.c" \
    -I"$("$PG_CONFIG" --includedir)" -L"$("$PG_CONFIG" --libdir)" -lpq ||
    die "building bench/relay.c failed"
OUTBOX_EXTRA_CONF="
max_connections = 60
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 1h
shared_preload_libraries = 'delivery_outbox'
delivery_outbox.database = 'bench'"
outbox_start_cluster
as_user createdb bench
as_user psql -X -q -v ON_ERROR_STOP=1 -d bench -c "CREATE EXTENSION delivery_outbox"
bench_e12_tables bench

POSTGRES=$PG_BINDIR/postgres
# shellcheck disable=SC2317  # called from the EXIT trap
outbox_on_exit()
{
    perf probe -q -d 'probe_notify_lock:*' >/dev/null 2>&1 || true
}
perf probe -q -d 'probe_notify_lock:*' >/dev/null 2>&1 || true
for p in "${PROBES[@]}"; do
    perf probe -q -x "$POSTGRES" --add "probe_notify_lock:${p%%%*}=$p" ||
        die "perf probe on $p failed"
done

# measure NAME SCRIPT: one run with a listener; prints "tps n mean p50 p90
# flush_mean after_mean" (microseconds)
measure()
{
    local name=$1 script=$2 out=$OUTBOX_WORK/$1 rp lpid
    as_user_bg env PGDATABASE=bench "$OUTBOX_WORK/relay" listen delivery_outbox \
        delivery_outbox id no >"$out.listener" 2>&1
    lpid=$OUTBOX_BG_PID
    for _ in $(seq 1 100); do grep -q '^ready ' "$out.listener" && break; sleep 0.05; done
    as_user env PGOPTIONS="-c synchronous_commit=on -c delivery_outbox.notify=commit" \
        pgbench -n -M prepared -c "$CLIENTS" -j 2 -T "$BENCH_T" \
        -f "$OUTBOX_SRC/bench/$script" bench >"$out.pgbench" 2>&1 &
    local bench_pid=$!
    sleep 2
    perf record -q -a -o "$out.data" \
        -e probe_notify_lock:LockSharedObject__return -e probe_notify_lock:ProcArrayEndTransaction \
        -e probe_notify_lock:LockReleaseAll -- sleep 2 >/dev/null 2>&1
    wait "$bench_pid" || true
    rp=$(awk '/^ready / { print $2; exit }' "$out.listener")
    [ -n "$rp" ] && kill -TERM "$rp" 2>/dev/null
    wait "$lpid" 2>/dev/null || true
    perf script -i "$out.data" 2>/dev/null |
        awk -v tps="$(awk '/^tps = / { print $3; exit }' "$out.pgbench")" '
        {
            for (i = 1; i <= NF; i++)
                if ($i ~ /^probe_notify_lock:/) { ev = $i; t = $(i - 1) }
            sub(/:$/, "", t); pid = $2
            if (ev ~ /LockSharedObject/) { acq[pid] = t; pa[pid] = "" }
            else if (ev ~ /ProcArrayEndTransaction/ && acq[pid] != "" && pa[pid] == "") pa[pid] = t
            else if (ev ~ /LockReleaseAll/ && acq[pid] != "") {
                if (pa[pid] != "") {
                    h[++n] = (t - acq[pid]) * 1e6
                    fl += (pa[pid] - acq[pid]) * 1e6; af += (t - pa[pid]) * 1e6
                }
                acq[pid] = ""; pa[pid] = ""
            }
        }
        END {
            if (n == 0) { printf "%s 0 - - - - -\n", tps; exit }
            # insertion sort is fine for a few thousand values
            for (i = 2; i <= n; i++) { v = h[i]; for (j = i - 1; j >= 1 && h[j] > v; j--) h[j + 1] = h[j]; h[j + 1] = v }
            for (i = 1; i <= n; i++) s += h[i]
            printf "%.0f %d %.1f %.1f %.1f %.1f %.1f\n", tps, n, s / n, h[int(n / 2) + 1], h[int(n * 0.9) + 1], fl / n, af / n
        }'
}

log "measuring: $ROUNDS rounds of E2 and E3, ${BENCH_T}s each, $CLIENTS clients"
printf '%-5s %-3s %8s %7s %9s %8s %8s %10s %10s\n' round w tps commits hold_mean p50 p90 flush_mean after_mean >"$OUTBOX_WORK/table"
for r in $(seq 1 "$ROUNDS"); do
    for w in E2 E3; do
        case $w in
            E2) s=e2_insert_notify.sql ;;
            E3) s=e3_enqueue.sql ;;
        esac
        read -r tps n mean p50 p90 fl af < <(measure "$w.$r" "$s")
        printf '%-5s %-3s %8s %7s %9s %8s %8s %10s %10s\n' "$r" "$w" "$tps" "$n" "$mean" "$p50" "$p90" "$fl" "$af" >>"$OUTBOX_WORK/table"
    done
done
echo
echo "NOTIFY lock hold per notifying commit, microseconds (uprobes; $CLIENTS clients, synchronous_commit on, one listener)"
echo "command: bench/notify_lock.sh; commit $(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'), load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$OUTBOX_WORK/table"
