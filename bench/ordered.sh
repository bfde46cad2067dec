#!/usr/bin/env bash
#
# bench/ordered.sh -- what ordered delivery costs relays and producers
#
# Four measurements, each side by side in one run (BENCH_PARTS picks):
#
#   O1  claim 100 + ack of the claimed ids in one transaction
#       (bench/o1_claim_ack.sql), RELAY_CLIENTS relay clients, on two outboxes
#       loaded with the same O1_PENDING pending rows over O1_RECIPIENTS
#       recipients: t.plain (unordered) and t.ord (ordered).  Each run makes
#       CLAIMS claims (in all, over its clients) on a freshly loaded table,
#       so about half the rows are claimed and none runs dry.  Rows/s =
#       tps x rows claimed / claims.  Target: ordered/unordered >= 0.6.
#   O2  the same loop on t.big, ordered, O2_PENDING pending rows over
#       O2_RECIPIENTS recipients (rows interleaved: recipient varies fastest),
#       topped up before each run to O2_PENDING / O2_RECIPIENTS pending rows
#       per recipient (acked rows deleted, VACUUM).  Its runs are interleaved
#       with O1's: rounds run plain, ord, big (odd) or big, ord, plain
#       (even), for each number of clients.  Target: rows/s >= 0.8 x O1's
#       ordered rows/s, paired within each round.
#   O3  end-to-end latency on an ordered outbox (the default one, so that
#       bench/relay.c's relay loop can be used: LISTEN, claim 100 / ack in
#       the next transaction, again while a full batch comes back, then wait
#       for a wake-up): O3_CLIENTS producers at O3_RATE rows/s over 100
#       recipients for O3_T s (bench/o3_enqueue.sql, notify = commit), with
#       and without a session that has enqueued one row for recipient
#       'held' in a transaction it keeps open for the whole run; O3_ROUNDS
#       rounds, the order of O3_MODES reversed every other round.  Latency
#       = acked_at - created_at of the other recipients' rows, the first
#       O3_WARMUP_MS of each run left out.  Target: their p99 with the open
#       transaction (held) <= 1.10 x without (none).  References, without
#       a target: xact (an open transaction with an xid that wrote nothing
#       to the outbox: the same MVCC horizon as held, no held recipient),
#       unordered and unordered_held (none and held with the default
#       outbox unordered for the run).  Then a diagnostic, not timed: the
#       time and buffers of one claim of 100 after O3D_ROWS rows went
#       through an outbox (enqueue 100, claim 100 + ack, repeated), with
#       and without an open transaction, on t.d_plain and t.d_ord.
#   O4  enqueue throughput (bench/o4_enqueue.sql), O4_CLIENTS clients, into
#       t.e_plain (unordered) and t.e_ord (ordered), ROUNDS rounds ABBA of
#       O4_T s each, in each O4_CELLS cell (synchronous_commit:notify).
#       Target: ordered/unordered >= 0.95.
#
# Each ratio is paired: the two workloads' ratio within each round (they ran
# seconds apart), then the median over the rounds; the lowest and highest
# round are shown.  The bench reports; it exits 0 whatever the numbers say.
# The summary (one PASS/FAIL line per target) is also written to
# bench/out/ordered-DATE.txt.  About 6.5 minutes on 2 cores.
#
# Usage (as root, like run.sh):  bench/ordered.sh
# Knobs: BENCH_PARTS ("O1 O2 O3 O4"; O2 needs O1), RELAY_CLIENTS ("2 4"),
# ROUNDS (4), O1_PENDING (200000), O1_RECIPIENTS (100), CLAIMS (1000),
# O2_PENDING (1000000), O2_RECIPIENTS (10000), O3_RATE (1000),
# O3_CLIENTS (8), O3_T (10), O3_ROUNDS (4), O3_WARMUP_MS (500),
# O3_MODES ("none held xact unordered unordered_held"), O3D_ROWS ("5000 20000"),
# O4_CLIENTS (16), O4_T (3), O4_CELLS ("on:commit on:deferred off:deferred"),
# BENCH_PORT (5472), BENCH_NO_BUILD=1, KEEP_TMP=1.
set -euo pipefail
OUTBOX_PORT=${BENCH_PORT:-5472}
OUTBOX_QUIET=1
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

