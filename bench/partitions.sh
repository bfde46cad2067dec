#!/usr/bin/env bash
#
# bench/partitions.sh -- partitioned outboxes: retention by dropping
# partitions under churn, and what partitioning costs a claim
#
# Two measurements, each side by side in one run (BENCH_PARTS picks):
#
#   R2  claim 100 + ack of the claimed ids in one transaction
#       (bench/o1_claim_ack.sql), R2_CLIENTS clients, R2_CLAIMS claims per
#       run, on two outboxes loaded afresh before each run with the same
#       R2_ROWS pending rows over 100 recipients (ids from 1, loaded with
#       outbox_enqueue_batch, then VACUUM ANALYZE): t.q_plain (not
#       partitioned) and t.q_part (partition_rows R2_PARTITION_ROWS);
#       ROUNDS rounds ABBA, autovacuum off for the part.  Rows/s = claims/s
#       x rows acked / claims.  Target: partitioned/unpartitioned >= 0.8,
#       paired within each round, median over the rounds.
#   R3  the same with small partitions and small claims: claim R3_CLAIM
#       + ack of the claimed ids in one transaction (a script of
#       bench/o1_claim_ack.sql's shape, written to the run's directory),
#       R3_CLIENTS clients, R3_CLAIMS claims per run, R3_ROWS pending rows
#       on t.q_plain and t.q_part3 (partition_rows R3_PARTITION_ROWS),
#       loaded as for R2; ROUNDS rounds ABBA, paired ratio, target >= 0.8.
#       A claim there opens the scans of every partition: those its rows
#       are in, the ones drained before them and the two made ahead.
#   R1  the churn: two outboxes side by side, at the same time, each with
#       its own producers and relays: t.c_part (partition_rows
#       PARTITION_ROWS) and t.c_plain (not partitioned, purged by the
#       worker), both with retain_acked RETAIN (outbox_configure), the
#       worker sweeping every SWEEP_INTERVAL, autovacuum on with its
#       defaults.  Producers: pgbench --rate R1_RATE rows/s per outbox,
#       R1_PRODUCERS clients, one outbox_enqueue per transaction
#       (bench/p3_produce.sql, 10 recipients), until R1_ROWS rows per
#       outbox; relays: R1_RELAYS pgbench clients per outbox claiming 100
#       and acking them in one transaction, pausing 20 ms after a short
#       batch (bench/churn_relay.sql).  synchronous_commit = R1_SYNC and
#       delivery_outbox.notify = off for both (nobody listens).
#       Every R1_SAMPLE s: each outbox's size, table + indexes + TOAST
#       (pg_total_relation_size summed over pg_partition_tree), its
#       partitions, live and dead tuples (pg_stat_user_tables).  Every
#       R1_PROBE_EVERY s (first at R1_PROBE_FIRST): a probe of each outbox,
#       one after the other (order alternating): R1_PROBE_ROWS rows
#       enqueued in one outbox_enqueue_batch, and the rate at which the
#       running relays ack them and whatever they claim in that window
#       (rows acked between the first and the last ack of a probe row,
#       divided by that time): the relays' claim+ack throughput on the
#       table as the churn has left it.  Targets: the partitioned outbox's
#       largest size <= 3 partitions' worth (the largest partition seen),
#       and its claim+ack throughput at the end / at the start >= 0.9
#       (median of the last R1_PROBE_AVG probes over the first ones); the
#       unpartitioned outbox's figures beside them.  Also reported: the
#       producers' rate, lag and worst latency per second (pgbench
#       aggregate logs), aborted clients, how long each fully drawn
#       partition lingered before its drop, the partitions left at the
#       end, and the server log's lock waits (log_lock_waits,
#       deadlock_timeout 50 ms), errors and autovacuum runs.
#
# The bench reports; it exits 0 whatever the numbers say.  The summary is
# also written to bench/out/partitions-DATE.txt.  About 14 minutes on 2
# cores (R2 about 3, R3 about 3, R1 R1_ROWS / R1_RATE s plus 30 s).
#
# Usage (as root, like run.sh):  bench/partitions.sh
# PGBIN=DIR (or PG_CONFIG=DIR/pg_config): the PostgreSQL installation to
# build against, install into and run (default: PG_CONFIG of
# scripts/common.sh, /usr/lib/postgresql/15/bin/pg_config).
# Knobs: BENCH_PARTS ("R2 R3 R1"), ROUNDS (4), R2_ROWS (1000000),
# R2_PARTITION_ROWS (250000), R2_CLIENTS (2), R2_CLAIMS (2000),
# R3_ROWS (300000), R3_PARTITION_ROWS (50000), R3_CLIENTS (4),
# R3_CLAIMS (12000), R3_CLAIM (10),
# R1_ROWS (1000000), R1_RATE (2000), R1_PRODUCERS (4), R1_RELAYS (2),
# PARTITION_ROWS (100000), RETAIN ('10 seconds'), SWEEP_INTERVAL ('1s'),
# R1_SYNC (off), R1_SAMPLE (10), R1_PRINT_EVERY (60), R1_PROBE_FIRST (30),
# R1_PROBE_EVERY (45), R1_PROBE_ROWS (20000), R1_PROBE_AVG (3),
# BENCH_COMMIT (the commit to name in the header when the tree is no git
# checkout), BENCH_PORT (5474), BENCH_NO_BUILD=1, KEEP_TMP=1.
set -euo pipefail
if [ -n "${PGBIN:-}" ] && [ -z "${PG_CONFIG:-}" ]; then
    PG_CONFIG=$PGBIN/pg_config
