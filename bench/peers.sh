#!/usr/bin/env bash
#
# bench/peers.sh -- delivery_outbox beside the queues a user would pick
# instead: PgQ 3.5 (Debian), graphile-worker 0.18.0 and pg-boss 12.38.0
# (npm, pinned), in one throwaway PostgreSQL cluster, one database each.
#
# Like bench/run.sh it installs what is missing (Debian packages; the npm
# packages into PEERS_NPM_DIR, never into the tree), builds and installs the
# extension from this tree (under flock /tmp/outbox-build.lock), builds
# bench/relay.c and bench/peers/pgq_consumer.c, and starts its own cluster as
# the `postgres` user on a unix socket only, which it stops and removes on
# exit.  See bench/README.md, "Peers (peers.sh)", for the method.
#
# Every system gets the same producers: pgbench -M prepared, 8 clients, each
# transaction BEGIN; INSERT INTO orders; one enqueue of a ~100-byte payload
# to one of 100 recipients; END, synchronous_commit = on.  Per system and
# round:
#   a  producers alone (no consumer running): tx/s
#   b  producers and consumers: tx/s, done/s over the same window, latency
#      p50/p99 from the producer's transaction start to the completion
#   c  the same at a paced 500 tx/s (pgbench -R 500): latency p50/p99
# then, at the end, a check that every job was completed, and how many were
# delivered more than once.
#
# Systems (consumers):
#   outbox            4 bench/relay.c relays (LISTEN, claim 100, ack)
#   outbox_ackclaim   the same with outbox_ack_claim (one statement acks the
#                     previous batch and claims the next), only where it exists
#   outbox_ackclaim_async  the same, relays with synchronous_commit = off
#   outbox_coalesce   the same, the outbox_ack_claim chain run across
#                     wake-ups: a short batch is acked with the next claim, at
#                     the next wake-up or 5 ms later (relay.c's "coalesce")
#   outbox_split      four outboxes, each with its own channel and one relay
#                     (outbox_ack_claim, async), the producers routing by
#                     recipient (r % 4), as PgQ's four queues: a wake-up
#                     reaches one relay, not four (own database)
#   outbox_del        outbox_ackclaim_async's relays on an outbox that keeps
#                     no acked row (retain_acked '0': the ack deletes), its
#                     completions recorded by an AFTER DELETE trigger into
#                     peers_done, as graphile's are (own database)
#   pgq               4 queues, one pgq_consumer each, pgqd ticking every 100 ms
#   graphile          one graphile-worker, concurrency 4
#   pgboss            one pg-boss, work() batchSize 100 x localConcurrency 4
#
# Usage: bench/peers.sh            3 rounds of 20 s runs, ~11 minutes (~15
#                                  with the outbox_ack_claim variants)
#        QUICK=1 bench/peers.sh    1 round of 5 s runs, ~1.5 minutes
# Knobs: PEERS_ROUNDS (3; QUICK 1), PEERS_T (20; QUICK 5) seconds per run
#        (a runs half of it), PEERS_SYSTEMS (all of the above), PEERS_RATE
#        (500), PEERS_OUTBOX_NOTIFY (deferred: the outbox producers'
#        delivery_outbox.notify), PEERS_PGQ_TICK_MS (100), PEERS_PGQ_POLL_MS (50), PEERS_PORT
#        (5470), PEERS_NPM_DIR (/var/cache/delivery_outbox/peers),
#        PG_CONFIG (the system's), BENCH_NO_BUILD=1, KEEP_TMP=1.
# It reports, it never fails: exit 0 whatever the numbers (non-zero only
# when it could not run at all).

set -uo pipefail

OUTBOX_PORT=${PEERS_PORT:-5470}
OUTBOX_QUIET=1
OUTBOX_COMMAND_PACKAGES="node=nodejs npm=npm ${OUTBOX_COMMAND_PACKAGES:-}"
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "$0")" && pwd)/common.sh"

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
    PEERS_ROUNDS=${PEERS_ROUNDS:-1}
    PEERS_T=${PEERS_T:-5}
else
    PEERS_ROUNDS=${PEERS_ROUNDS:-3}
    PEERS_T=${PEERS_T:-20}