BENCH_PARTS=${BENCH_PARTS:-O1 O2 O3 O4}
RELAY_CLIENTS=${RELAY_CLIENTS:-2 4}
ROUNDS=${ROUNDS:-4}
O1_PENDING=${O1_PENDING:-200000}
O1_RECIPIENTS=${O1_RECIPIENTS:-100}
CLAIMS=${CLAIMS:-1000}
O2_PENDING=${O2_PENDING:-1000000}
O2_RECIPIENTS=${O2_RECIPIENTS:-10000}
O3_RATE=${O3_RATE:-1000}
O3_CLIENTS=${O3_CLIENTS:-8}
O3_T=${O3_T:-10}
O3_ROUNDS=${O3_ROUNDS:-4}
O3_WARMUP_MS=${O3_WARMUP_MS:-500}
O3_MODES=${O3_MODES:-none held xact unordered unordered_held}
O3D_ROWS=${O3D_ROWS:-5000 20000}
O4_CLIENTS=${O4_CLIENTS:-16}
O4_T=${O4_T:-3}
O4_CELLS=${O4_CELLS:-on:commit on:deferred off:deferred}

want() { [[ " $BENCH_PARTS " == *" $1 "* ]]; }
if want O2 && ! want O1; then BENCH_PARTS="O1 $BENCH_PARTS"; fi

BENCH_START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
bench_setup libpq-dev
bench_build_extension
OUTBOX_EXTRA_CONF="
max_connections = 60
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 1h
# statistics are taken by the bench (VACUUM ANALYZE before each run), so
# that every table's are of the same age and no autovacuum runs during a run
autovacuum = off
shared_preload_libraries = 'delivery_outbox'
delivery_outbox.database = 'ordered'"
outbox_start_cluster
# the code this cluster runs: the library preloaded at its start
SO=$("$PG_CONFIG" --pkglibdir)/delivery_outbox.so
SO_ID="$(md5sum "$SO" | cut -c1-12), built $(date -u -r "$SO" '+%Y-%m-%d %H:%M:%S UTC')"
if want O3; then
    log "building bench/relay.c"
    run_logged "$OUTBOX_WORK/relay-build.log" \
        as_user cc -O2 -Wall -Wextra -o "$OUTBOX_WORK/relay" "$OUTBOX_SRC/bench/relay.c" \
        -I"$("$PG_CONFIG" --includedir)" -L"$("$PG_CONFIG" --libdir)" -lpq ||
        die "building bench/relay.c failed (needs libpq-dev)"
fi

# cpu_busy SECS: the machine's busy CPU share over SECS s, in percent (as in run.sh)
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
BUSY_BEFORE=$(cpu_busy 3)
COMMIT=$(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$OUTBOX_TOP" status --porcelain --untracked-files=no 2>/dev/null)" ] &&
    COMMIT="$COMMIT (with uncommitted changes)"
RAW=$OUTBOX_WORK/raw
mkdir -p "$RAW"
[ "$(id -u)" = 0 ] && chown "$OUTBOX_RUN_USER:" "$RAW"
SUMMARY=$RAW/summary
: >"$SUMMARY"

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
minmax() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f-%.2f", lo, hi }'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print "nan" }'; }
# verdict WHAT RATIO OP TARGET DETAIL: one summary line
verdict()
{
    awk -v what="$1" -v r="$2" -v op="$3" -v t="$4" -v d="$5" 'BEGIN {
        ok = (op == ">=") ? (r >= t) : (r <= t)
        printf "%s  %s = %.2f (target %s %s)  %s\n", (ok ? "PASS" : "FAIL"), what, r, op, t, d }' |
        tee -a "$SUMMARY"
}
sql() { as_user psql -X -q -At -v ON_ERROR_STOP=1 -d ordered -c "$1"; }
pg_tps() { awk '/^tps = / { print $3; exit }' "$1"; }
pg_done() { awk '/^number of transactions actually processed:/ { split($6, a, "/"); print a[1]; exit }' "$1"; }