fi
OUTBOX_PORT=${BENCH_PORT:-5474}
OUTBOX_QUIET=1
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

BENCH_PARTS=${BENCH_PARTS:-R2 R3 R1}
ROUNDS=${ROUNDS:-4}
R2_ROWS=${R2_ROWS:-1000000}
R2_PARTITION_ROWS=${R2_PARTITION_ROWS:-250000}
R2_CLIENTS=${R2_CLIENTS:-2}
R2_CLAIMS=${R2_CLAIMS:-2000}
R3_ROWS=${R3_ROWS:-300000}
R3_PARTITION_ROWS=${R3_PARTITION_ROWS:-50000}
R3_CLIENTS=${R3_CLIENTS:-4}
R3_CLAIMS=${R3_CLAIMS:-12000}
R3_CLAIM=${R3_CLAIM:-10}
R1_ROWS=${R1_ROWS:-1000000}
R1_RATE=${R1_RATE:-2000}
R1_PRODUCERS=${R1_PRODUCERS:-4}
R1_RELAYS=${R1_RELAYS:-2}
PARTITION_ROWS=${PARTITION_ROWS:-100000}
RETAIN=${RETAIN:-10 seconds}
SWEEP_INTERVAL=${SWEEP_INTERVAL:-1s}
R1_SYNC=${R1_SYNC:-off}
R1_SAMPLE=${R1_SAMPLE:-10}
R1_PRINT_EVERY=${R1_PRINT_EVERY:-60}
R1_PROBE_FIRST=${R1_PROBE_FIRST:-30}
R1_PROBE_EVERY=${R1_PROBE_EVERY:-45}
R1_PROBE_ROWS=${R1_PROBE_ROWS:-20000}
R1_PROBE_AVG=${R1_PROBE_AVG:-3}
R1_TAIL=20          # relays and samples go on this long after the producers

want() { [[ " $BENCH_PARTS " == *" $1 "* ]]; }

BENCH_START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
bench_setup
bench_build_extension
OUTBOX_EXTRA_CONF="
max_connections = 60
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 1h
shared_preload_libraries = 'delivery_outbox'
delivery_outbox.database = 'parts'
delivery_outbox.sweep_interval = '$SWEEP_INTERVAL'
# every lock wait longer than 50 ms is logged
log_lock_waits = on
deadlock_timeout = '50ms'
log_autovacuum_min_duration = 0"
outbox_start_cluster
SO=$("$PG_CONFIG" --pkglibdir)/delivery_outbox.so
SO_ID="$(md5sum "$SO" | cut -c1-12), built $(date -u -r "$SO" '+%Y-%m-%d %H:%M:%S UTC')"
COMMIT=${BENCH_COMMIT:-$(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ -z "${BENCH_COMMIT:-}" ] && [ -n "$(git -C "$OUTBOX_TOP" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    COMMIT="$COMMIT (with uncommitted changes)"
fi
RAW=$OUTBOX_WORK/raw
mkdir -p "$RAW"
[ "$(id -u)" = 0 ] && chown "$OUTBOX_RUN_USER:" "$RAW"
SUMMARY=$RAW/summary
: >"$SUMMARY"
say() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }

sql() { as_user psql -X -q -At -v ON_ERROR_STOP=1 -d parts -c "$1"; }
# bulk loads and probes send no wake-ups
LOADOPTS="SET synchronous_commit = off; SET delivery_outbox.notify = off; SET delivery_outbox.notify_queue_limit = 0;"
# the rows of R2 and of the probes: N rows, recipient g % RECIPIENTS, kind KIND,
# as the three arrays of outbox_enqueue_batch (a FROM item named a)
batch_arrays()
{
    printf "(SELECT pg_catalog.array_agg('agent:' || (g %% %d)) r, pg_catalog.array_agg('%s'::text) k,
                    pg_catalog.array_agg('\\\\x00010203'::bytea) p
               FROM generate_series(%s, %s) g) a" "$3" "$4" "$1" "$2"
}

as_user createdb parts
# the worker retries every 5 s until its database exists
for i in $(seq 1 100); do
    SWEEPER=$(sql "SELECT pid FROM pg_stat_activity WHERE datname = 'parts' AND backend_type = 'delivery_outbox sweeper'")
    [ -n "$SWEEPER" ] && break
    sleep 0.2