fi
PEERS_TA=$(( (PEERS_T + 1) / 2 ))
PEERS_COALESCE_MS=${PEERS_COALESCE_MS:-5}
PEERS_SYSTEMS=${PEERS_SYSTEMS:-"outbox outbox_ackclaim outbox_ackclaim_async outbox_coalesce outbox_split outbox_del pgq graphile pgboss"}
PEERS_RATE=${PEERS_RATE:-500}
PEERS_CLIENTS=8
PEERS_OUTBOX_NOTIFY=${PEERS_OUTBOX_NOTIFY:-deferred}
PEERS_PGQ_TICK_MS=${PEERS_PGQ_TICK_MS:-100}
PEERS_PGQ_POLL_MS=${PEERS_PGQ_POLL_MS:-50}
PEERS_NPM_DIR=${PEERS_NPM_DIR:-/var/cache/delivery_outbox/peers}
GRAPHILE_VERSION=0.18.0
PGBOSS_VERSION=12.38.0
WARMUP_MS=500
DRAIN_S=120

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

# bsql DB SQL: unaligned tuples only, stop at the first error.
bsql()
{
    local db=$1
    shift
    as_user psql -X -q -At -v ON_ERROR_STOP=1 -d "$db" -c "$*"
}

# now_ts DB: the server's wall clock, as text.
now_ts() { bsql "$1" "SELECT clock_timestamp()"; }

db_of()
{
    case $1 in
        outbox_split) echo peers_outbox_split ;;
        outbox_del) echo peers_outbox_del ;;
        outbox*) echo peers_outbox ;;
        *) echo "peers_$1" ;;
    esac
}

# The system's completions: one row per completed job (id, created, done),
# with the job's own timestamps or peers_done (see README).
done_sql()
{
    case $1 in
        outbox_split) echo "SELECT id::text AS id, created_at AS created, acked_at AS done
                         FROM split_all WHERE delivery_state = 'acked'" ;;
        outbox_del) echo "SELECT id::text AS id, created_at AS created, done_at AS done FROM peers_done" ;;
        outbox*) echo "SELECT id::text AS id, created_at AS created, acked_at AS done
                         FROM delivery_outbox WHERE delivery_state = 'acked'" ;;
        pgq|graphile) echo "SELECT queue || ':' || id AS id, created_at AS created, done_at AS done
                              FROM peers_done" ;;
        pgboss) echo "SELECT id::text AS id, created_on AS created, completed_on AS done
                        FROM pgboss.job WHERE name = 'peers' AND state = 'completed'" ;;
    esac
}

# What is still to do.
pending_sql()
{
    case $1 in
        outbox_split) echo "SELECT count(*) FROM split_all WHERE delivery_state <> 'acked'" ;;
        outbox_del) echo "SELECT count(*) FROM delivery_outbox" ;;
        outbox*) echo "SELECT count(*) FROM delivery_outbox WHERE delivery_state <> 'acked'" ;;
        pgq|graphile) echo "SELECT (SELECT count(*) FROM orders) - (SELECT count(*) FROM peers_done)" ;;
        pgboss) echo "SELECT count(*) FROM pgboss.job WHERE name = 'peers' AND state <> 'completed'" ;;
    esac
}

script_of()
{
    case $1 in
        outbox_split) echo "$PEERS_DIR/produce_outbox_split.sql" ;;
        outbox*) echo "$PEERS_DIR/produce_outbox.sql" ;;
        pgq) echo "$PEERS_DIR/produce_pgq.sql" ;;
        graphile) echo "$PEERS_DIR/produce_graphile.sql" ;;
        pgboss) echo "$RAW/produce_pgboss.sql" ;;
    esac
}

# run_pgbench OUT SYS LENGTH [extra args]: prints the tps, or nothing.
run_pgbench()
{
    local out=$1 sys=$2 len=$3
    shift 3
    as_user env PGOPTIONS="-c synchronous_commit=on" pgbench -n -M prepared \
        -c "$PEERS_CLIENTS" -j 2 -T "$len" "$@" -f "$(script_of "$sys")" "$(db_of "$sys")" \
        >"$out" 2>&1
    awk '/^tps = / { print $3; exit }' "$out"
}