as_user createdb ordered
# The default outbox is made ordered too (O3: bench/relay.c claims from it).
sql "CREATE EXTENSION delivery_outbox; CREATE SCHEMA t;
     SELECT outbox_create('t', 'plain'), outbox_create('t', 'ord'), outbox_create('t', 'big'),
            outbox_create('t', 'e_plain'), outbox_create('t', 'e_ord'),
            outbox_create('t', 'd_plain'), outbox_create('t', 'd_ord');
     SELECT outbox_configure(o, ordered => true)
       FROM unnest(ARRAY['t.ord', 't.big', 't.e_ord', 't.d_ord', 'delivery_outbox']::regclass[]) o" >/dev/null
# bulk loads send no wake-ups
LOADOPTS="SET synchronous_commit = off; SET delivery_outbox.notify = off; SET delivery_outbox.notify_queue_limit = 0;"

# --- O1 and O2: claim + ack -------------------------------------------------

# load_o1 TABLE: the same O1_PENDING pending rows, in a fresh table
load_o1()
{
    sql "TRUNCATE $1" >/dev/null
    sql "$LOADOPTS
         INSERT INTO $1 (recipient, kind, payload)
         SELECT 'agent:' || (g % $O1_RECIPIENTS), 'work', '\\x00010203'::bytea
           FROM generate_series(1, $O1_PENDING) g" >/dev/null
    sql "VACUUM ANALYZE $1" >/dev/null
}

# top_up_big: acked rows deleted, each recipient back to its share of
# O2_PENDING pending rows (new rows interleaved, recipient varying fastest)
top_up_big()
{
    local per=$((O2_PENDING / O2_RECIPIENTS))
    sql "DELETE FROM t.big WHERE delivery_state = 'acked'" >/dev/null
    sql "$LOADOPTS
         INSERT INTO t.big (recipient, kind, payload)
         SELECT r.recipient, 'work', '\\x00010203'::bytea
           FROM (SELECT 'agent:' || g AS recipient, $per - coalesce(c.n, 0) AS missing
                   FROM generate_series(0, $O2_RECIPIENTS - 1) g
                   LEFT JOIN (SELECT recipient, count(*) AS n FROM t.big GROUP BY recipient) c
                     ON c.recipient = 'agent:' || g) r,
                generate_series(1, r.missing) k
          ORDER BY k, r.recipient" >/dev/null
    sql "VACUUM ANALYZE t.big" >/dev/null
}

