#!/usr/bin/env bash
#
# bench/cold_stats.sh -- claims and acks on outboxes without fresh statistics
#
# Three created outboxes, each holding PENDING pending rows (100 recipients,
# 64-byte payloads) enqueued through outbox_enqueue_batch, with autovacuum
# off (for the cluster, and autovacuum_enabled = off on each table), so that
# nothing but this script ever analyzes them:
#
#   t.never     never analyzed
#   t.stale     ANALYZEd while empty, filled afterwards (statistics that say
#               the table has no rows)
#   t.analyzed  ANALYZEd after the fill (the reference)
#
# pgbench clients claim 10 rows and ack them in one transaction
# (bench/cold_claim_ack.sql: from the whole outbox; and, MODES,
# bench/cold_claim_ack_recipient.sql: one of the 100 recipients' rows), a
# fixed number of transactions per client and run (TXS), so that each run
# takes the same rows out of each table.  ROUNDS rounds; each round runs the
# three tables one after the other, the order rotating from round to round
# (never stale analyzed, stale analyzed never, analyzed never stale, ...),
# so that each table follows each other as often.  Reported: the median
# tx/s of each table, and the ratios never/analyzed and stale/analyzed
# (paired: within each round, then the median over the rounds), with
# PASS/FAIL lines against the target of issue 22 (>= 0.8).  It reports and
# exits 0 whatever the figures say.
#
# Usage (as root, like run.sh):  bench/cold_stats.sh
# Knobs: PENDING (500000), CLIENTS (4), TXS (300 transactions per client and
# run), ROUNDS (6), MODES ("all recipient"), QUIET_LOAD (1.5: before the
# rounds, wait until the 1-minute load average is below it, checking every
# 30 s for at most QUIET_WAIT seconds, 1200; 0: do not wait), BENCH_PORT (5480),
# BENCH_NO_BUILD=1 (use the installed extension: how to measure an older
# commit, built and installed into PG_CONFIG's prefix beforehand),
# KEEP_TMP=1.
set -euo pipefail
OUTBOX_PORT=${BENCH_PORT:-5480}
OUTBOX_QUIET=1
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

PENDING=${PENDING:-500000}
CLIENTS=${CLIENTS:-4}
TXS=${TXS:-300}
ROUNDS=${ROUNDS:-6}
MODES=${MODES:-"all recipient"}
TABLES="never stale analyzed"
PAYLOAD_HEX=$(printf '%02x' $(seq 0 63))
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)

bench_setup
bench_build_extension
OUTBOX_EXTRA_CONF="
max_connections = 60
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 1h
# nothing may analyze the tables behind the script's back
autovacuum = off"
outbox_start_cluster

bsql() { as_user psql -X -q -At -v ON_ERROR_STOP=1 -d bench -c "$*"; }

as_user createdb bench || die "createdb bench failed"
bsql "CREATE EXTENSION delivery_outbox; CREATE SCHEMA t" || die "CREATE EXTENSION failed"
LIBRARY=$(md5sum "$("$PG_CONFIG" --pkglibdir)/delivery_outbox.so" | cut -c1-12)

# fill TABLE: PENDING rows through outbox_enqueue_batch, 10,000 a call
fill()
{
    bsql "SET delivery_outbox.notify = off; SET delivery_outbox.notify_queue_limit = 0;
          SET synchronous_commit = off;
          DO \$\$
          DECLARE b int;
          BEGIN
              FOR b IN 0 .. ($PENDING - 1) / 10000 LOOP
                  PERFORM count(*) FROM outbox_enqueue_batch(
                      ARRAY(SELECT 'agent:' || (g % 100)
                              FROM generate_series(b * 10000 + 1,
                                                   least(b * 10000 + 10000, $PENDING)) g),
                      array_fill('work'::text, ARRAY[least(10000, $PENDING - b * 10000)]),
                      array_fill('\\x$PAYLOAD_HEX'::bytea, ARRAY[least(10000, $PENDING - b * 10000)]),
                      outbox => 't.$1');
              END LOOP;
          END \$\$" || die "filling t.$1 failed"
}

log "loading: t.never, t.stale, t.analyzed, $PENDING pending rows each (outbox_enqueue_batch)"
for tb in $TABLES; do
    bsql "SELECT outbox_create('t', '$tb');
          ALTER TABLE t.$tb SET (autovacuum_enabled = off, toast.autovacuum_enabled = off)" \
        >/dev/null || die "outbox_create('t', '$tb') failed"
done
bsql "ANALYZE t.stale" || die "ANALYZE t.stale failed"
for tb in $TABLES; do fill "$tb"; done
bsql "ANALYZE t.analyzed" || die "ANALYZE t.analyzed failed"
bsql "CHECKPOINT"

# what the planner knows of each table (reltuples -1: never analyzed)
stats_line()
{
    local tb out=""
    for tb in $TABLES; do
        out="$out$(bsql "SELECT format('t.%s: reltuples %s, relpages %s, last analyze %s, %s pending',
                                       c.relname, c.reltuples, c.relpages,
                                       coalesce((SELECT to_char(last_analyze, 'HH24:MI:SS')
                                                   FROM pg_stat_user_tables WHERE relid = c.oid),
                                                'never'),
                                       (SELECT count(*) FROM t.$tb WHERE delivery_state = 'pending'))
                            FROM pg_class c WHERE c.oid = 't.$tb'::regclass")
"
    done
    printf '%s' "$out"
}
STATS_BEFORE=$(stats_line)