# wait_ready OUT BGPID: wait for a "ready PID" line.
wait_ready()
{
    local i
    for i in $(seq 1 300); do
        grep -q '^ready ' "$1" 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# start_consumers SYS TAG: sets CONSUMER_BGS (background pids), CONSUMER_OUTS.
CONSUMER_BGS=()
CONSUMER_OUTS=()
start_consumers()
{
    local sys=$1 tag=$2 db
    db=$(db_of "$sys")
    CONSUMER_BGS=()
    CONSUMER_OUTS=()
    local i out flags=()
    case $sys in
        outbox_ackclaim) flags=(ackclaim) ;;
        outbox_ackclaim_async) flags=(ackclaim async) ;;
        outbox_coalesce) flags=(ackclaim async coalesce) ;;
        outbox_split|outbox_del) flags=(ackclaim async) ;;
    esac
    for i in 0 1 2 3; do
        out=$RAW/consumer.$tag.$i.out
        case $sys in
            outbox_split) as_user_bg env PGDATABASE="$db" RELAY_OUTBOX="peers.q$i" "$OUTBOX_WORK/relay" relay "peers_q$i" "${flags[@]}" ;;
            outbox*) as_user_bg env PGDATABASE="$db" RELAY_COALESCE_MS="$PEERS_COALESCE_MS" "$OUTBOX_WORK/relay" relay delivery_outbox "${flags[@]}" ;;
            pgq) as_user_bg env PGDATABASE="$db" "$OUTBOX_WORK/pgq_consumer" "peers_q$i" peers_c "$PEERS_PGQ_POLL_MS" ;;
            graphile) as_user_bg env PGDATABASE="$db" PEERS_NODE_MODULES="$PEERS_NPM_DIR/node_modules" \
                node "$PEERS_DIR/graphile.cjs" work ;;
            pgboss) as_user_bg env PGDATABASE="$db" PEERS_NODE_MODULES="$PEERS_NPM_DIR/node_modules" \
                node "$PEERS_DIR/pgboss.mjs" work ;;
        esac >"$out" 2>&1
        CONSUMER_BGS+=("$OUTBOX_BG_PID")
        CONSUMER_OUTS+=("$out")
        # one Node process runs the four (concurrency 4)
        case $sys in graphile|pgboss) break ;; esac
    done
    for i in "${!CONSUMER_BGS[@]}"; do
        wait_ready "${CONSUMER_OUTS[$i]}" "${CONSUMER_BGS[$i]}" || {
            warn "$sys consumer did not start: $(head -c 300 "${CONSUMER_OUTS[$i]}")"
            return 1
        }
    done
}

# stop_consumers: SIGTERM to each consumer's own pid (its "ready PID"), so
# that it prints its counts and exits, and runuser with it.
stop_consumers()
{
    local p i
    for i in "${!CONSUMER_BGS[@]}"; do
        p=$(awk '/^ready / { print $2; exit }' "${CONSUMER_OUTS[$i]}" 2>/dev/null)
        kill -TERM "${p:-${CONSUMER_BGS[$i]}}" 2>/dev/null
    done
    for p in "${CONSUMER_BGS[@]}"; do
        wait "$p" 2>/dev/null
    done
    CONSUMER_BGS=()
}

# pgqd, the PgQ ticker, for the PgQ database only.
PGQD_BG=
start_pgqd()
{
    cat >"$OUTBOX_WORK/pgqd.ini" <<EOF
[pgqd]
logfile = $OUTBOX_WORK/pgqd.log
pidfile = $OUTBOX_WORK/pgqd.pid
base_connstr = host=$PGHOST port=$PGPORT user=$OUTBOX_RUN_USER
initial_database = peers_pgq
database_list = peers_pgq
syslog = 0
ticker_period = $(awk -v m="$PEERS_PGQ_TICK_MS" 'BEGIN { print m / 1000 }')
EOF
    is_root && chown "$OUTBOX_RUN_USER:" "$OUTBOX_WORK/pgqd.ini"
    as_user_bg pgqd "$OUTBOX_WORK/pgqd.ini" >>"$OUTBOX_WORK/pgqd.out" 2>&1
    PGQD_BG=$OUTBOX_BG_PID
}

