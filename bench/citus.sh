#!/usr/bin/env bash
#
# bench/citus.sh -- where the work of an outbox lands on Citus (issue 26)
#
# The same producers and relays on one plain node, on Level 1 (the outbox
# local on the coordinator, orders distributed) and on Level 2 (the outbox
# distributed and co-located with orders), with a coordinator and two
# workers on loopback.  On a machine where every node shares the same
# cores throughput cannot scale, so it reports where the work lands: each
# node's processes' CPU time (/proc: the postmaster, its live children,
# and its reaped children's totals) over the producers' window, per row
# delivered in that window, and for Level 2 each worker's share of those
# rows.
#
# Producers: pgbench -n -M prepared -c 4, synchronous_commit on, each
# transaction an INSERT INTO orders and one outbox_enqueue for that tenant
# (one of 100, uniform), on the coordinator (the plain node).  Relays:
# bench/relay.c "relay ... ackclaim async" (outbox_ack_claim, the relay's
# session with synchronous_commit off): two on the plain node and on the
# coordinator for Level 1; for Level 2 one per shard, on the worker node
# holding it (outbox => the shard, LISTEN there).  notify = commit
# everywhere (Level 2's rows notify from the workers).
#
# Usage: bench/citus.sh               3 rounds of 15 s per setup, ~5 minutes
#        QUICK=1 bench/citus.sh       1 round of 8 s, ~2 minutes
# Knobs: CITUS_ROUNDS, CITUS_T (seconds per window), CITUS_CLIENTS (4),
#        CITUS_SHARDS (4), CITUS_PORT (5480: the plain node; the coordinator
#        and workers the next three), PG_CONFIG, BENCH_NO_BUILD=1, KEEP_TMP=1.
# Needs Citus: scripts/citus.sh builds it from the vendored tarball (cached);
# without it the script says so and exits 0.  As root (or with sudo), like
# the other benches; the clusters run as the unprivileged user, on
# 127.0.0.1 and a unix socket only.  It reports, it never fails: exit 0
# whatever the numbers.

set -uo pipefail

OUTBOX_QUIET=1
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "$0")" && pwd)/common.sh"

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
    CITUS_ROUNDS=${CITUS_ROUNDS:-1}
    CITUS_T=${CITUS_T:-8}
else
    CITUS_ROUNDS=${CITUS_ROUNDS:-3}
    CITUS_T=${CITUS_T:-15}
fi
CITUS_CLIENTS=${CITUS_CLIENTS:-4}
CITUS_SHARDS=${CITUS_SHARDS:-4}
CITUS_PORT=${CITUS_PORT:-5480}
BENCH_START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

bench_setup libpq-dev
bench_build_extension

log "Citus for $PG_CONFIG (scripts/citus.sh)"
CFG=$(as_root bash "$OUTBOX_TOP/scripts/citus.sh" --copy "$OUTBOX_WORK/citus-pg" "$PG_CONFIG" \
      2>"$OUTBOX_WORK/citus-build.log" | tail -n 1)
rc=${PIPESTATUS[0]}
if [ "$rc" = 2 ]; then
    log "no Citus source here (scripts/citus.sh): nothing to measure"
    exit 0
elif [ "$rc" != 0 ] || [ ! -x "$CFG" ]; then
    tail -n 20 "$OUTBOX_WORK/citus-build.log" >&2
    log "Citus could not be built: nothing measured"
    exit 0
fi
chown -R "$OUTBOX_RUN_USER" "$OUTBOX_WORK/citus-pg"
as_user make -C "$OUTBOX_SRC" PG_CONFIG="$CFG" install >"$OUTBOX_WORK/install-citus.log" 2>&1 ||
    die "installing the extension into the Citus copy failed (see $OUTBOX_WORK/install-citus.log)"
PG_CONFIG=$CFG
PG_BINDIR=$("$CFG" --bindir)