done
[ -n "$SWEEPER" ] || warn "no delivery_outbox worker serves the database parts"
sql "CREATE EXTENSION delivery_outbox; CREATE SCHEMA t;
     SELECT outbox_create('t', 'q_plain'), outbox_create('t', 'q_part', partition_rows => $R2_PARTITION_ROWS),
            outbox_create('t', 'q_part3', partition_rows => $R3_PARTITION_ROWS),
            outbox_create('t', 'c_plain'), outbox_create('t', 'c_part', partition_rows => $PARTITION_ROWS);
     SELECT outbox_configure(o, retain_acked => '$RETAIN')
       FROM unnest(ARRAY['t.c_part', 't.c_plain']::regclass[]) o" >/dev/null

# --- R2: claim + ack, partitioned vs not -----------------------------------

# load_r2 TABLE [ROWS PARTITION_ROWS]: ROWS (R2_ROWS) pending rows from id 1,
# in batches that never outrun the partitions made ahead
load_r2()
{
    local rows=${2:-$R2_ROWS} prows=${3:-$R2_PARTITION_ROWS}
    local chunk=$((prows < 50000 ? prows : 50000)) lo
    sql "TRUNCATE $1 RESTART IDENTITY" >/dev/null
    for ((lo = 1; lo <= rows; lo += chunk)); do
        local hi=$((lo + chunk - 1 < rows ? lo + chunk - 1 : rows))
        sql "$LOADOPTS SELECT count(*) FROM $(batch_arrays "$lo" "$hi" 100 work),
                    outbox_enqueue_batch(a.r, a.k, a.p, outbox => '$1')" >/dev/null
    done
    sql "VACUUM ANALYZE $1" >/dev/null
}