# run_claims TABLE CLIENTS TAG: one run of CLAIMS claims; prints "rows/s
# rows_per_claim tps" and leaves the pgbench output in RAW
run_claims()
{
    local tbl=$1 c=$2 out=$RAW/pgbench.$3
    as_user pgbench -n -M prepared -c "$c" -j 2 -t $((CLAIMS / c)) -D tbl="$tbl" \
        -f "$OUTBOX_SRC/bench/o1_claim_ack.sql" ordered >"$out" 2>&1 ||
        die "pgbench failed on $tbl (see $out)"
    local tps ndone rows left
    tps=$(pg_tps "$out")
    ndone=$(pg_done "$out")
    [ "$ndone" = $(((CLAIMS / c) * c)) ] || die "pgbench on $tbl made $ndone claims of $(((CLAIMS / c) * c)) (see $out)"
    IFS='|' read -r rows left < <(sql "SELECT count(*) FILTER (WHERE delivery_state = 'acked'),
                                              count(*) FILTER (WHERE delivery_state = 'delivered')
                                         FROM $tbl")
    [ "$left" = 0 ] || warn "$tbl: $left rows left delivered after a run"
    awk -v tps="$tps" -v rows="$rows" -v n="$ndone" 'BEGIN { printf "%.0f %.1f %.1f\n", tps * rows / n, rows / n, tps }'
}

if want O1; then
    if want O2; then
        log "O2: loading t.big, $O2_PENDING pending rows over $O2_RECIPIENTS recipients"
        top_up_big
    fi
    declare -A RPS=() PER=()
    for r in $(seq 1 "$ROUNDS"); do
        order="plain ord"
        want O2 && order="plain ord big"
        [ $((r % 2)) = 0 ] && order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
        for c in $RELAY_CLIENTS; do
            for w in $order; do
                if [ "$w" = big ]; then top_up_big; else load_o1 "t.$w"; fi
                read -r rps per tps < <(run_claims "t.$w" "$c" "$w.c$c.r$r")
                log "round $r, $c clients: t.$w $rps rows/s ($per rows/claim, $tps claims/s)"
                RPS[$w.$c.$r]=$rps
                PER[$w.$c.$r]=$per
            done
        done
    done
fi

# --- O3: latency beside an open transaction ---------------------------------

# open_session_pid NAME: the backend pid of the session of that
# application_name once it sleeps in its open transaction
open_session_pid()
{
    local i pid
    for i in $(seq 1 100); do
        pid=$(sql "SELECT pid FROM pg_stat_activity
                    WHERE application_name = '$1' AND query LIKE 'SELECT pg_sleep%'
                      AND state = 'active' AND backend_xid IS NOT NULL")
        [ -n "$pid" ] && { echo "$pid"; return 0; }
        sleep 0.1
    done
    return 1
}

# run_o3 MODE ROUND: one latency run; prints "p50 p99 max rows notes".
# MODE: none (no open transaction), held (a session's open transaction has
# enqueued a row for recipient 'held'), xact (a session's open transaction
# has a transaction id and wrote nothing: the same MVCC horizon as held,
# without a held recipient); unordered and unordered_held: none and held
# with the default outbox unordered for the run (references, no target).
run_o3()
{
    local mode=$1 tag=o3.$1.r$2 i
    sql "TRUNCATE delivery_outbox" >/dev/null
    local unordered=0 open=""
    [[ $mode == unordered* ]] && unordered=1
    [[ $mode == *held ]] && open=held
    [[ $mode == *xact ]] && open=xact
    [ "$unordered" = 1 ] && sql "SELECT outbox_configure('delivery_outbox', ordered => false)" >/dev/null
    as_user_bg env PGDATABASE=ordered PGOPTIONS='-c synchronous_commit=off' \
        "$OUTBOX_WORK/relay" relay delivery_outbox >"$RAW/relay.$tag" 2>&1
    local relay_bg=$OUTBOX_BG_PID relay_pid=""
    for i in $(seq 1 100); do
        relay_pid=$(awk '/^ready / { print $2; exit }' "$RAW/relay.$tag")
        [ -n "$relay_pid" ] && break
        kill -0 "$relay_bg" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$relay_pid" ] || die "the relay did not start: $(cat "$RAW/relay.$tag")"
    local held_bg="" held_id="" held_pid=""
    if [ -n "$open" ]; then
        # held: the open transaction enqueued a row for recipient 'held';
        # xact: it has a transaction id but wrote nothing to the outbox
        local what="SELECT 'xid=' || txid_current()"
        [ "$open" = held ] && what="SELECT 'held_id=' || outbox_enqueue('held', 'work', '\x01'::bytea)"
        printf '%s\n' "SET application_name = 'o3_open';" "BEGIN;" "$what;" "SELECT pg_sleep(3600);" \
            >"$RAW/open.$tag.sql"
        as_user_bg psql -X -q -At -d ordered -f "$RAW/open.$tag.sql" >"$RAW/open.$tag" 2>&1
        held_bg=$OUTBOX_BG_PID
        held_pid=$(open_session_pid o3_open) || die "the open transaction did not start: $(cat "$RAW/open.$tag")"
        held_id=$(sed -n 's/^held_id=//p' "$RAW/open.$tag")
    fi
    as_user pgbench -n -M prepared -c "$O3_CLIENTS" -j 2 -R "$O3_RATE" -T "$O3_T" \
        -f "$OUTBOX_SRC/bench/o3_enqueue.sql" ordered >"$RAW/pgbench.$tag" 2>&1 ||
        die "pgbench failed (see $RAW/pgbench.$tag)"
    # let the relay finish: every committed row acked, or 5 s
    for i in $(seq 1 50); do
        [ "$(sql "SELECT count(*) FROM delivery_outbox WHERE delivery_state <> 'acked'")" = 0 ] && break
        sleep 0.1
    done
    local horizon_note=""
    if [ -n "$open" ]; then
        # the open transaction still held its row back: the horizon stops below it
        [ "$open" = held ] &&
            horizon_note="; held row $held_id still open, horizon $(sql "SELECT outbox_horizon()") of max id $(sql "SELECT max(id) FROM delivery_outbox")"
        sql "SELECT pg_cancel_backend($held_pid)" >/dev/null
        wait "$held_bg" 2>/dev/null || true
    fi
    kill -TERM "$relay_pid" 2>/dev/null
    wait "$relay_bg" 2>/dev/null || true
    [ "$unordered" = 1 ] && sql "SELECT outbox_configure('delivery_outbox', ordered => true)" >/dev/null
    local stats
    stats=$(sql "
        WITH l AS (
            SELECT delivery_state, created_at, acked_at - created_at AS lat,
                   created_at >= min(created_at) OVER () + interval '$O3_WARMUP_MS ms' AS steady
              FROM delivery_outbox WHERE recipient <> 'held')
        SELECT round((1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY lat) FILTER (WHERE steady)))::numeric, 2),
               round((1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY lat) FILTER (WHERE steady)))::numeric, 2),
               round((1000 * extract(epoch FROM max(lat) FILTER (WHERE steady)))::numeric, 2),
               count(*) FILTER (WHERE steady),
               count(*) FILTER (WHERE delivery_state <> 'acked'),
               round((1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY lat) FILTER (WHERE steady AND q = 1)))::numeric, 2),
               round((1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY lat) FILTER (WHERE steady AND q = 4)))::numeric, 2)
          FROM (SELECT *, ntile(4) OVER (ORDER BY created_at) AS q FROM l) l" | tr '|' ' ')
    local p50 p99 max n open q1 q4
    read -r p50 p99 max n open q1 q4 <<<"$stats"
    local tps lag
    tps=$(pg_tps "$RAW/pgbench.$tag")
    lag=$(awk '/^rate limit schedule lag:/ { print $6; exit }' "$RAW/pgbench.$tag")
    echo "$p50 $p99 $max $n p50 in the first/last quarter $q1/$q4 ms; producers ${tps} tx/s, schedule lag avg ${lag:-?} ms; $open not acked; $(grep -m1 '^wakeups=' "$RAW/relay.$tag" || echo 'relay: no counters')$horizon_note"
}