stop_pgqd()
{
    [ -n "$PGQD_BG" ] || return 0
    kill -TERM "$PGQD_BG" 2>/dev/null
    wait "$PGQD_BG" 2>/dev/null
    PGQD_BG=
}

# called by scripts/common.sh's EXIT trap
# shellcheck disable=SC2317
outbox_on_exit()
{
    stop_consumers
    stop_pgqd
}

# drain SYS: wait until nothing is left to do (at most DRAIN_S).
drain()
{
    local db i left
    db=$(db_of "$1")
    for i in $(seq 1 $((DRAIN_S * 5))); do
        left=$(bsql "$db" "$(pending_sql "$1")")
        [ -n "$left" ] && [ "$left" -le 0 ] && return 0
        sleep 0.2
    done
    warn "$1: $left jobs still to do after ${DRAIN_S} s"
    return 1
}

# window_stats SYS T0 T1: "done/s|p50|p99|created|completed" over jobs
# created in [T0 + warm-up, T1] and completions in [T0, T1].
window_stats()
{
    local sys=$1 t0=$2 t1=$3
    bsql "$(db_of "$sys")" "
        WITH d AS ($(done_sql "$sys")),
        l AS (SELECT done - created AS lat FROM d
               WHERE created >= '$t0'::timestamptz + interval '$WARMUP_MS ms'
                 AND created <= '$t1'::timestamptz)
        SELECT round(((SELECT count(*) FROM d WHERE done BETWEEN '$t0' AND '$t1')
                      / extract(epoch FROM '$t1'::timestamptz - '$t0'::timestamptz))::numeric, 1),
               round((1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY lat)))::numeric, 1),
               round((1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY lat)))::numeric, 1),
               count(*)
          FROM l"
}

# record FIELDS...: one line of raw results.
record()
{
    (IFS='|'; echo "$*") >>"$RAW/results"
}

# run_a SYS ROUND: producers alone, then the backlog drained (unmeasured).
run_a()
{
    local sys=$1 r=$2 tps
    tps=$(run_pgbench "$RAW/pgbench.a.$sys.r$r" "$sys" "$PEERS_TA")
    record a "$sys" "$r" "${tps:-}"
    printf '    %-22s round %s  a  producers alone     %8s tx/s\n' "$sys" "$r" "${tps%%.*}"
}

# run_bc SYS ROUND PHASE(b|c): with the consumers running.
run_bc()
{
    local sys=$1 r=$2 phase=$3 t0 t1 tps extra=()
    [ "$phase" = c ] && extra=(-R "$PEERS_RATE")
    t0=$(now_ts "$(db_of "$sys")")
    tps=$(run_pgbench "$RAW/pgbench.$phase.$sys.r$r" "$sys" "$PEERS_T" "${extra[@]}")
    t1=$(now_ts "$(db_of "$sys")")
    drain "$sys"
    local st dps p50 p99 n
    st=$(window_stats "$sys" "$t0" "$t1")
    IFS='|' read -r dps p50 p99 n <<<"$st"
    record "$phase" "$sys" "$r" "${tps:-}" "$dps" "$p50" "$p99" "$n"
    printf '    %-22s round %s  %s  %-18s %8s tx/s %8s done/s  p50 %7s  p99 %7s ms (%s jobs)\n' \
        "$sys" "$r" "$phase" "$([ "$phase" = b ] && echo 'with consumers' || echo "paced $PEERS_RATE/s")" \
        "${tps%%.*}" "${dps%%.*}" "$p50" "$p99" "$n"
}

# run_system SYS ROUND
run_system()
{
    local sys=$1 r=$2
    # a: once per database (the outbox variants share it)
    case $sys in outbox|outbox_split|outbox_del|pgq|graphile|pgboss) run_a "$sys" "$r" ;; esac
    [ "$sys" = pgq ] && start_pgqd
    if ! start_consumers "$sys" "$sys.r$r"; then
        record b "$sys" "$r" "" "" "" "" "" "consumers did not start"
        stop_consumers
        stop_pgqd
        return
    fi
    drain "$sys"
    run_bc "$sys" "$r" b
    run_bc "$sys" "$r" c
    stop_consumers
    [ "$sys" = pgq ] && stop_pgqd
    local o
    for o in "${CONSUMER_OUTS[@]}"; do
        grep -h -o -E '(wakeups|batches|executions)=.*' "$o" | sed "s/^/$sys r$r: /" >>"$RAW/consumers"
    done
}