# run_r2 TABLE TAG [CLIENTS CLAIMS SCRIPT]: one run (R2's by default);
# prints "rows/s rows_per_claim claims/s"
run_r2()
{
    local tbl=$1 out=$RAW/pgbench.$2 clients=${3:-$R2_CLIENTS} claims=${4:-$R2_CLAIMS}
    local script=${5:-$OUTBOX_SRC/bench/o1_claim_ack.sql}
    local per=$((claims / clients))
    as_user pgbench -n -M prepared -c "$clients" -j "$clients" -t "$per" -D tbl="$tbl" \
        -f "$script" parts >"$out" 2>&1 ||
        die "pgbench failed on $tbl (see $out): $(grep -m1 -i error "$out")"
    local tps rows left
    tps=$(awk '/^tps = / { print $3; exit }' "$out")
    IFS='|' read -r rows left < <(sql "SELECT count(*) FILTER (WHERE delivery_state = 'acked'),
                                              count(*) FILTER (WHERE delivery_state = 'delivered')
                                         FROM $tbl")
    [ "$left" = 0 ] || warn "$tbl: $left rows left delivered after a run"
    awk -v tps="$tps" -v rows="$rows" -v n=$((per * clients)) \
        'BEGIN { printf "%.0f %.1f %.1f\n", tps * rows / n, rows / n, tps }'
}

if want R2; then
    # statistics are taken by the bench, right before each run
    as_user psql -X -q -d parts -c "ALTER SYSTEM SET autovacuum = off" -c "SELECT pg_reload_conf()" >/dev/null
    for r in $(seq 1 "$ROUNDS"); do
        order="q_plain q_part"
        [ $((r % 2)) = 0 ] && order="q_part q_plain"
        for w in $order; do
            load_r2 "t.$w"
            read -r rps per tps < <(run_r2 "t.$w" "r2.$w.r$r")
            log "R2 round $r: t.$w $rps rows/s ($per rows/claim, $tps claims/s)"
            echo "$r $w $rps $per $tps" >>"$RAW/r2"
        done
    done
    sql "TRUNCATE t.q_plain, t.q_part" >/dev/null
    as_user psql -X -q -d parts -c "ALTER SYSTEM RESET autovacuum" -c "SELECT pg_reload_conf()" >/dev/null
fi

# --- R3: the same with small partitions and small claims --------------------

if want R3; then
    R3_SCRIPT=$RAW/r3_claim_ack.sql
    printf '%s\n' "BEGIN;" \
        "SELECT coalesce(pg_catalog.array_agg(id), '{}') AS ids" \
        "  FROM outbox_claim($R3_CLAIM, outbox => :tbl::regclass) \\gset" \
        "SELECT outbox_ack(:ids::bigint[], outbox => :tbl::regclass);" \
        "END;" >"$R3_SCRIPT"
    chmod a+r "$R3_SCRIPT"
    as_user psql -X -q -d parts -c "ALTER SYSTEM SET autovacuum = off" -c "SELECT pg_reload_conf()" >/dev/null
    for r in $(seq 1 "$ROUNDS"); do
        order="q_plain q_part3"
        [ $((r % 2)) = 0 ] && order="q_part3 q_plain"
        for w in $order; do
            load_r2 "t.$w" "$R3_ROWS" "$R3_PARTITION_ROWS"
            read -r rps per tps < <(run_r2 "t.$w" "r3.$w.r$r" "$R3_CLIENTS" "$R3_CLAIMS" "$R3_SCRIPT")
            log "R3 round $r: t.$w $rps rows/s ($per rows/claim, $tps claims/s)"
            echo "$r $w $rps $per $tps" >>"$RAW/r3"
        done
    done
    sql "TRUNCATE t.q_plain, t.q_part3" >/dev/null
    as_user psql -X -q -d parts -c "ALTER SYSTEM RESET autovacuum" -c "SELECT pg_reload_conf()" >/dev/null
fi

# --- R1: the churn ------------------------------------------------------------

# r1_sample: one line per outbox in RAW/samples: "t outbox partitions size
# index_size live dead last_id pending"; the partitions of t.c_part with
# their sizes in RAW/leaves: "t name size"
r1_sample()
{
    local t=$SECONDS
    sql "SELECT $t, o, count(*) FILTER (WHERE p.isleaf), sum(pg_total_relation_size(p.relid)),
                sum(pg_indexes_size(p.relid)), sum(s.n_live_tup), sum(s.n_dead_tup),
                pg_sequence_last_value(pg_get_serial_sequence(o::text, 'id')::regclass),
                CASE o WHEN 't.c_part'::regclass
                       THEN (SELECT count(*) FROM t.c_part WHERE delivery_state = 'pending')
                       ELSE (SELECT count(*) FROM t.c_plain WHERE delivery_state = 'pending') END
           FROM unnest(ARRAY['t.c_part', 't.c_plain']::regclass[]) o,
                -- pg_partition_tree has no row for a table that is not partitioned
                LATERAL (SELECT relid, isleaf FROM pg_partition_tree(o)
                         UNION ALL SELECT o, true WHERE NOT EXISTS (SELECT FROM pg_partition_tree(o))) p
                LEFT JOIN pg_stat_user_tables s ON s.relid = p.relid
          GROUP BY o" | tr '|' ' ' >>"$RAW/samples"
    sql "SELECT $t, c.relname, pg_total_relation_size(p.relid)
           FROM pg_partition_tree('t.c_part') p JOIN pg_class c ON c.oid = p.relid
          WHERE p.isleaf" | tr '|' ' ' >>"$RAW/leaves"
}

# r1_probe OUTBOX N: R1_PROBE_ROWS rows of kind probe_N in one batch; waits
# until the relays have acked them all; prints "rows_acked_in_window window_s
# rows/s".  The rows' ids are read from the table: where they are not the ids
# the batch returned, a line in RAW/bad_ids says so.
r1_probe()
{
    local tbl=$1 kind=probe_$2 lo hi rlo rhi rn i left=1
    IFS='|' read -r rlo rhi rn < <(sql "$LOADOPTS SELECT min(i), max(i), count(DISTINCT i)
                                     FROM $(batch_arrays 1 "$R1_PROBE_ROWS" 10 "$kind"),
                                          outbox_enqueue_batch(a.r, a.k, a.p, outbox => '$tbl') i")
    IFS='|' read -r lo hi < <(sql "SELECT min(id), max(id) FROM $tbl WHERE kind = '$kind'")
    [ "$lo $hi $rn" = "$rlo $rhi $R1_PROBE_ROWS" ] ||
        echo "$SECONDS $tbl: outbox_enqueue_batch of $R1_PROBE_ROWS rows returned $rn distinct ids from $rlo to $rhi; its rows have ids $lo to $hi" >>"$RAW/bad_ids"
    for i in $(seq 1 1200); do
        left=$(sql "SELECT count(*) FROM $tbl WHERE id BETWEEN $lo AND $hi AND kind = '$kind'
                       AND delivery_state <> 'acked'")
        [ "$left" = 0 ] && break
        # still there after about 5 s (the relays drain 20,000 rows in about
        # one): which rows, in which state and partition
        [ "$i" = 40 ] && sql "SELECT '$SECONDS', '$tbl', x.tableoid::regclass, x.delivery_state, count(*),
                                     min(x.id), max(x.id), max(x.delivery_attempts),
                                     round(extract(epoch FROM now() - min(x.delivered_at))::numeric, 1),
                                     (SELECT count(*) FROM $tbl WHERE delivery_state = 'pending' AND id > $hi)
                                FROM $tbl x WHERE x.id BETWEEN $lo AND $hi AND x.kind = '$kind'
                                 AND x.delivery_state <> 'acked' GROUP BY 3, 4" | tr '|' ' ' >>"$RAW/stragglers"
        sleep 0.1
    done
    [ "$left" = 0 ] || warn "probe of $tbl: $left rows not acked after 120 s"
    sql "SELECT count(*), round(extract(epoch FROM p.b - p.a)::numeric, 4),
                round(count(*) / nullif(extract(epoch FROM p.b - p.a), 0))
           FROM (SELECT min(acked_at) a, max(acked_at) b FROM $tbl
                  WHERE id BETWEEN $lo AND $hi AND kind = '$kind') p, $tbl x
          WHERE x.id >= $lo AND x.acked_at BETWEEN p.a AND p.b
          GROUP BY p.a, p.b" | tr '|' ' '
}

alive() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

if want R1; then
    R1_T=$((R1_ROWS / R1_RATE))
    R1_OPTS="-c synchronous_commit=$R1_SYNC -c delivery_outbox.notify=off"
    log "R1: $R1_RATE rows/s into t.c_part and t.c_plain each for ${R1_T}s"
    RELAY_BG=() PROD_BG=()
    for w in part plain; do
        as_user_bg env PGOPTIONS="$R1_OPTS" pgbench -n -M prepared -c "$R1_RELAYS" -j 1 \
            -T $((R1_T + R1_TAIL)) -D tbl="t.c_$w" -l --aggregate-interval=1 \
            --log-prefix="$RAW/relay_$w" -f "$OUTBOX_SRC/bench/churn_relay.sql" parts \
            >"$RAW/pgbench.relay.$w" 2>&1
        RELAY_BG+=("$OUTBOX_BG_PID")
    done
    for w in part plain; do
        as_user_bg env PGOPTIONS="$R1_OPTS" pgbench -n -M prepared -c "$R1_PRODUCERS" -j 1 \
            -R "$R1_RATE" -T "$R1_T" -P 10 -D tbl="t.c_$w" -l --aggregate-interval=1 \
            --log-prefix="$RAW/prod_$w" -f "$OUTBOX_SRC/bench/p3_produce.sql" parts \
            >"$RAW/pgbench.prod.$w" 2>&1
        PROD_BG+=("$OUTBOX_BG_PID")
    done
    # the worker's CPU time over the churn (clock ticks from /proc)
    cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
    SWEEPER_T0=$(cpu_ticks "$SWEEPER")
    SECONDS=0
    next_sample=0 next_probe=$R1_PROBE_FIRST probe_no=0
    while alive "${RELAY_BG[@]}"; do
        if [ "$SECONDS" -ge "$next_sample" ]; then
            r1_sample
            next_sample=$((next_sample + R1_SAMPLE))
        fi
        if [ "$SECONDS" -ge "$next_probe" ] && [ "$SECONDS" -le $((R1_T - 15)) ] && alive "${PROD_BG[@]}"; then
            probe_no=$((probe_no + 1))
            t0=$SECONDS
            order="part plain"
            [ $((probe_no % 2)) = 0 ] && order="plain part"
            declare -A PR=()
            for w in $order; do PR[$w]=$(r1_probe "t.c_$w" "$probe_no"); done
            echo "$probe_no $t0 ${PR[part]} ${PR[plain]}" >>"$RAW/probes"
            log "R1 probe $probe_no at ${t0}s: t.c_part ${PR[part]##* } rows/s, t.c_plain ${PR[plain]##* } rows/s"
            next_probe=$((next_probe + R1_PROBE_EVERY))
        fi
        sleep 0.5
    done
    for p in "${PROD_BG[@]}" "${RELAY_BG[@]}"; do wait "$p" || true; done
    R1_WALL=$SECONDS
    SWEEPER_CPU=$(awk -v a="$SWEEPER_T0" -v b="$(cpu_ticks "$SWEEPER")" -v hz="$(getconf CLK_TCK)" -v t="$R1_WALL" \
        'BEGIN { printf "%.1f s of CPU, %.1f%% of one core", (b - a) / hz, 100 * (b - a) / hz / t }')
    # what is left: open rows, and each partition's rows
    R1_OPEN=$(sql "SELECT (SELECT count(*) FROM t.c_part WHERE delivery_state <> 'acked') || ' ' ||
                          (SELECT count(*) FROM t.c_plain WHERE delivery_state <> 'acked')")
    sql "SELECT c.relname, count(x.id), count(x.id) FILTER (WHERE x.delivery_state <> 'acked'),
                coalesce(round(extract(epoch FROM now() - max(x.acked_at))), -1)
           FROM pg_partition_tree('t.c_part') p JOIN pg_class c ON c.oid = p.relid
           LEFT JOIN t.c_part x ON x.tableoid = p.relid
          WHERE p.isleaf GROUP BY c.relname ORDER BY c.relname" | tr '|' ' ' >"$RAW/left"
    R1_LAST=$(sql "SELECT pg_sequence_last_value(pg_get_serial_sequence('t.c_part', 'id'))")
fi

# --- the summary ------------------------------------------------------------

say ""
say "delivery_outbox partitioned-outbox bench, PostgreSQL $("$PG_CONFIG" --version | cut -d' ' -f2), $(nproc) cores"
say "command: bench/partitions.sh (BENCH_PARTS=\"$BENCH_PARTS\"); commit $COMMIT, $(date -u '+%Y-%m-%d %H:%M UTC')"
say "extension library $SO_ID (md5, mtime; preloaded at the cluster's start); server $PG_BINDIR"
say "load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg); run took $(($(date +%s) - BENCH_START)) s"

# verdict WHAT VALUE OP TARGET DETAIL
verdict()
{
    awk -v what="$1" -v r="$2" -v op="$3" -v t="$4" -v d="$5" 'BEGIN {
        ok = (op == ">=") ? (r >= t) : (r <= t)
        printf "%s  %s = %.2f (target %s %s)  %s\n", (ok ? "PASS" : "FAIL"), what, r, op, t, d }' |
        tee -a "$SUMMARY"
}
# the awk function med(a, n): the median of a[1..n]
MED='function med(a, n,   i, j, v, s) {
         for (i = 1; i <= n; i++) s[i] = a[i]
         for (i = 2; i <= n; i++) { v = s[i]; for (j = i - 1; j >= 1 && s[j] > v; j--) s[j + 1] = s[j]; s[j + 1] = v }
         return (n % 2) ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2 }'

# claim_report FILE PART: a claim + ack cell (R2, R3) of t.q_plain and
# t.PART, its medians to the summary and "ratio median lo hi" to FILE.report
claim_report()
{
    awk -v part="$2" "$MED"'
        { rps[$1, $2] = $3; per[$1, $2] = $4; n = ($1 > n) ? $1 : n }
        END {
            for (w = 1; w <= 2; w++) {
                name = (w == 1) ? "q_plain" : part; line = ""
                for (r = 1; r <= n; r++) { v[r] = rps[r, name]; pc[r] = per[r, name]; line = line " " rps[r, name] }
                printf "  t.%-8s median %6.0f rows/s, %.1f rows/claim (rounds:%s)\n", name, med(v, n), med(pc, n), line
            }
            lo = 1e9; hi = 0
            for (r = 1; r <= n; r++) { q[r] = rps[r, part] / rps[r, "q_plain"]; lo = (q[r] < lo) ? q[r] : lo; hi = (q[r] > hi) ? q[r] : hi }
            printf "ratio %.4f %.2f %.2f\n", med(q, n), lo, hi
        }' "$1" >"$1.report"
    grep -v '^ratio ' "$1.report" | tee -a "$SUMMARY"
}

if want R2 && [ -s "$RAW/r2" ]; then
    say "R2: claim 100 + ack in one transaction, $R2_CLIENTS clients, $R2_CLAIMS claims per run, $ROUNDS rounds ABBA; t.q_plain and t.q_part (partition_rows $R2_PARTITION_ROWS): $R2_ROWS pending rows over 100 recipients, reloaded before each run"
    claim_report "$RAW/r2" q_part
    read -r _ q lo hi < <(grep '^ratio ' "$RAW/r2.report")
    verdict "R2 partitioned/unpartitioned claim+ack rows/s, $R2_CLIENTS clients" "$q" ">=" 0.8 "(rounds $lo-$hi)"
fi

if want R3 && [ -s "$RAW/r3" ]; then
    say "R3: claim $R3_CLAIM + ack in one transaction, $R3_CLIENTS clients, $R3_CLAIMS claims per run, $ROUNDS rounds ABBA; t.q_plain and t.q_part3 (partition_rows $R3_PARTITION_ROWS): $R3_ROWS pending rows over 100 recipients, reloaded before each run"
    claim_report "$RAW/r3" q_part3
    read -r _ q lo hi < <(grep '^ratio ' "$RAW/r3.report")
    verdict "R3 partitioned/unpartitioned claim+ack rows/s, $R3_CLIENTS clients" "$q" ">=" 0.8 "(rounds $lo-$hi)"
fi

if want R1 && [ -s "$RAW/samples" ]; then
    say "R1: churn, $R1_RATE rows/s into each outbox for ${R1_T}s ($R1_ROWS rows each, plus the probes), side by side; $R1_PRODUCERS producers (outbox_enqueue) and $R1_RELAYS relays (claim 100 + ack) per outbox; synchronous_commit=$R1_SYNC, notify=off; retain_acked '$RETAIN', sweep_interval $SWEEP_INTERVAL, autovacuum on (defaults); t.c_part partition_rows $PARTITION_ROWS"
    # one full partition's worth: the largest partition seen
    WORTH=$(awk '$3 > m { m = $3 } END { print (m > 0) ? m : 1 }' "$RAW/leaves")
    say "  size (MB, table + indexes + TOAST; partitions; live/dead tuples; pending rows) every ${R1_PRINT_EVERY}s; one partition's worth = the largest partition seen = $(awk -v w="$WORTH" 'BEGIN { printf "%.1f MB", w / 1048576 }')"
    awk -v every="$R1_PRINT_EVERY" -v step="$R1_SAMPLE" '
        { t = $1; s[t, $2] = $4; nparts[t, $2] = $3; live[t, $2] = $6; dead[t, $2] = $7; pend[t, $2] = $9
          if (!(t in seen)) { seen[t] = 1; ts[++n] = t } }
        END {
            printf "  %6s  %-40s  %s\n", "t (s)", "t.c_part", "t.c_plain"
            last = -every
            for (i = 1; i <= n; i++) {
                t = ts[i]
                if (t - last < every - step / 2 && i < n) continue
                last = t
                printf "  %6d  %7.1f MB %2d parts %7d/%-7d %6d  %7.1f MB %8d/%-8d %6d\n", t,
                    s[t, "t.c_part"] / 1048576, nparts[t, "t.c_part"], live[t, "t.c_part"], dead[t, "t.c_part"], pend[t, "t.c_part"],
                    s[t, "t.c_plain"] / 1048576, live[t, "t.c_plain"], dead[t, "t.c_plain"], pend[t, "t.c_plain"]
            }
        }' "$RAW/samples" | tee -a "$SUMMARY"
    read -r pmax pmax_t cmax cmax_t cend < <(awk '
        $2 == "t.c_part" && $4 > pm { pm = $4; pt = $1 }
        $2 == "t.c_plain" { if ($4 > cm) { cm = $4; ct = $1 }; ce = $4 }
        END { print pm + 0, pt + 0, cm + 0, ct + 0, ce + 0 }' "$RAW/samples")
    say "  largest: t.c_part $(awk -v a="$pmax" -v w="$WORTH" 'BEGIN { printf "%.1f MB = %.2f partitions", a / 1048576, a / w }') at ${pmax_t}s; t.c_plain $(awk -v a="$cmax" -v w="$WORTH" 'BEGIN { printf "%.1f MB = %.2f partitions", a / 1048576, a / w }') at ${cmax_t}s, $(awk -v a="$cend" 'BEGIN { printf "%.1f MB", a / 1048576 }') at the end"
    verdict "R1 t.c_part largest size / one partition's worth" "$(awk -v a="$pmax" -v w="$WORTH" 'BEGIN { print (w > 0) ? a / w : 99 }')" "<=" 3 \
        "(t.c_plain: $(awk -v a="$cmax" -v w="$WORTH" 'BEGIN { printf "%.2f", (w > 0) ? a / w : 0 }'))"
    if [ -s "$RAW/probes" ]; then
        say "  claim+ack probes: $R1_PROBE_ROWS rows enqueued in one batch, rows/s the relays acked from the first to the last ack of a probe row:"
        awk '{ printf "  probe %2d at %4ds: t.c_part %6d rows/s (%d rows in %.3fs), t.c_plain %6d rows/s (%d rows in %.3fs)\n",
                      $1, $2, $5, $3, $4, $8, $6, $7 }' "$RAW/probes" | tee -a "$SUMMARY"
        read -r ps pe cs ce < <(awk -v k="$R1_PROBE_AVG" "$MED"'
            { p[NR] = $5; c[NR] = $8 }
            END {
                k = (k > NR / 2) ? int(NR / 2) : k; if (k < 1) k = 1
                for (i = 1; i <= k; i++) { a[i] = p[i]; b[i] = p[NR - k + i]; x[i] = c[i]; y[i] = c[NR - k + i] }
                print med(a, k), med(b, k), med(x, k), med(y, k)
            }' "$RAW/probes")
        say "  start (median of the first $R1_PROBE_AVG probes) / end (of the last $R1_PROBE_AVG): t.c_part $ps / $pe rows/s, t.c_plain $cs / $ce rows/s"
        verdict "R1 t.c_part claim+ack throughput end/start" "$(awk -v a="$pe" -v b="$ps" 'BEGIN { print a / b }')" ">=" 0.9 \
            "(t.c_plain: $(awk -v a="$ce" -v b="$cs" 'BEGIN { printf "%.2f", a / b }'); t.c_part/t.c_plain at the start $(awk -v a="$ps" -v b="$cs" 'BEGIN { printf "%.2f", a / b }'), at the end $(awk -v a="$pe" -v b="$ce" 'BEGIN { printf "%.2f", a / b }'))"
    fi
    for w in part plain; do
        f=$RAW/pgbench.prod.$w
        aborted=$(grep -c 'client [0-9]* aborted' "$f" || true)
        worst=$(cat "$RAW"/prod_"$w".* 2>/dev/null | awk '$6 > m { m = $6 } $6 > 100000 { slow++ } END { printf "%.1f ms, %d s with a transaction over 100 ms", m / 1000, slow }')
        rworst=$(cat "$RAW"/relay_"$w".* 2>/dev/null | awk '$6 > m { m = $6 } $6 > 100000 { slow++ } END { printf "%.1f ms, %d s with one over 100 ms", m / 1000, slow }')
        say "  t.c_$w producers: $(awk '/^number of transactions actually processed/ { n = $6 } /^tps = / { t = $3 } /^rate limit schedule lag/ { l = $6; lm = $8; sub(/\)$/, "", lm) } END { printf "%s rows, %.0f tx/s, schedule lag avg %s ms (max %s)", n, t, l, lm }' "$f"); worst transaction $worst; $aborted aborted clients$( [ "$aborted" = 0 ] || echo ": $(grep -m1 -iE 'error' "$f")")"
        say "  t.c_$w relays: $(awk '/^tps = / { printf "%.0f claims/s", $3 }' "$RAW/pgbench.relay.$w"); worst transaction $rworst; $(grep -c 'client [0-9]* aborted' "$RAW/pgbench.relay.$w" || true) aborted clients$(grep -m1 -iE 'error' "$RAW/pgbench.relay.$w" | sed 's/^/: /' || true)"
    done
    say "  the worker (pid ${SWEEPER:-?}) over the churn: $SWEEPER_CPU"
    if [ -s "$RAW/bad_ids" ]; then
        say "  WRONG IDS: outbox_enqueue_batch returned ids that are not those of its rows (the probes use the rows' own ids):"
        sed 's/^/    /' "$RAW/bad_ids" | tee -a "$SUMMARY"
    fi
    if [ -s "$RAW/stragglers" ]; then
        say "  probe rows not acked about 5 s after their batch (t, outbox, partition, state, rows, ids, attempts, s since the first was delivered, pending rows above the probe):"
        sed 's/^/    /' "$RAW/stragglers" | tee -a "$SUMMARY"
    fi
    say "  rows not acked at the end: t.c_part ${R1_OPEN% *}, t.c_plain ${R1_OPEN#* }; t.c_part's last id $R1_LAST"
    # how long each fully drawn partition lingered: from the first sample in
    # which its last id was drawn to the first in which it was gone
    say "  partitions of t.c_part: seen $(awk '{ print $2 }' "$RAW/leaves" | sort -u | wc -l), at the end $(wc -l <"$RAW/left") ($(awk '{ printf "%s%s: %d rows, %d open, newest ack %ss ago", (NR > 1 ? "; " : ""), $1, $2, $3, $4 }' "$RAW/left"))"
    awk -v P="$PARTITION_ROWS" -v step="$R1_SAMPLE" '
        FNR == NR { if ($2 == "t.c_part") { ts[++n] = $1; last[$1] = $8 }; next }
        { present[$1, $2] = 1; names[$2] = 1 }
        END {
            for (nm in names) {
                if (!match(nm, /_p[0-9]+$/)) continue
                k = substr(nm, RSTART + 2) + 0; upper = (k + 1) * P
                full = -1; gone = -1; was = 0
                for (i = 1; i <= n; i++) {
                    t = ts[i]
                    if (full < 0 && last[t] >= upper) full = t
                    if (present[t, nm]) was = 1
                    else if (was && gone < 0) gone = t
                }
                if (full < 0) continue
                if (gone < 0) { kept++; continue }
                d = gone - full; cnt++; sum += d; if (d > max) max = d
            }
            printf "  fully drawn partitions: %d dropped, %s s on average (max %d s) from the first sample with their last id drawn to the first without them (samples every %d s); %d fully drawn still there at the end\n",
                cnt, (cnt ? sprintf("%.0f", sum / cnt) : "-"), max, step, kept
        }' "$RAW/samples" "$RAW/leaves" | tee -a "$SUMMARY"
    waits=$(grep -c 'still waiting for' "$OUTBOX_LOG" || true)
    say "  server log: $waits lock waits over 50 ms, $(grep -c 'ERROR:' "$OUTBOX_LOG" || true) ERROR lines, autovacuum runs: t.c_plain $(grep -c 'automatic vacuum of table "parts.t.c_plain"' "$OUTBOX_LOG" || true), t.c_part's partitions $(grep -c 'automatic vacuum of table "parts.t.c_part_p' "$OUTBOX_LOG" || true)"
    if [ "$waits" != 0 ]; then
        grep 'still waiting for' "$OUTBOX_LOG" | sed -E 's/^.*(process [0-9]+ )/\1/; s/process [0-9]+/process N/g; s/after [0-9.]+ ms/after X ms/; s/transaction [0-9]+/transaction X/g; s/relation [0-9]+/relation R/' |
            sort | uniq -c | sort -rn | head -5 | sed 's/^/    /' | tee -a "$SUMMARY"
    fi
    grep 'ERROR:' "$OUTBOX_LOG" | sed -E 's/^[^]]*\] //; s/^.*ERROR: /ERROR: /' | sort | uniq -c | sort -rn | head -5 | sed 's/^/    /' | tee -a "$SUMMARY" || true
    say "  run: ${R1_WALL}s of churn"
fi

mkdir -p "$BENCH_DIR/out"
OUT_FILE=$BENCH_DIR/out/partitions-$(date +%Y%m%d-%H%M%S).txt
cp "$SUMMARY" "$OUT_FILE"
[ "${KEEP_TMP:-0}" = 1 ] && cp -r "$RAW" "$BENCH_DIR/out/partitions-raw-$(date +%Y%m%d-%H%M%S)"
log "summary written to $OUT_FILE; total $(($(date +%s) - BENCH_START)) s"