log "building bench/relay.c"
as_user gcc -O2 -Wall -Wextra -o "$OUTBOX_WORK/relay" "$OUTBOX_SRC/bench/relay.c" \
    -I"$("$CFG" --includedir)" -L"$("$CFG" --libdir)" -lpq ||
    die "building bench/relay.c failed"

SOCK=$OUTBOX_WORK/sock
mkdir -p "$SOCK" && chown "$OUTBOX_RUN_USER" "$SOCK"
TICK=$(getconf CLK_TCK)
NODES=()          # names of the running nodes
declare -A PORT=()

# node_start NAME PORT PRELOAD
node_start()
{
    local name=$1 port=$2 preload=$3 dir=$OUTBOX_WORK/$1
    as_user initdb -D "$dir" -A trust -E UTF8 --locale=C --no-sync >"$OUTBOX_WORK/initdb-$name.log" 2>&1 ||
        die "initdb $name failed"
    cat >>"$dir/postgresql.conf" <<EOF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCK'
shared_preload_libraries = '$preload'
max_connections = 100
max_prepared_transactions = 40
shared_buffers = 256MB
max_wal_size = 4GB
checkpoint_timeout = 1h
citus.node_conninfo = 'sslmode=disable'
delivery_outbox.database = 'bench'
EOF
    [ "$preload" = delivery_outbox ] && sed -i '/^citus\./d' "$dir/postgresql.conf"
    as_user pg_ctl -D "$dir" -l "$OUTBOX_WORK/$name.log" -w -t 60 start >/dev/null 2>&1 ||
        die "node $name did not start (log: $OUTBOX_WORK/$name.log)"
    NODES+=("$name")
    PORT[$name]=$port
}

node_stop_all()
{
    local name
    for name in "${NODES[@]}"; do
        as_user pg_ctl -D "$OUTBOX_WORK/$name" -m fast -w -t 60 stop >/dev/null 2>&1
    done
    NODES=()
}

# nsql NAME SQL: one statement's rows, unaligned
nsql()
{
    local name=$1
    shift
    as_user psql -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK" -p "${PORT[$name]}" -d bench -c "$*"
}

# node_cpu NAME: the node's CPU time so far, in ms (postmaster and its reaped
# children from /proc/PID/stat fields 14-17, and its live children's 14-15)
node_cpu()
{
    local pm ticks=0 child
    pm=$(head -n 1 "$OUTBOX_WORK/$1/postmaster.pid")
    ticks=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pm/stat")
    for child in $(ps --ppid "$pm" -o pid=); do
        [ -r "/proc/$child/stat" ] || continue
        ticks=$(( ticks + $(awk '{ print $14 + $15 }' "/proc/$child/stat" 2>/dev/null || echo 0) ))
    done
    echo $(( ticks * 1000 / TICK ))
}

RELAYS=()
outbox_on_exit()
{
    local pid
    for pid in "${RELAYS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    node_stop_all
}