if want O3; then
    declare -A O3P50=() O3P99=()
    for r in $(seq 1 "$O3_ROUNDS"); do
        order=$O3_MODES
        [ $((r % 2)) = 0 ] && order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
        for m in $order; do
            read -r p50 p99 max n notes < <(run_o3 "$m" "$r")
            log "O3 round $r, $m: p50 $p50 p99 $p99 max $max ms over $n rows; $notes"
            O3P50[$m.$r]=$p50
            O3P99[$m.$r]=$p99
            echo "O3 round $r $m: p50 $p50 p99 $p99 max $max ms, $n rows; $notes" >>"$RAW/o3.notes"
        done
    done

    # The diagnostic: what one claim costs after N rows went through, with
    # and without an open transaction keeping their dead versions visible
    # (buffers from EXPLAIN (ANALYZE, BUFFERS), which counts the claim's
    # own statements)
    o3d()
    {
        local tbl=$1 hold=$2 n=$3 bg="" pid="" i
        sql "TRUNCATE $tbl" >/dev/null
        sql "VACUUM $tbl" >/dev/null
        if [ "$hold" = yes ]; then
            as_user_bg psql -X -q -At -d ordered -c "SET application_name = 'o3d_open'" -c "BEGIN" \
                -c "SELECT txid_current()" -c "SELECT pg_sleep(3600)" >/dev/null 2>&1
            bg=$OUTBOX_BG_PID
            pid=$(open_session_pid o3d_open) || die "the O3 diagnostic's open transaction did not start"
        fi
        as_user psql -X -q -v ON_ERROR_STOP=1 -d ordered -c "SET synchronous_commit = off" -c "
             DO \$\$
             DECLARE ids bigint[];
             BEGIN
               FOR i IN 1..$((n / 100)) LOOP
                 PERFORM outbox_enqueue('agent:' || (g % 100), 'work', '\\x01'::bytea, outbox => '$tbl')
                    FROM generate_series(1, 100) g;
                 COMMIT;
                 LOOP
                   SELECT pg_catalog.array_agg(id) INTO ids FROM outbox_claim(100, outbox => '$tbl');
                   EXIT WHEN ids IS NULL;
                   PERFORM outbox_ack(ids, outbox => '$tbl');
                   COMMIT;
                 END LOOP;
               END LOOP;
             END \$\$" >/dev/null
        sql "SELECT outbox_enqueue('agent:' || (g % 100), 'work', '\\x01'::bytea, outbox => '$tbl')
               FROM generate_series(1, 100) g" >/dev/null
        local q="BEGIN; EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT count(*) FROM outbox_claim(100, outbox => '$tbl'); ROLLBACK;"
        as_user psql -X -q -At -d ordered -c "$q" -c "$q" -c "$q" 2>&1 |
            awk -v what="$tbl, $n rows, open transaction: $hold" '
                /Function Scan on outbox_claim/ { if (match($0, /rows=[0-9]+/)) rows = substr($0, RSTART + 5, RLENGTH - 5) }
                /Buffers: shared hit=/ && !b { match($0, /hit=[0-9]+/); b = substr($0, RSTART + 4, RLENGTH - 4) }
                /Execution Time:/ { t = $3; if (min == "" || t + 0 < min + 0) min = t; if (b + 0 > 0) buf = b; b = ""; n++ }
                END { printf "%-44s %7.2f ms, %6d buffers, %s rows claimed\n", what, min, buf, rows }'
        if [ -n "$pid" ]; then
            sql "SELECT pg_cancel_backend($pid)" >/dev/null
            wait "$bg" 2>/dev/null || true
        fi
    }
    log "O3 diagnostic: claims after $O3D_ROWS rows"
    for n in $O3D_ROWS; do
        for tbl in t.d_plain t.d_ord; do
            for hold in no yes; do
                o3d "$tbl" "$hold" "$n" | tee -a "$RAW/o3d"
            done
        done
    done