# The final check per database: jobs enqueued (orders), completed once,
# completed more than once, not completed.
check_system()
{
    local sys=$1 db
    db=$(db_of "$sys")
    case $sys in
        outbox) bsql "$db" "
            SELECT (SELECT count(*) FROM orders), count(*) FILTER (WHERE delivery_state = 'acked'),
                   count(*) FILTER (WHERE delivery_attempts > 1),
                   count(*) FILTER (WHERE delivery_state <> 'acked')
              FROM delivery_outbox" ;;
        outbox_split) bsql "$db" "
            SELECT (SELECT count(*) FROM orders), count(*) FILTER (WHERE delivery_state = 'acked'),
                   count(*) FILTER (WHERE delivery_attempts > 1),
                   count(*) FILTER (WHERE delivery_state <> 'acked')
              FROM split_all" ;;
        outbox_del) bsql "$db" "
            SELECT (SELECT count(*) FROM orders), count(DISTINCT id), count(*) - count(DISTINCT id),
                   (SELECT count(*) FROM delivery_outbox)
              FROM peers_done" ;;
        pgq) bsql "$db" "
            SELECT (SELECT count(*) FROM orders), count(DISTINCT (queue, id)),
                   count(*) - count(DISTINCT (queue, id)),
                   (SELECT count(*) FROM orders) - count(DISTINCT (queue, id))
              FROM peers_done" ;;
        graphile) bsql "$db" "
            SELECT (SELECT count(*) FROM orders), count(DISTINCT id),
                   (count(*) - count(DISTINCT id)) + count(*) FILTER (WHERE attempts > 1),
                   (SELECT count(*) FROM graphile_worker._private_jobs)
              FROM peers_done" ;;
        pgboss) bsql "$db" "
            SELECT (SELECT count(*) FROM orders),
                   count(*) FILTER (WHERE state = 'completed'),
                   count(*) FILTER (WHERE retry_count > 0),
                   count(*) FILTER (WHERE state <> 'completed')
              FROM pgboss.job WHERE name = 'peers'" ;;
    esac
}

# ---------------------------------------------------------------------------
# set-up
# ---------------------------------------------------------------------------

BENCH_START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
bench_setup libpq-dev postgresql-15-pgq3 pgqd
RAW=$OUTBOX_WORK/raw
mkdir -p "$RAW"
# the copy of the tree, which the run user can read
PEERS_DIR=$OUTBOX_SRC/bench/peers
is_root && chown "$OUTBOX_RUN_USER:" "$RAW"

# npm packages, pinned, into a cache directory outside the tree
HAVE_NPM=no
npm_ok()
{
    [ "$(node -p "require('$PEERS_NPM_DIR/node_modules/graphile-worker/package.json').version" 2>/dev/null)" = "$GRAPHILE_VERSION" ] &&
        [ "$(node -p "require('$PEERS_NPM_DIR/node_modules/pg-boss/package.json').version" 2>/dev/null)" = "$PGBOSS_VERSION" ]
}
if ! npm_ok; then
    log "installing graphile-worker@$GRAPHILE_VERSION and pg-boss@$PGBOSS_VERSION into $PEERS_NPM_DIR"
    # any step failing is a warning: the npm peers are then not available
    # shellcheck disable=SC2015
    mkdir -p "$PEERS_NPM_DIR" &&
        { [ -f "$PEERS_NPM_DIR/package.json" ] ||
            echo '{"name":"delivery-outbox-peers","private":true}' >"$PEERS_NPM_DIR/package.json"; } &&
        (cd "$PEERS_NPM_DIR" && npm install --no-audit --no-fund --save-exact \
            "graphile-worker@$GRAPHILE_VERSION" "pg-boss@$PGBOSS_VERSION") >"$OUTBOX_WORK/npm.log" 2>&1 ||
        warn "npm install failed (graphile and pgboss will be skipped): $(tail -n 3 "$OUTBOX_WORK/npm.log")"