# run MODE TABLE: tx/s of one pgbench run; the run's output in the work dir
run()
{
    local script=cold_claim_ack.sql out=$OUTBOX_WORK/pgbench.$1.$2.$r
    [ "$1" = recipient ] && script=cold_claim_ack_recipient.sql
    as_user pgbench -n -M prepared -c "$CLIENTS" -j 2 -t "$TXS" -D tbl="t.$2" \
        -f "$OUTBOX_SRC/bench/$script" bench >"$out" 2>&1 || true
    awk '/^tps = / { print $3; exit }' "$out"
}

# The fill just ran: wait for the machine (this script's own load included)
# to settle before anything is timed.
QUIET_LOAD=${QUIET_LOAD:-1.5}
QUIET_WAIT=${QUIET_WAIT:-1200}
waited=0
while awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v q="$QUIET_LOAD" 'BEGIN { exit !(q > 0 && l >= q) }'; do
    if [ "$waited" -ge "$QUIET_WAIT" ]; then
        warn "load average still $(cut -d' ' -f1 /proc/loadavg) after ${waited}s: measuring anyway"
        break
    fi
    log "load average $(cut -d' ' -f1 /proc/loadavg) >= $QUIET_LOAD: waiting (${waited}s so far)"
    sleep 30
    waited=$((waited + 30))
done
LOAD_ROUNDS=$(cut -d' ' -f1-3 /proc/loadavg)

declare -A TPS=()
order=(never stale analyzed)
for r in $(seq 1 "$ROUNDS"); do
    k=$(((r - 1) % 3))
    this="${order[*]:k} ${order[*]:0:k}"
    for mode in $MODES; do
        line=""
        for tb in $this; do
            tps=$(run "$mode" "$tb")
            [ -n "$tps" ] || die "pgbench failed on t.$tb ($mode): $(grep -m1 -iE 'error|abort' "$OUTBOX_WORK/pgbench.$mode.$tb.$r")"
            TPS[$mode.$tb.$r]=$tps
            line="$line $tb ${tps%%.*}"
        done
        log "round $r/$ROUNDS, $mode: tx/s$line (load $(cut -d' ' -f1 /proc/loadavg))"
    done
done
STATS_AFTER=$(stats_line)

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo
echo "delivery_outbox cold-statistics cell: claim 10 + ack in one transaction, $CLIENTS clients, $TXS transactions per client and run, $ROUNDS rounds (order rotating), PostgreSQL $("$PG_CONFIG" --version | cut -d' ' -f2), $(nproc) cores"
echo "command: ${BENCH_CMD:-bench/cold_stats.sh}; commit $(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)$( [ "${BENCH_NO_BUILD:-0}" = 1 ] && echo ' (BENCH_NO_BUILD=1: the installed library')$( [ "${BENCH_NO_BUILD:-0}" = 1 ] && echo ", md5 $LIBRARY)"), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "load average at start $LOAD_START, before the rounds $LOAD_ROUNDS (after waiting ${waited}s for < $QUIET_LOAD), at end $(cut -d' ' -f1-3 /proc/loadavg); run took $(($(date +%s) - START)) s"
echo "tables before the runs:"
printf '%s\n' "$STATS_BEFORE" | sed 's/^/  /'
echo "tables after the runs:"
printf '%s\n' "$STATS_AFTER" | sed 's/^/  /'
for mode in $MODES; do
    declare -a A=() N=() S=() RN=() RS=()
    for r in $(seq 1 "$ROUNDS"); do
        a=${TPS[$mode.analyzed.$r]} n=${TPS[$mode.never.$r]} s=${TPS[$mode.stale.$r]}
        A+=("${a%%.*}") N+=("${n%%.*}") S+=("${s%%.*}")
        RN+=("$(awk -v x="$n" -v y="$a" 'BEGIN { printf "%.3f", x / y }')")
        RS+=("$(awk -v x="$s" -v y="$a" 'BEGIN { printf "%.3f", x / y }')")
    done
    what="whole outbox"
    [ "$mode" = recipient ] && what="one recipient's rows"
    echo "claim + ack, $what:"
    printf '  t.analyzed  median %8.1f tx/s (rounds: %s)\n' "$(median "${A[@]}")" "${A[*]}"
    printf '  t.never     median %8.1f tx/s (rounds: %s)\n' "$(median "${N[@]}")" "${N[*]}"
    printf '  t.stale     median %8.1f tx/s (rounds: %s)\n' "$(median "${S[@]}")" "${S[*]}"
    for pair in never stale; do
        if [ "$pair" = never ]; then ratios=("${RN[@]}"); else ratios=("${RS[@]}"); fi
        m=$(median "${ratios[@]}")
        lo=$(printf '%s\n' "${ratios[@]}" | sort -g | head -n1)
        hi=$(printf '%s\n' "${ratios[@]}" | sort -g | tail -n1)
        awk -v m="$m" -v lo="$lo" -v hi="$hi" -v p="$pair" -v w="$what" 'BEGIN {
            printf "%s  %s/analyzed claim+ack tx/s, %s = %.2f (target >= 0.8)  (rounds %.2f-%.2f)\n",
                   (m >= 0.8 ? "PASS" : "FAIL"), p, w, m, lo, hi }'
    done
done