fi

# --- O4: producers --------------------------------------------------------

if want O4; then
    declare -A O4TPS=()
    for cell in $O4_CELLS; do
        sync=${cell%%:*}
        notify=${cell#*:}
        for r in $(seq 1 "$ROUNDS"); do
            if [ $((r % 2)) = 1 ]; then order="e_plain e_ord"; else order="e_ord e_plain"; fi
            for w in $order; do
                out=$RAW/pgbench.o4.$sync.$notify.$w.r$r
                as_user env PGOPTIONS="-c synchronous_commit=$sync -c delivery_outbox.notify=$notify" \
                    pgbench -n -M prepared -c "$O4_CLIENTS" -j 2 -T "$O4_T" -D tbl="t.$w" \
                    -f "$OUTBOX_SRC/bench/o4_enqueue.sql" ordered >"$out" 2>&1 ||
                    die "pgbench failed (see $out)"
                O4TPS[$cell.$w.$r]=$(pg_tps "$out")
                log "O4 $sync/$notify round $r: t.$w ${O4TPS[$cell.$w.$r]} tx/s"
            done
            sql "TRUNCATE t.e_plain, t.e_ord" >/dev/null
            sql "VACUUM t.e_plain, t.e_ord" >/dev/null
        done
    done
fi

# --- the summary ------------------------------------------------------------

BUSY_AFTER=$(cpu_busy 3)
{
    echo
    echo "delivery_outbox ordered-delivery bench, PostgreSQL $("$PG_CONFIG" --version | cut -d' ' -f2), $(nproc) cores"
    echo "command: bench/ordered.sh (BENCH_PARTS=\"$BENCH_PARTS\"); commit $COMMIT, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "extension library $SO_ID (md5, mtime; preloaded at the cluster's start); HEAD at the end $(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg); CPU busy with the bench idle: ${BUSY_BEFORE}% before, ${BUSY_AFTER}% after; run took $(($(date +%s) - BENCH_START)) s"
} | tee -a "$SUMMARY"

if want O1; then
    echo "O1/O2: claim 100 + ack in one transaction, $CLAIMS claims per run, $ROUNDS rounds; t.plain and t.ord: $O1_PENDING pending rows over $O1_RECIPIENTS recipients, reloaded before each run; t.big (ordered): $O2_PENDING over $O2_RECIPIENTS" | tee -a "$SUMMARY"
    for c in $RELAY_CLIENTS; do
        for w in plain ord big; do
            [ "$w" = big ] && ! want O2 && continue
            v=(); p=()
            for r in $(seq 1 "$ROUNDS"); do v+=("${RPS[$w.$c.$r]}"); p+=("${PER[$w.$c.$r]}"); done
            printf '  %d clients, t.%-5s median %6.0f rows/s, %s rows/claim (rounds: %s)\n' \
                "$c" "$w" "$(median "${v[@]}")" "$(median "${p[@]}")" "${v[*]}" | tee -a "$SUMMARY"
        done
    done
    for c in $RELAY_CLIENTS; do
        q=()
        for r in $(seq 1 "$ROUNDS"); do q+=("$(div "${RPS[ord.$c.$r]}" "${RPS[plain.$c.$r]}")"); done
        verdict "O1 ordered/unordered claim+ack rows/s, $c clients" "$(median "${q[@]}")" ">=" 0.6 "(rounds $(minmax "${q[@]}"))"
    done
    if want O2; then
        for c in $RELAY_CLIENTS; do
            q=()
            for r in $(seq 1 "$ROUNDS"); do q+=("$(div "${RPS[big.$c.$r]}" "${RPS[ord.$c.$r]}")"); done
            verdict "O2 ordered rows/s, $O2_RECIPIENTS recipients / $O1_RECIPIENTS, $c clients" "$(median "${q[@]}")" ">=" 0.8 "(rounds $(minmax "${q[@]}"))"
        done
    fi
fi

if want O3; then
    echo "O3: $O3_CLIENTS producers at $O3_RATE rows/s for ${O3_T}s into the default outbox (ordered), bench/relay.c; latency acked_at - created_at of the other recipients' rows, first $O3_WARMUP_MS ms left out; $O3_ROUNDS rounds ABBA" | tee -a "$SUMMARY"
    sed 's/^/  /' "$RAW/o3.notes" | tee -a "$SUMMARY"
    for m in $O3_MODES; do
        a=(); b=()
        for r in $(seq 1 "$O3_ROUNDS"); do a+=("${O3P50[$m.$r]}"); b+=("${O3P99[$m.$r]}"); done
        printf '  %-14s median p50 %s ms, p99 %s ms\n' "$m" "$(median "${a[@]}")" "$(median "${b[@]}")" | tee -a "$SUMMARY"
    done
    # o3_pair A B: the paired p99 and p50 ratios A/B: "p99 p99range p50 p50range"
    o3_pair()
    {
        local q=() q50=() r
        for r in $(seq 1 "$O3_ROUNDS"); do
            q+=("$(div "${O3P99[$1.$r]}" "${O3P99[$2.$r]}")")
            q50+=("$(div "${O3P50[$1.$r]}" "${O3P50[$2.$r]}")")
        done
        echo "$(median "${q[@]}") $(minmax "${q[@]}") $(median "${q50[@]}") $(minmax "${q50[@]}")"
    }
    has() { [[ " $O3_MODES " == *" $1 "* ]]; }
    if has none && has held; then
        read -r a b c d <<<"$(o3_pair held none)"
        verdict "O3 others' p99 with an open transaction holding 'held' / without" "$a" "<=" 1.10 \
            "(rounds $b; p50 $(printf '%.2f' "$c"), rounds $d)"
    fi
    info()
    {
        read -r a b c d <<<"$(o3_pair "$2" "$3")"
        printf 'info  O3 %s: p99 %.2f (rounds %s), p50 %.2f (rounds %s)\n' "$1" "$a" "$b" "$c" "$d" | tee -a "$SUMMARY"
    }
    has held && has xact && info "held / xact (what holding a recipient costs beyond an open transaction's MVCC horizon)" held xact
    has xact && has none && info "xact / none (an open transaction that wrote nothing to the outbox)" xact none
    has unordered && has none && info "ordered / unordered outbox, no open transaction" none unordered
    has unordered_held && has unordered && info "unordered outbox, held / none" unordered_held unordered
    if [ -s "$RAW/o3d" ]; then
        echo "O3 diagnostic: one claim of 100 (100 rows pending, one per recipient) after N rows were enqueued and drained (claim 100, ack) with or without an open transaction holding an xid (min of 3 claims, each rolled back):" | tee -a "$SUMMARY"
        sed 's/^/  /' "$RAW/o3d" | tee -a "$SUMMARY"
    fi
fi

if want O4; then
    echo "O4: outbox_enqueue, $O4_CLIENTS clients, ${O4_T}s x $ROUNDS rounds ABBA per cell (synchronous_commit/notify)" | tee -a "$SUMMARY"
    for cell in $O4_CELLS; do
        a=(); b=(); q=()
        for r in $(seq 1 "$ROUNDS"); do
            a+=("${O4TPS[$cell.e_plain.$r]}"); b+=("${O4TPS[$cell.e_ord.$r]}")
            q+=("$(div "${O4TPS[$cell.e_ord.$r]}" "${O4TPS[$cell.e_plain.$r]}")")
        done
        printf '  %s: unordered median %.0f tx/s (%s), ordered %.0f (%s)\n' "${cell/:/\/}" \
            "$(median "${a[@]}")" "${a[*]}" "$(median "${b[@]}")" "${b[*]}" | tee -a "$SUMMARY"
        verdict "O4 ordered/unordered enqueue tx/s, ${cell/:/\/}" "$(median "${q[@]}")" ">=" 0.95 "(rounds $(minmax "${q[@]}"))"
    done
fi

mkdir -p "$BENCH_DIR/out"
OUT_FILE=$BENCH_DIR/out/ordered-$(date +%Y%m%d-%H%M%S).txt
cp "$SUMMARY" "$OUT_FILE"
log "summary written to $OUT_FILE; total $(($(date +%s) - BENCH_START)) s"