fi
if npm_ok; then
    HAVE_NPM=yes
    chmod -R a+rX "$PEERS_NPM_DIR"
fi

bench_build_extension
log "building bench/relay.c and bench/peers/pgq_consumer.c"
for prog in relay:bench/relay.c pgq_consumer:bench/peers/pgq_consumer.c; do
    run_logged "$OUTBOX_WORK/${prog%%:*}-build.log" \
        as_user cc -O2 -Wall -Wextra -o "$OUTBOX_WORK/${prog%%:*}" "$OUTBOX_SRC/${prog#*:}" \
        -I"$("$PG_CONFIG" --includedir)" -L"$("$PG_CONFIG" --libdir)" -lpq ||
        die "building ${prog#*:} failed (needs libpq-dev)"
done

OUTBOX_EXTRA_CONF="
# benchmark settings (bench/peers.sh)
max_connections = 100
shared_buffers = 1GB
max_wal_size = 8GB
min_wal_size = 1GB
checkpoint_timeout = 1h
log_autovacuum_min_duration = -1
shared_preload_libraries = 'delivery_outbox'
delivery_outbox.database = 'peers_outbox, peers_outbox_split, peers_outbox_del'
delivery_outbox.notify = '$PEERS_OUTBOX_NOTIFY'"
outbox_start_cluster

ORDERS_SQL="CREATE TABLE orders (id bigserial PRIMARY KEY, customer int NOT NULL,
                                 amount numeric(10,2) NOT NULL,
                                 created_at timestamptz NOT NULL DEFAULT now())"
AVAILABLE=()
declare -A NOTE=()
for db in peers_outbox peers_outbox_split peers_outbox_del peers_pgq peers_graphile peers_pgboss; do
    as_user createdb "$db" || die "createdb $db failed"
    bsql "$db" "$ORDERS_SQL" >/dev/null || die "creating orders in $db failed"
done

bsql peers_outbox "CREATE EXTENSION delivery_outbox" >/dev/null || die "CREATE EXTENSION delivery_outbox failed"
EXT_VERSION=$(bsql peers_outbox "SELECT extversion FROM pg_extension WHERE extname = 'delivery_outbox'")
HAVE_ACKCLAIM=no
[ "$(bsql peers_outbox "SELECT EXISTS (SELECT FROM pg_proc WHERE proname = 'outbox_ack_claim')")" = t ] && HAVE_ACKCLAIM=yes
# outbox_split: four outboxes peers.q0..q3, channels peers_q0..3, and a
# view of the four for the window's statistics and the final check
bsql peers_outbox_split "CREATE EXTENSION delivery_outbox; CREATE SCHEMA peers;
    SELECT outbox_create('peers', 'q' || i, channel => 'peers_q' || i) FROM generate_series(0, 3) i;
    CREATE VIEW split_all AS SELECT * FROM peers.q0 UNION ALL SELECT * FROM peers.q1
        UNION ALL SELECT * FROM peers.q2 UNION ALL SELECT * FROM peers.q3" >/dev/null \
    || die "making the outbox_split outboxes failed"
# outbox_del: the default outbox, retain_acked '0', each delete recorded
bsql peers_outbox_del "CREATE EXTENSION delivery_outbox;
    SELECT outbox_configure('delivery_outbox', retain_acked => '0');
    CREATE TABLE peers_done (id bigint NOT NULL, created_at timestamptz NOT NULL,
                             done_at timestamptz NOT NULL);
    CREATE FUNCTION peers_deleted() RETURNS trigger LANGUAGE plpgsql AS \$\$
    BEGIN
        INSERT INTO public.peers_done VALUES (OLD.id, OLD.created_at, clock_timestamp());
        RETURN NULL;
    END \$\$;
    CREATE TRIGGER peers_deleted AFTER DELETE ON delivery_outbox
        FOR EACH ROW EXECUTE FUNCTION peers_deleted()" >/dev/null \
    || die "making the outbox_del outbox failed"