# relay_start NAME OUTBOX: a relay on node NAME for OUTBOX
relay_start()
{
    local out=$OUTBOX_WORK/relay.$1.${#RELAYS[@]}.out
    as_user_bg env PGHOST="$SOCK" PGPORT="${PORT[$1]}" PGDATABASE=bench RELAY_OUTBOX="$2" \
        "$OUTBOX_WORK/relay" relay delivery_outbox ackclaim async >"$out" 2>&1
    RELAYS+=("$OUTBOX_BG_PID")
    local i
    for i in $(seq 1 100); do
        grep -q '^ready' "$out" 2>/dev/null && return 0
        sleep 0.1
    done
    die "relay on $1 for $2 did not start: $(head -c 300 "$out")"
}

relays_stop()
{
    local pid
    for pid in "${RELAYS[@]}"; do kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
    RELAYS=()
}

# the producers' script for schema S
produce_script()
{
    cat >"$OUTBOX_WORK/produce_$1.sql" <<EOF
\\set r random(1, 100)
BEGIN;
INSERT INTO $1.orders (tenant_id, amount) VALUES ('t' || :r, 42.00);
SELECT outbox_enqueue('agent:' || :r, 'order.created', '\\x00112233445566778899aabbccddeeff', tenant_id => 't' || :r, outbox => '$1.ob');
END;
EOF
    chown "$OUTBOX_RUN_USER" "$OUTBOX_WORK/produce_$1.sql"
}

# measure SETUP SCHEMA NODE...: one window of producers on the first node;
# prints "tps|rows|cpu_ms per node..."
measure()
{
    local setup=$1 schema=$2
    shift 2
    local nodes=("$@") t0 t1 tps rows n before=() after=() i out
    for n in "${nodes[@]}"; do before+=("$(node_cpu "$n")"); done
    t0=$(nsql "${nodes[0]}" "SELECT clock_timestamp()")
    out=$(as_user pgbench -n -M prepared -c "$CITUS_CLIENTS" -j 2 -T "$CITUS_T" \
          -h "$SOCK" -p "${PORT[${nodes[0]}]}" -f "$OUTBOX_WORK/produce_$schema.sql" bench 2>&1)
    t1=$(nsql "${nodes[0]}" "SELECT clock_timestamp()")
    for n in "${nodes[@]}"; do after+=("$(node_cpu "$n")"); done
    tps=$(sed -nE 's/^tps = ([0-9.]+).*/\1/p' <<<"$out" | head -n 1)
    # the backlog drained, the rows delivered inside the window counted
    for i in $(seq 1 600); do
        [ "$(nsql "${nodes[0]}" "SELECT count(*) FROM $schema.ob WHERE delivery_state <> 'acked'")" = 0 ] && break
        sleep 0.1
    done
    rows=$(nsql "${nodes[0]}" "SELECT count(*) FROM $schema.ob
                               WHERE acked_at >= '$t0' AND acked_at < '$t1'")
    local line="${tps:-0}|$rows"
    for i in "${!nodes[@]}"; do line+="|$(( after[i] - before[i] ))"; done
    # Level 2: each worker's share, from its own shards
    if [ "$setup" = level2 ]; then
        for n in worker1 worker2; do
            local s total=0
            for s in $(nsql "$n" "SELECT outbox_shards('$schema.ob')"); do
                total=$(( total + $(nsql "$n" "SELECT count(*) FROM $s WHERE acked_at >= '$t0' AND acked_at < '$t1'") ))
            done
            line+="|$total"
        done
    fi
    echo "$line"
}

RESULTS=$OUTBOX_WORK/results
: >"$RESULTS"

# rounds SETUP SCHEMA NODE...: CITUS_ROUNDS windows, each recorded
rounds()
{
    local setup=$1 r line
    for r in $(seq 1 "$CITUS_ROUNDS"); do
        line=$(measure "$@")
        echo "$setup|$r|$line" >>"$RESULTS"
        log "$setup round $r: $line"
    done
}

# --- the plain node ----------------------------------------------------------
log "plain: one node"
node_start plain "$CITUS_PORT" delivery_outbox
as_user createdb -h "$SOCK" -p "$CITUS_PORT" bench
nsql plain "CREATE EXTENSION delivery_outbox; CREATE SCHEMA app;
    CREATE TABLE app.orders (tenant_id text NOT NULL, id bigserial, amount numeric NOT NULL,
                             PRIMARY KEY (tenant_id, id));
    SELECT outbox_create('app', 'ob')" >/dev/null || die "plain: setup failed"
produce_script app
relay_start plain app.ob
relay_start plain app.ob
rounds plain app plain
relays_stop
node_stop_all

# --- Citus: a coordinator and two workers --------------------------------------
log "Citus: a coordinator and two workers"
node_start coordinator $((CITUS_PORT + 1)) 'citus, delivery_outbox'
node_start worker1 $((CITUS_PORT + 2)) 'citus, delivery_outbox'
node_start worker2 $((CITUS_PORT + 3)) 'citus, delivery_outbox'
for n in coordinator worker1 worker2; do
    as_user createdb -h "$SOCK" -p "${PORT[$n]}" bench
    nsql "$n" "CREATE EXTENSION citus" >/dev/null
done
nsql coordinator "SELECT citus_set_coordinator_host('127.0.0.1', ${PORT[coordinator]});
    SELECT citus_add_node('127.0.0.1', ${PORT[worker1]});
    SELECT citus_add_node('127.0.0.1', ${PORT[worker2]})" >/dev/null || die "Citus: adding the nodes failed"
# committed before outbox_distribute, which grants on the workers over
# connections of their own
nsql coordinator "CREATE EXTENSION delivery_outbox" >/dev/null || die "Citus: CREATE EXTENSION failed"
nsql coordinator "CREATE SCHEMA l1; CREATE SCHEMA l2;
    CREATE TABLE l1.orders (tenant_id text NOT NULL, id bigserial, amount numeric NOT NULL,
                            PRIMARY KEY (tenant_id, id));
    SELECT create_distributed_table('l1.orders', 'tenant_id', shard_count => $CITUS_SHARDS);
    SELECT outbox_create('l1', 'ob');
    CREATE TABLE l2.orders (tenant_id text NOT NULL, id bigserial, amount numeric NOT NULL,
                            PRIMARY KEY (tenant_id, id));
    SELECT create_distributed_table('l2.orders', 'tenant_id', shard_count => $CITUS_SHARDS);
    SELECT outbox_create('l2', 'ob');
    SELECT count(*) FROM outbox_distribute('l2.ob', 'l2.orders')" >/dev/null ||
    die "Citus: setup failed (logs in $OUTBOX_WORK)"
produce_script l1
produce_script l2

log "level1: the outbox on the coordinator"
relay_start coordinator l1.ob
relay_start coordinator l1.ob
rounds level1 l1 coordinator worker1 worker2
relays_stop

log "level2: the outbox distributed, relays per shard on its worker"
for n in worker1 worker2; do
    for s in $(nsql "$n" "SELECT outbox_shards('l2.ob')"); do
        relay_start "$n" "$s"
    done
done
[ "${#RELAYS[@]}" = "$CITUS_SHARDS" ] || warn "level2: ${#RELAYS[@]} relays for $CITUS_SHARDS shards"
rounds level2 l2 coordinator worker1 worker2
relays_stop

# --- the table -------------------------------------------------------------------
REPORT=$OUTBOX_WORK/report.txt
{
    echo "bench/citus.sh: $(as_user psql -X -At -h "$SOCK" -p "${PORT[coordinator]}" -d bench -c "SELECT 'Citus ' || extversion FROM pg_extension WHERE extname = 'citus'"), PostgreSQL $(nsql coordinator "SHOW server_version"), $(nproc) cores"
    echo "command: ${CITUS_CMD:-bench/citus.sh} (QUICK=$QUICK; median of $CITUS_ROUNDS round(s) of ${CITUS_T} s; $CITUS_CLIENTS pgbench clients, synchronous_commit on; $CITUS_SHARDS shards)"
    echo "machine load average (1/5/15 min) at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg); run took $(($(date +%s) - BENCH_START)) s"
    echo "commit: $(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    awk -F'|' -f "$BENCH_DIR/citus_report.awk" "$RESULTS"
} >"$REPORT"
node_stop_all
cat "$REPORT"
mkdir -p "$BENCH_DIR/out"
OUT_FILE=$BENCH_DIR/out/citus-$(date +%Y%m%d-%H%M%S).txt
cp "$REPORT" "$OUT_FILE"
cp "$RESULTS" "$OUT_FILE.raw"
log "table written to $OUT_FILE; total $(($(date +%s) - BENCH_START)) s"
exit 0