HAVE_PGQ=no
if bsql peers_pgq "CREATE EXTENSION pgq" >/dev/null 2>&1 && command -v pgqd >/dev/null; then
    # four queues (PgQ hands every event of a queue to every consumer of
    # it: a work queue for four consumers is four queues), ticked as soon
    # as one event is new; the consumers registered before any event, so
    # that they see them all
    bsql peers_pgq "
        CREATE TABLE peers_done (queue text NOT NULL, id bigint NOT NULL,
                                 created_at timestamptz NOT NULL, done_at timestamptz NOT NULL);
        SELECT pgq.create_queue('peers_q' || i) FROM generate_series(0, 3) i;
        SELECT pgq.set_queue_config('peers_q' || i, 'ticker_max_count', '1') FROM generate_series(0, 3) i;
        SELECT pgq.register_consumer('peers_q' || i, 'peers_c') FROM generate_series(0, 3) i;" >/dev/null &&
        HAVE_PGQ=yes
fi
[ "$HAVE_PGQ" = yes ] || NOTE[pgq]="not available: CREATE EXTENSION pgq or pgqd failed"

HAVE_GRAPHILE=no
HAVE_PGBOSS=no
if [ "$HAVE_NPM" = yes ]; then
    if as_user env PGDATABASE=peers_graphile PEERS_NODE_MODULES="$PEERS_NPM_DIR/node_modules" \
        node "$PEERS_DIR/graphile.cjs" migrate >"$OUTBOX_WORK/graphile-setup.log" 2>&1 &&
        # a job's completion deletes it: a row trigger records it, in the
        # completing transaction
        bsql peers_graphile "
            CREATE TABLE peers_done (queue text NOT NULL DEFAULT 'job', id bigint NOT NULL,
                                     attempts int NOT NULL,
                                     created_at timestamptz NOT NULL, done_at timestamptz NOT NULL);
            CREATE FUNCTION peers_done() RETURNS trigger LANGUAGE plpgsql AS
            \$\$ BEGIN
                INSERT INTO peers_done (id, attempts, created_at, done_at)
                VALUES (OLD.id, OLD.attempts, OLD.created_at, clock_timestamp());
                RETURN NULL;
            END \$\$;
            CREATE TRIGGER peers_done AFTER DELETE ON graphile_worker._private_jobs
                FOR EACH ROW EXECUTE FUNCTION peers_done();" >/dev/null; then
        HAVE_GRAPHILE=yes
    else
        NOTE[graphile]="not available: graphile-worker's migration failed: $(tail -n 2 "$OUTBOX_WORK/graphile-setup.log" | tr '\n' ' ')"
    fi
    if as_user env PGDATABASE=peers_pgboss PEERS_NODE_MODULES="$PEERS_NPM_DIR/node_modules" \
        node "$PEERS_DIR/pgboss.mjs" setup "$RAW/produce_pgboss.sql" >"$OUTBOX_WORK/pgboss-setup.log" 2>&1; then
        HAVE_PGBOSS=yes
    else
        NOTE[pgboss]="not available: pg-boss's setup failed: $(tail -n 2 "$OUTBOX_WORK/pgboss-setup.log" | tr '\n' ' ')"
    fi
else
    NOTE[graphile]="not available: npm install failed"
    NOTE[pgboss]="not available: npm install failed"
fi
[ "$HAVE_ACKCLAIM" = yes ] || {
    NOTE[outbox_ackclaim]="not available: no outbox_ack_claim (extension $EXT_VERSION)"
    NOTE[outbox_ackclaim_async]=${NOTE[outbox_ackclaim]}
    NOTE[outbox_coalesce]=${NOTE[outbox_ackclaim]}
    NOTE[outbox_split]=${NOTE[outbox_ackclaim]}
    NOTE[outbox_del]=${NOTE[outbox_ackclaim]}
}

for sys in $PEERS_SYSTEMS; do
    case $sys in
        outbox) ;;
        outbox_ackclaim|outbox_ackclaim_async|outbox_coalesce|outbox_split|outbox_del) [ "$HAVE_ACKCLAIM" = yes ] || continue ;;
        pgq) [ "$HAVE_PGQ" = yes ] || continue ;;
        graphile) [ "$HAVE_GRAPHILE" = yes ] || continue ;;
        pgboss) [ "$HAVE_PGBOSS" = yes ] || continue ;;
        *) warn "unknown system $sys"; continue ;;
    esac
    AVAILABLE+=("$sys")
done
log "extension $EXT_VERSION; outbox_ack_claim: $HAVE_ACKCLAIM; pgq: $HAVE_PGQ; graphile-worker: $HAVE_GRAPHILE; pg-boss: $HAVE_PGBOSS"
log "systems: ${AVAILABLE[*]}; $PEERS_ROUNDS round(s), ${PEERS_T} s per run (producers alone ${PEERS_TA} s)"

# ---------------------------------------------------------------------------
# the rounds: each round starts one system further along, so that no
# system always runs first or after the same neighbour
# ---------------------------------------------------------------------------

n=${#AVAILABLE[@]}
for r in $(seq 1 "$PEERS_ROUNDS"); do
    log "round $r/$PEERS_ROUNDS ($(($(date +%s) - BENCH_START)) s, load average $(cut -d' ' -f1-3 /proc/loadavg))"
    # the outbox variants stay together, in their order (a runs with the first)
    groups=()
    for sys in "${AVAILABLE[@]}"; do
        case $sys in
            outbox_*) if [ ${#groups[@]} -gt 0 ] && [[ ${groups[-1]} == outbox* ]]; then
                          groups[-1]+=" $sys"
                      else
                          groups+=("$sys")
                      fi ;;
            *) groups+=("$sys") ;;
        esac
    done
    g=${#groups[@]}
    for i in $(seq 0 $((g - 1))); do
        for sys in ${groups[$(((i + r - 1) % g))]}; do
            run_system "$sys" "$r"
        done
    done
done

# ---------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------

declare -A CHECK=()
for sys in outbox outbox_split outbox_del pgq graphile pgboss; do
    case " ${AVAILABLE[*]} " in *" $sys "*) CHECK[$sys]=$(check_system "$sys") ;; esac
done

REPORT=$RAW/report.txt
{
    echo "bench/peers.sh: delivery_outbox $EXT_VERSION beside PgQ $(bsql peers_pgq "SELECT extversion FROM pg_extension WHERE extname = 'pgq'" 2>/dev/null), graphile-worker $GRAPHILE_VERSION, pg-boss $PGBOSS_VERSION; PostgreSQL $(bsql postgres "SHOW server_version"), node $(node --version 2>/dev/null), $(nproc) cores"
    echo "command: ${PEERS_CMD:-bench/peers.sh}  (QUICK=$QUICK; outbox notify = $PEERS_OUTBOX_NOTIFY; median of $PEERS_ROUNDS round(s); runs of ${PEERS_T} s, producers alone ${PEERS_TA} s; $PEERS_CLIENTS pgbench clients, synchronous_commit on; paced run at $PEERS_RATE tx/s)"
    echo "machine load average (1/5/15 min) at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null); run took $(($(date +%s) - BENCH_START)) s"
    echo "commit: $(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)$( [ -n "$(git -C "$OUTBOX_TOP" status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (with uncommitted changes)'), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    checks=""
    for sys in "${!CHECK[@]}"; do checks="$checks $sys=${CHECK[$sys]}"; done
    notes=""
    for sys in "${!NOTE[@]}"; do notes="$notes$sys=${NOTE[$sys]};"; done
    awk -F'|' -v systems="$PEERS_SYSTEMS" -v checks="$checks" -v notes="$notes" -v rate="$PEERS_RATE" \
        -f "$PEERS_DIR/report.awk" "$RAW/results"
    echo
    echo "consumers' own counts, per run (relay: claimed/acked; pgq_consumer: batches; Node: executions/distinct ids):"
    sed 's/^/    /' "$RAW/consumers" 2>/dev/null
} >"$REPORT"

cat "$REPORT"
mkdir -p "$BENCH_DIR/out"
OUT_FILE=$BENCH_DIR/out/peers-$(date +%Y%m%d-%H%M%S).txt
cp "$REPORT" "$OUT_FILE"
cp "$RAW/results" "$OUT_FILE.raw"
log "table written to $OUT_FILE; total $(($(date +%s) - BENCH_START)) s"
exit 0
