#!/usr/bin/env bash
#
# examples/test_examples.sh -- run every relay and producer example for real
#
# For each language (python, node, c, rust), in its own database
# examples_<lang>:
#   1. prepare: python3-psycopg importable / `npm ci` / `make` (no warnings)
#      / `cargo build --release` offline, from Debian's packaged crates (no
#      warnings);
#   2. the extension in schema outbox (its own table holds three rows for
#      default:untouched, which no relay may touch); a tenant, tenant_a,
#      whose seed table (cloacina's migration 027/028 DDL: seed_ddl) holds
#      rows in every state (seed_rows) and is adopted as docs/operations.md
#      says (adopt: the repair and outbox_attach in one transaction; its
#      NOTICE on the 3 delivered rows checked); the relay role with the
#      tenant relay GRANTs of docs/coming-from-cloacina.md and nothing
#      else (relay_grants); a statement trigger on the tenant's table that
#      notes each relay transaction's synchronous_commit and the rows it
#      claimed and acked (observe_relays).  Everything below runs under
#      PGOPTIONS='-c search_path=tenant_a,outbox,public': the relay with
#      OUTBOX=delivery_outbox (the policy run, the cursor reader and the
#      producer with OUTBOX=tenant_a.delivery_outbox), the checks reading
#      "delivery_outbox" as tenant_a's table;
#   3. enqueue half of EXAMPLES_ROWS rows across 7 recipients, start the
#      relay (as the relay role, every 7th push failing: FAIL_EVERY=7);
#   4. mid-run, REVOKE CONNECT and pg_terminate_backend() the relay's session,
#      enqueue a quarter of the rows while it cannot reconnect (their
#      notifications reach nobody), GRANT CONNECT again: the relay must back
#      off, reconnect and drain them without a notification;
#   5. enqueue the last quarter in small transactions (woken by NOTIFY);
#   6. wait until every row is acked (bounded), SIGTERM the relay: it must
#      exit 0 promptly and leave no session behind; every transaction of
#      the relay, in both its sessions, ran with synchronous_commit off, and
#      some acked a batch and claimed the next (outbox_ack_claim);
#   7. check the recipients' view (the relay's stdout, "recipient id" lines):
#      every row pushed to its recipient at least once, nothing else; prints
#      the at-least-once duplicate count;
#   8. the delivery policy: start the relay again with a recipient that
#      refuses one payload (REFUSE_PAYLOAD) and one whose first push of
#      another fails (FAIL_ONCE_PAYLOAD), RETRY_AFTER_MS=1500, WAIT_MS=30000:
#      the refused row must end in delivery_outbox_dead (dead_reason
#      'rejected', the relay's error as last_error, never pushed as
#      delivered); the failed one must be released (pending, not_before 1.5 s
#      on, last_error), claimed again only once not_before has passed, and
#      soon after it (the relay sleeps until outbox_next_due(), not WAIT_MS),
#      then acked with two attempts; that run's RELAY_SYNCHRONOUS_COMMIT=on
#      holds for every transaction of it;
#   9. run the producer example: the committed order and its outbox row
#      exist, the rolled-back ones do not; the seed's rows: pending and
#      re-addressed ones pushed and acked, delivered ones reclaimed by the
#      relay's sweep and pushed again, acked ones never pushed; the
#      extension's own table untouched;
#  10. python only: the gap-safe cursor reader (python/cursor.py, ACK=1) as
#      the relay role, granted outbox_horizon() too: a recipient's rows read
#      in id order, each once, while a lower id commits after a higher one
#      (the higher one is not read before), while a lower insert rolls back
#      (the higher one is read soon after), and under concurrent producers
#      whose ids commit out of order; it stops cleanly with its cursor saved.
#      The same gap read by after_id alone (NAIVE=1) skips the lower row:
#      what the horizon is for.
#
# For the Python and Rust relays with OUTBOX='*' ("multi-python",
# "multi-rust"), in examples_multi_<lang>: tenants a, b, c adopted and
# granted to the relay role (and SELECT on delivery_outbox_tables), x
# adopted and not granted, d a seed table attached while the relay runs:
# the seed rows drained on start, rows arriving in all three, the session
# terminated while more arrive (drained on reconnect), d picked up, every
# row of a-d pushed and acked by one process over one connection, x and the
# extension's own table untouched.
#
# and, for the postgres_exporter queries ("exporter"), on a server that
# preloads delivery_outbox (this one if it does, else a throwaway cluster of
# its own: initdb, unix socket only), an outbox with rows in every state,
# dead letters, a released, a reclaimed and a scheduled row, and a second
# outbox with dead letters of its own:
#   1. check_queries.py runs every query of queries.yaml as the monitoring
#      role and checks the values;
#   2. Debian's prometheus-postgres-exporter (--extend.query-path, on
#      127.0.0.1 and a free port, DATA_SOURCE_NAME on the unix socket, as the
#      monitoring role) is scraped with curl: every query ran, and the dead
#      letter, redelivery and waiting metrics have the expected values; it is
#      stopped by its pid.  Without the exporter (or curl) these checks are
#      skipped, with the reason ("ok N - ... # skip ...").
#
# Output is TAP ("ok N - ...", "not ok N - ...", "# ..." diagnostics, "1..N"
# at the end); exit status 1 if a test failed.  scripts/test.sh runs it as
# its "examples" suite; by hand it needs a server reachable through the PG*
# variables where the current role is a superuser, roles may log in without
# a password (trust/peer for local connections) and delivery_outbox is
# installed (make install):
#
#   PGHOST=/tmp PGPORT=5432 examples/test_examples.sh [python] [node] [c] [rust]
#       [multi-python] [multi-rust] [exporter]
#
# Knobs: EXAMPLES_ROWS (200), EXAMPLES_TIMEOUT (60 s per wait),
# EXAMPLES_WORK (directory for logs; default a new temporary one, removed
# unless a test failed), EXAMPLES_KEEP=1 (keep the databases and the role),
# EXAMPLES_RUST_TARGET (cargo's target directory; default in EXAMPLES_WORK),
# PG_CONFIG (for the C build and the exporter's cluster), NPM (npm command),
# POSTGRES_EXPORTER (default /usr/bin/prometheus-postgres-exporter).

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROWS=${EXAMPLES_ROWS:-200}
TIMEOUT=${EXAMPLES_TIMEOUT:-60}
ROLE=delivery_outbox_example_relay
# the tenant's search path the relays get from PGOPTIONS
TENANT_PATH='-c search_path=tenant_a,outbox,public'
MONITOR=delivery_outbox_example_monitor
PYTHON=/usr/bin/python3
NPM=${NPM:-npm}
ADMIN_DB=${PGDATABASE:-postgres}
EXPORTER=${POSTGRES_EXPORTER:-/usr/bin/prometheus-postgres-exporter}

if [ -n "${EXAMPLES_WORK:-}" ]; then
    WORK=$EXAMPLES_WORK
    mkdir -p "$WORK"
    OWN_WORK=0
else
    WORK=$(mktemp -d /tmp/outbox-examples.XXXXXX)
    OWN_WORK=1
fi
RUST_TARGET=${EXAMPLES_RUST_TARGET:-$WORK/rust-target}

T=0
FAILED=0
RELAY_PID=
SESS_PID=
SESS_FD=
EXPORTER_PID=
PRIVATE_PGDATA=
PRIVATE_PG_CTL=

ok()   { T=$((T + 1)); echo "ok $T - $*"; [ -n "${EXAMPLES_DEBUG:-}" ] && echo "#   at $(date +%T.%N)"; }
nok()  { T=$((T + 1)); FAILED=$((FAILED + 1)); echo "not ok $T - $*"; }
skip() { T=$((T + 1)); echo "ok $T - $1 # skip $2"; }
diag() { printf '# %s\n' "$@"; }
# show FILE [N]: the last N lines of FILE as diagnostics
show() { [ -s "$1" ] && { diag "--- ${1#"$WORK"/} (last ${2:-40} lines)"; tail -n "${2:-40}" "$1" | sed 's/^/#   /'; }; }

# q DB SQL: one value (unaligned, tuples only); errors to stderr
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }

cleanup()
{
    if [ -n "$RELAY_PID" ] && kill -0 "$RELAY_PID" 2>/dev/null; then
        kill -KILL "$RELAY_PID" 2>/dev/null
        wait "$RELAY_PID" 2>/dev/null
    fi
    sess_close
    stop_exporter
    stop_private_cluster
    if [ "$OWN_WORK" = 1 ]; then
        if [ "$FAILED" -eq 0 ]; then rm -rf "$WORK"; else diag "logs kept in $WORK"; fi
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_until SECONDS SQL-DB SQL: poll until SQL returns t; false on timeout
wait_until()
{
    local secs=$1 db=$2 sql=$3 deadline
    deadline=$((SECONDS + secs))
    while [ "$SECONDS" -le "$deadline" ]; do
        [ "$(q "$db" "$sql" 2>/dev/null)" = t ] && return 0
        kill -0 "$RELAY_PID" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

# enqueue DB FROM TO: rows FROM..TO in one transaction, kind 'work',
# recipients agent:0..agent:6
enqueue()
{
    q "$1" "SELECT count(outbox_enqueue('agent:' || (g % 7), 'work',
                convert_to('{\"n\": ' || g || '}', 'UTF8')$OUTBOX_ARG))
              FROM generate_series($2, $3) g" >/dev/null
}

# --- per language: how to prepare, run the relay, run the producer ---------

prepare()
{
    local lang=$1 log=$WORK/$1/prepare.log
    case $lang in
    python)
        "$PYTHON" -c 'import psycopg; print("psycopg", psycopg.__version__)' >"$log" 2>&1 ||
            { echo "hint: apt-get install python3-psycopg" >>"$log"; return 1; }
        ;;
    node)
        if ! command -v node >/dev/null 2>&1 || ! command -v "$NPM" >/dev/null 2>&1; then
            echo "node or npm not found (apt-get install nodejs npm)" >"$log"
            return 1
        fi
        # npm's cache in the work directory: nothing written to $HOME.
        (cd "$HERE/node" &&
            npm_config_cache=$WORK/npm-cache npm_config_update_notifier=false \
                "$NPM" ci --no-audit --no-fund --loglevel=error &&
            node -e 'console.log("node", process.version, "pg",
                                 require("pg/package.json").version)') >"$log" 2>&1 || return 1
        ;;
    c)
        make -C "$HERE/c" PG_CONFIG="${PG_CONFIG:-pg_config}" >"$log" 2>&1 || return 1
        if grep -q 'warning:' "$log"; then
            echo "compiler warnings" >>"$log"
            return 1
        fi
        echo "relay and producer built without warnings, libpq $(pg_config_libpq)" >>"$log"
        ;;
    rust)
        if ! command -v cargo >/dev/null 2>&1; then
            echo "cargo not found (apt-get install cargo librust-tokio-postgres-dev librust-tokio-dev)" >"$log"
            return 1
        fi
        # offline, from /usr/share/cargo/registry (examples/rust/.cargo);
        # cargo's home and the build in the work directory, or the build in
        # EXAMPLES_RUST_TARGET (scripts/test.sh shares one between its runs
        # on 15 and 18: the Rust relay does not link libpq)
        (cd "$HERE/rust" &&
            CARGO_HOME=$WORK/cargo-home CARGO_TARGET_DIR=$RUST_TARGET \
                cargo build --release) >"$log" 2>&1 || return 1
        if grep -q '^warning' "$log"; then
            echo "compiler warnings" >>"$log"
            return 1
        fi
        echo "relay and producer built without warnings, $(cargo --version | cut -d' ' -f1-2), tokio-postgres $(grep -A1 '^name = "tokio-postgres"' "$HERE/rust/Cargo.lock" | sed -n 's/^version = "\(.*\)"/\1/p')" >>"$log"
        ;;
    esac
}

pg_config_libpq()
{
    "${PG_CONFIG:-pg_config}" --version 2>/dev/null | sed 's/^PostgreSQL //'
}

relay_cmd()
{
    case $1 in
    python) RELAY=("$PYTHON" "$HERE/python/relay.py") ;;
    node)   RELAY=(node "$HERE/node/relay.js") ;;
    c)      RELAY=("$HERE/c/relay") ;;
    rust)   RELAY=("$RUST_TARGET/release/relay") ;;
    esac
}

producer_cmd()
{
    case $1 in
    python) PRODUCER=("$PYTHON" "$HERE/python/producer.py") ;;
    node)   PRODUCER=(node "$HERE/node/producer.js") ;;
    c)      PRODUCER=("$HERE/c/producer") ;;
    rust)   PRODUCER=("$RUST_TARGET/release/producer") ;;
    esac
}

# seed_ddl SCHEMA: the seed system's (cloacina's) outbox table in SCHEMA,
# as its migrations 027 and 028 make it: the table, its two partial indexes,
# the notifying function and its trigger
seed_ddl()
{
    cat <<SQL
CREATE TABLE $1.delivery_outbox (
    id                BIGSERIAL PRIMARY KEY,
    recipient         TEXT NOT NULL,
    kind              TEXT NOT NULL,
    tenant_id         TEXT,
    payload           BYTEA NOT NULL,
    delivery_state    TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    created_at        TIMESTAMP NOT NULL,
    delivered_at      TIMESTAMP,
    acked_at          TIMESTAMP
);
CREATE INDEX idx_delivery_outbox_recipient_open
    ON $1.delivery_outbox (recipient, id) WHERE delivery_state <> 'acked';
CREATE INDEX idx_delivery_outbox_open_age
    ON $1.delivery_outbox (delivery_state, created_at) WHERE delivery_state <> 'acked';
CREATE FUNCTION $1.delivery_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS \$f\$
BEGIN
    PERFORM pg_notify('delivery_outbox', NEW.id::text);
    RETURN NEW;
END
\$f\$;
CREATE TRIGGER delivery_outbox_notify_trg AFTER INSERT ON $1.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION $1.delivery_outbox_notify();
SQL
}

# seed_rows SCHEMA PREFIX P D K R: rows as the seed's data layer leaves
# them: P pending (PREFIXp), D delivered an hour ago and never acked
# (PREFIXd), K acked (PREFIXk), R pending rows re-addressed by its
# reassign_open_rows (attempts 1, delivered_at NULL: repaired before
# attaching; PREFIXr)
seed_rows()
{
    local t=$1.delivery_outbox now="timezone('UTC', now())"
    cat <<SQL
INSERT INTO $t (recipient, kind, payload, delivery_state, delivery_attempts, created_at)
SELECT '${2}p', 'work', '\\x00', 'pending', 0, $now - interval '2 hours' FROM generate_series(1, $3);
INSERT INTO $t (recipient, kind, payload, delivery_state, delivery_attempts, created_at, delivered_at)
SELECT '${2}d', 'work', '\\x00', 'delivered', 1, $now - interval '2 hours', $now - interval '1 hour'
  FROM generate_series(1, $4);
INSERT INTO $t (recipient, kind, payload, delivery_state, delivery_attempts, created_at, delivered_at, acked_at)
SELECT '${2}k', 'work', '\\x00', 'acked', 1, $now - interval '2 hours', $now - interval '1 hour',
       $now - interval '1 hour' FROM generate_series(1, $5);
INSERT INTO $t (recipient, kind, payload, delivery_state, delivery_attempts, created_at)
SELECT '${2}r', 'work', '\\x00', 'pending', 1, $now - interval '2 hours' FROM generate_series(1, $6);
SQL
}

# adopt SCHEMA: docs/operations.md's "Attach" step for SCHEMA's table: the
# repair of reassigned rows and outbox_attach in one transaction
adopt()
{
    cat <<SQL
BEGIN;
SET LOCAL lock_timeout = '5s';
LOCK TABLE $1.delivery_outbox IN SHARE ROW EXCLUSIVE MODE;
UPDATE $1.delivery_outbox SET delivered_at = created_at
 WHERE delivery_state = 'pending' AND delivery_attempts >= 1 AND delivered_at IS NULL;
SELECT outbox.outbox_attach('$1.delivery_outbox');
COMMIT;
SQL
}

# relay_grants SCHEMA...: the tenant relay role's GRANTs of
# docs/coming-from-cloacina.md ("The roles"), for the tables of SCHEMA...
relay_grants()
{
    local schema
    cat <<SQL
GRANT USAGE ON SCHEMA outbox TO $ROLE;
GRANT EXECUTE ON FUNCTION
    outbox.outbox_claim(integer, text, text, regclass),
    outbox.outbox_ack(bigint, text, regclass),
    outbox.outbox_ack(bigint[], text, regclass),
    outbox.outbox_ack_claim(bigint[], integer, text, text, regclass),
    outbox.outbox_release(bigint[], interval, text, regclass),
    outbox.outbox_reject(bigint[], text, regclass),
    outbox.outbox_next_due(text, regclass),
    outbox.outbox_reclaim(interval, integer, regclass),
    outbox.outbox_reclaim_recipient(text, text, regclass),
    outbox.outbox_replay(text, bigint, integer, text, regclass),
    outbox.outbox_horizon(regclass),
    outbox.outbox_wait(interval, text, regclass)
  TO $ROLE;
SQL
    for schema in "$@"; do
        cat <<SQL
GRANT USAGE ON SCHEMA $schema TO $ROLE;
GRANT UPDATE, SELECT ON $schema.delivery_outbox TO $ROLE;
SQL
    done
}

# observe_relays SCHEMA: the relays' transactions as the server sees them,
# in public.relay_xacts (a test fixture, not part of the seed's DDL): for
# each statement that changes rows of SCHEMA.delivery_outbox, the session's
# application_name, backend pid and synchronous_commit, its transaction, and
# the rows it claimed (pending -> delivered) and acked (-> acked).  A
# statement-level trigger with transition tables, run as its owner (the
# relay role may not write the table).
observe_relays()
{
    cat <<SQL
CREATE TABLE public.relay_xacts (
    app text, pid integer, xid xid8, synchronous_commit text,
    claimed bigint, acked bigint);
CREATE FUNCTION public.relay_xacts_note() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN
    INSERT INTO public.relay_xacts
    SELECT current_setting('application_name'), pg_backend_pid(), pg_current_xact_id(),
           current_setting('synchronous_commit'),
           count(*) FILTER (WHERE o.delivery_state = 'pending' AND n.delivery_state = 'delivered'),
           count(*) FILTER (WHERE o.delivery_state <> 'acked' AND n.delivery_state = 'acked')
      FROM old_rows o JOIN new_rows n USING (id)
    HAVING count(*) > 0;
    RETURN NULL;
END
\$f\$;
CREATE TRIGGER relay_xacts AFTER UPDATE ON $1.delivery_outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION public.relay_xacts_note();
SQL
}

# make_role: the relay role, once per cluster
make_role()
{
    cat <<SQL
DO \$\$BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
        CREATE ROLE $ROLE LOGIN;
    END IF;
END\$\$;
SQL
}

# setup_db DB: the extension in its own schema, outbox, with three rows for
# recipient default:untouched in its own table (no relay may touch them);
# a tenant, tenant_a, whose seed table (seed_ddl) holds rows in every state
# (seed_rows: 5 pending, 3 delivered, 4 acked, 1 reassigned) and is adopted
# as docs/operations.md says (adopt); the relay role with the tenant relay
# GRANTs and nothing else.  The relays then run with
# PGOPTIONS='-c search_path=tenant_a,outbox,public' and OUTBOX naming
# the tenant's table.
setup_db()
{
    local db=$1
    q "$ADMIN_DB" "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null &&
    q "$ADMIN_DB" "CREATE DATABASE $db" >/dev/null || return 1
    {
        echo "CREATE SCHEMA outbox;"
        echo "CREATE EXTENSION delivery_outbox SCHEMA outbox;"
        echo "SELECT count(outbox.outbox_enqueue('default:untouched', 'work', '\\x00')) FROM generate_series(1, 3);"
        echo "CREATE SCHEMA tenant_a;"
        seed_ddl tenant_a
        seed_rows tenant_a seed: 5 3 4 1
        adopt tenant_a
        make_role
        relay_grants tenant_a
        observe_relays tenant_a
    } | PGOPTIONS= psql -X -q -v ON_ERROR_STOP=1 -d "$db" 2>&1
}

# stop_relay: SIGTERM, wait up to 10 s; sets STOP_RC (124 on timeout)
stop_relay()
{
    STOP_RC=124
    kill -TERM "$RELAY_PID" 2>/dev/null
    for _ in $(seq 100); do
        kill -0 "$RELAY_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$RELAY_PID" 2>/dev/null; then
        kill -KILL "$RELAY_PID" 2>/dev/null
        wait "$RELAY_PID" 2>/dev/null
    else
        wait "$RELAY_PID"
        STOP_RC=$?
    fi
    RELAY_PID=
}

# run_policy LANG DB APP: the relay (RELAY, OUTBOX_ARG, RUN_OUTBOX as set
# by run_lang) against three new rows: one its recipient refuses for good
# (outbox_reject: a dead letter), one whose first push fails (outbox_release
# with retry_after and the error: pushed again once not_before has passed),
# one that goes through.  The database is the judge: states, not_before,
# delivered_at, attempts, last_error and the dead-letter table.
run_policy()
{
    local lang=$1 db=$2 app=$3 dir=$WORK/$1
    local out=$dir/policy-recipients.txt err=$dir/policy-relay.log
    local retry_ms=1500
    local refuse_payload='{"refuse": true}' flaky_payload='{"fail_once": true}'
    local refused_error='agent:picky refused the payload (REFUSE_PAYLOAD)'
    local failed_error='injected failure (FAIL_ONCE_PAYLOAD, attempt 1)'
    local ok_id refuse_id flaky_id got nb lag

    env PGDATABASE="$db" PGUSER="$ROLE" PGAPPNAME="$app" OUTBOX="$RUN_OUTBOX" \
        RELAY_SYNCHRONOUS_COMMIT=on \
        BATCH=10 WAIT_MS=30000 SWEEP_EVERY=0 RETRY_AFTER_MS=$retry_ms \
        REFUSE_PAYLOAD="$refuse_payload" FAIL_ONCE_PAYLOAD="$flaky_payload" \
        BACKOFF_MIN_MS=100 BACKOFF_MAX_MS=800 \
        "${RELAY[@]}" >"$out" 2>"$err" &
    RELAY_PID=$!
    IFS='|' read -r ok_id refuse_id flaky_id < <(q "$db" "SELECT
        outbox_enqueue('agent:ok', 'work', convert_to('{\"policy\": \"ok\"}', 'UTF8')$OUTBOX_ARG),
        outbox_enqueue('agent:picky', 'work', convert_to('$refuse_payload', 'UTF8')$OUTBOX_ARG),
        outbox_enqueue('agent:flaky', 'work', convert_to('$flaky_payload', 'UTF8')$OUTBOX_ARG)")
    if [ -z "$flaky_id" ]; then
        nok "$lang: delivery policy: three rows enqueued"
        stop_relay
        return
    fi

    # The failed push: released, with its error, not claimable for 1.5 s.
    if wait_until 15 "$db" "SELECT delivery_state = 'pending' AND last_error IS NOT NULL
                              FROM delivery_outbox WHERE id = $flaky_id"; then
        IFS='|' read -r got nb < <(q "$db" "SELECT
                delivery_attempts = 1
                AND last_error = '$failed_error'
                AND not_before > now()
                AND not_before >= created_at + $retry_ms * interval '1 ms',
                not_before
              FROM delivery_outbox WHERE id = $flaky_id")
        if [ "$got" = t ]; then
            ok "$lang: a failed push is released with retry_after => ${retry_ms} ms and its error (row $flaky_id pending until $nb, last_error '$failed_error')"
        else
            nok "$lang: a failed push is released with retry_after and its error"
            q "$db" "SELECT id, delivery_state, delivery_attempts, created_at, not_before, last_error
                       FROM delivery_outbox WHERE id = $flaky_id" | sed 's/^/# /'
        fi
    else
        nok "$lang: a failed push is released (row $flaky_id pending with last_error)"
        show "$err"
    fi

    # The refused push: a dead letter, at once, never delivered.
    if wait_until 15 "$db" "SELECT EXISTS (SELECT FROM delivery_outbox_dead WHERE id = $refuse_id)
                             AND NOT EXISTS (SELECT FROM delivery_outbox WHERE id = $refuse_id)"; then
        got=$(q "$db" "SELECT dead_reason = 'rejected'
                          AND last_error = '$refused_error'
                          AND recipient = 'agent:picky'
                          AND convert_from(payload, 'UTF8') = '$refuse_payload'
                          AND delivery_attempts = 1
                     FROM delivery_outbox_dead WHERE id = $refuse_id")
        if [ "$got" = t ] && ! grep -qx "agent:picky $refuse_id" "$out"; then
            ok "$lang: a refused push is rejected: row $refuse_id is in delivery_outbox_dead (dead_reason 'rejected', last_error '$refused_error'), never pushed as delivered"
        else
            nok "$lang: a refused push is rejected into delivery_outbox_dead with its error"
            q "$db" "SELECT id, recipient, delivery_attempts, dead_reason, last_error
                       FROM delivery_outbox_dead WHERE id = $refuse_id" | sed 's/^/# /'
        fi
    else
        nok "$lang: a refused push is dead-lettered (row $refuse_id in delivery_outbox_dead)"
        show "$err"
    fi

    # The failed row again: pushed once not_before has passed, soon after
    # it (woken by outbox_next_due, not by WAIT_MS), then acked.
    if [ -n "$nb" ] && wait_until $((retry_ms / 1000 + 10)) "$db" \
        "SELECT delivery_state = 'acked' FROM delivery_outbox WHERE id = $flaky_id" &&
        wait_until 10 "$db" "SELECT delivery_state = 'acked' FROM delivery_outbox WHERE id = $ok_id"; then
        IFS='|' read -r got lag < <(q "$db" "SELECT
                delivery_attempts = 2 AND delivered_at >= '$nb'::timestamptz
                AND delivered_at < '$nb'::timestamptz + interval '2 s',
                round(EXTRACT(epoch FROM delivered_at - '$nb'::timestamptz) * 1000)
              FROM delivery_outbox WHERE id = $flaky_id")
        if [ "$got" = t ] && [ "$(grep -cx "agent:flaky $flaky_id" "$out")" = 1 ] &&
            [ "$(grep -cx "agent:ok $ok_id" "$out")" = 1 ]; then
            ok "$lang: the released row was claimed again only after its retry_after (${lag} ms after not_before), pushed once and acked on attempt 2"
        else
            nok "$lang: the released row is pushed again after retry_after, then acked (attempts 2, claimed ${lag:-?} ms after not_before)"
            q "$db" "SELECT id, delivery_state, delivery_attempts, delivered_at, acked_at, not_before, last_error
                       FROM delivery_outbox WHERE id IN ($ok_id, $flaky_id)" | sed 's/^/# /'
            show "$out"
            show "$err"
        fi
    else
        nok "$lang: the released row is pushed again after retry_after and acked"
        q "$db" "SELECT * FROM outbox_stats('$RUN_OUTBOX')" | sed 's/^/# /'
        show "$err"
    fi

    stop_relay
    if [ "$STOP_RC" -eq 0 ] && grep -q "push refused: id $refuse_id to agent:picky" "$err" &&
        grep -q "push failed: id $flaky_id to agent:flaky" "$err"; then
        ok "$lang: the relay logged the refusal and the failure and stopped cleanly"
    else
        nok "$lang: the relay logged the refusal and the failure and stopped cleanly (exit status $STOP_RC)"
        show "$err"
    fi
    # RELAY_SYNCHRONOUS_COMMIT=on: the relay's transactions wait for their
    # flush again
    check_xacts "$lang" "$db" "$app" on "$err"
}

# sess_open DB FILE: a psql session of its own, fed through a FIFO, its
# output in FILE (one at a time); sess_send SQL; sess_wait_line N: wait (up
# to 10 s) until FILE has N lines, print the Nth; sess_close
sess_open()
{
    SESS_OUT=$2
    rm -f "$SESS_OUT.in" "$SESS_OUT"
    mkfifo "$SESS_OUT.in"
    psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" <"$SESS_OUT.in" >"$SESS_OUT" 2>&1 &
    SESS_PID=$!
    exec {SESS_FD}>"$SESS_OUT.in"
}
sess_send() { echo "$1" >&"$SESS_FD"; }
sess_wait_line()
{
    local _
    for _ in $(seq 200); do
        [ "$(wc -l <"$SESS_OUT")" -ge "$1" ] && { sed -n "${1}p" "$SESS_OUT"; return 0; }
        sleep 0.05
    done
    return 1
}
sess_close()
{
    if [ -n "$SESS_FD" ]; then
        exec {SESS_FD}>&-
        SESS_FD=
    fi
    if [ -n "$SESS_PID" ]; then
        wait "$SESS_PID" 2>/dev/null
        SESS_PID=
    fi
}

# wait_lines SECS FILE PATTERN: poll until FILE has a line that is exactly
# PATTERN; false on timeout or when the reader (RELAY_PID) is gone
wait_lines()
{
    local deadline=$((SECONDS + $1))
    while [ "$SECONDS" -le "$deadline" ]; do
        grep -qx "$3" "$2" && return 0
        kill -0 "$RELAY_PID" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

# run_cursor DB: python/cursor.py, the gap-safe cursor loop of
# docs/ordered-delivery.md, against the default outbox of DB, as the relay
# role (README's GRANTs and outbox_horizon).  The database is the judge of
# what committed; the reader's stdout ("recipient id" lines) of what it read.
run_cursor()
{
    local db=$1 dir=$WORK/python
    local out=$dir/cursor-rows.txt err=$dir/cursor.log pos=$dir/cursor.pos
    local app=examples-cursor-python r=cursor:a low high n_rows n_lines got p i
    local -a producers=()

    rm -f "$pos"
    env PGDATABASE="$db" PGUSER="$ROLE" PGAPPNAME="$app" RECIPIENT="$r" OUTBOX="$RUN_OUTBOX" \
        ACK=1 BATCH=7 WAIT_MS=30000 HELD_MS=200 CURSOR_FILE="$pos" \
        "$PYTHON" "$HERE/python/cursor.py" >"$out" 2>"$err" &
    RELAY_PID=$!

    # 20 rows committed together: read, in order, and acked.
    q "$db" "SELECT count(outbox_enqueue('$r', 'work', convert_to('{\"n\": ' || g || '}', 'UTF8')$OUTBOX_ARG))
               FROM generate_series(1, 20) g" >/dev/null
    if wait_until 15 "$db" "SELECT count(*) = 20 FROM delivery_outbox
                             WHERE recipient = '$r' AND delivery_state = 'acked'"; then
        ok "python: cursor: 20 committed rows read in id order and acked (ACK=1)"
    else
        nok "python: cursor: 20 committed rows read and acked"
        show "$err"
        stop_relay
        return
    fi

    # A lower id still open while a higher one commits: the higher one is
    # not read before the lower one commits; then both, in id order.
    sess_open "$db" "$dir/cursor-session.out"
    sess_send "BEGIN; SELECT outbox_enqueue('$r', 'work', '\\x01'$OUTBOX_ARG);"
    low=$(sess_wait_line 1)
    high=$(q "$db" "SELECT outbox_enqueue('$r', 'work', '\\x02'$OUTBOX_ARG)")
    sleep 1
    if [ -n "$low" ] && [ -n "$high" ] && [ "$high" -gt "$low" ] &&
        ! grep -qx "$r $high" "$out"; then
        got=held
    else
        got="read early ($low, $high)"
    fi
    sess_send "COMMIT;"
    if [ "$got" = held ] && wait_lines 10 "$out" "$r $high" &&
        [ "$(tail -n 2 "$out" | tr '\n' ' ')" = "$r $low $r $high " ]; then
        ok "python: cursor: row $high (committed first) waited above the horizon until row $low committed, then both were read in id order"
    else
        nok "python: cursor: a higher id is not read before a lower one that commits later ($got)"
        show "$out" 5
        show "$err"
    fi

    # A lower insert that rolls back: no NOTIFY comes of it; the reader
    # looks again every HELD_MS and reads the higher row soon after.
    sess_send "BEGIN; SELECT outbox_enqueue('$r', 'work', '\\x03'$OUTBOX_ARG);"
    low=$(sess_wait_line 2)
    high=$(q "$db" "SELECT outbox_enqueue('$r', 'work', '\\x04'$OUTBOX_ARG)")
    sleep 0.5
    got=$(grep -cx "$r $high" "$out")
    sess_send "ROLLBACK;"
    sess_close
    if [ "$got" = 0 ] && wait_lines 5 "$out" "$r $high" && ! grep -qx "$r $low" "$out"; then
        ok "python: cursor: row $high waited while row $low was open, and was read soon after its rollback (no NOTIFY: the HELD_MS recheck)"
    else
        nok "python: cursor: after a rolled-back lower insert the higher row is read (read while held: $got)"
        show "$out" 5
        show "$err"
    fi

    # Four producers at once, two rows per transaction with a pause
    # between them, so that lower ids keep committing after higher ones.
    for p in 1 2 3 4; do
        (for i in $(seq 25); do
            q "$db" "SELECT outbox_enqueue('$r', 'work', '\\x05'$OUTBOX_ARG),
                            pg_sleep(random() * 0.02),
                            outbox_enqueue('$r', 'work', '\\x06'$OUTBOX_ARG)" >/dev/null
        done) &
        producers+=($!)
    done
    wait "${producers[@]}"
    if wait_until "$TIMEOUT" "$db" "SELECT count(*) FILTER (WHERE delivery_state <> 'acked') = 0
                                     FROM delivery_outbox WHERE recipient = '$r'"; then
        n_rows=$(q "$db" "SELECT count(*) FROM delivery_outbox WHERE recipient = '$r'")
        n_lines=$(wc -l <"$out")
        if [ "$n_lines" -eq "$n_rows" ] &&
            [ "$(q "$db" "SELECT string_agg('$r ' || id, E'\n' ORDER BY id)
                            FROM delivery_outbox WHERE recipient = '$r'")" = "$(cat "$out")" ]; then
            ok "python: cursor: under 4 concurrent producers, all $n_rows committed rows of $r read once each, in id order, none skipped"
        else
            nok "python: cursor: every committed row read once, in id order ($n_lines lines for $n_rows rows)"
            diff <(q "$db" "SELECT '$r ' || id FROM delivery_outbox WHERE recipient = '$r' ORDER BY id") \
                "$out" | head -20 | sed 's/^/# /'
        fi
    else
        nok "python: cursor: every row of $r acked by the reader within ${TIMEOUT}s"
        show "$err"
    fi

    stop_relay
    got=$(q "$db" "SELECT max(id) FROM delivery_outbox WHERE recipient = '$r'")
    if [ "$STOP_RC" -eq 0 ] && grep -q 'stopped:' "$err" && [ "$(cat "$pos" 2>/dev/null)" = "$got" ]; then
        ok "python: cursor: SIGTERM stops the reader cleanly, its cursor saved at id $got"
    else
        nok "python: cursor: SIGTERM stops the reader cleanly with its cursor saved (exit $STOP_RC, cursor $(cat "$pos" 2>/dev/null), last id $got)"
        show "$err"
    fi

    # The same gap read by after_id alone (NAIVE=1, ACK=0): the lower row
    # is skipped for good.
    r=cursor:naive
    env PGDATABASE="$db" PGUSER="$ROLE" PGAPPNAME="$app" RECIPIENT="$r" OUTBOX="$RUN_OUTBOX" \
        NAIVE=1 WAIT_MS=30000 "$PYTHON" "$HERE/python/cursor.py" >"$out" 2>"$err" &
    RELAY_PID=$!
    sess_open "$db" "$dir/cursor-session.out"
    sess_send "BEGIN; SELECT outbox_enqueue('$r', 'work', '\\x07'$OUTBOX_ARG);"
    low=$(sess_wait_line 1)
    high=$(q "$db" "SELECT outbox_enqueue('$r', 'work', '\\x08'$OUTBOX_ARG)")
    if wait_lines 10 "$out" "$r $high"; then
        sess_send "COMMIT;"
        sess_close
        sleep 1
        if ! grep -qx "$r $low" "$out" &&
            [ "$(q "$db" "SELECT delivery_state FROM delivery_outbox WHERE id = $low")" = pending ]; then
            ok "python: cursor: without the horizon (NAIVE=1) the reader read row $high and never row $low, which committed later with a lower id"
        else
            nok "python: cursor: the naive reader skips the lower row (it read it, or it did not commit)"
            show "$out" 5
        fi
    else
        sess_send "COMMIT;"
        sess_close
        nok "python: cursor: the naive reader reads row $high while row $low is open"
        show "$err"
    fi
    stop_relay
}

# check_seed LANG DB OUT PREFIX: the rows seed_rows left (under PGOPTIONS'
# search path): the pending, reassigned and delivered ones pushed (OUT, the
# relay's "recipient id" lines) and acked, the delivered ones reclaimed
# first (attempts >= 2); the acked ones untouched and never pushed
check_seed()
{
    local lang=$1 db=$2 out=$3 p=$4 got pushed never
    got=$(q "$db" "SELECT count(*) FILTER (WHERE recipient IN ('${p}p', '${p}r', '${p}d')
                                           AND delivery_state = 'acked') = 9
                   AND count(*) FILTER (WHERE recipient = '${p}d' AND delivery_attempts >= 2) = 3
                   AND count(*) FILTER (WHERE recipient = '${p}k' AND delivery_attempts = 1
                                           AND acked_at < timezone('UTC', now()) - interval '59 minutes') = 4
                 FROM delivery_outbox WHERE recipient LIKE '${p}%'")
    pushed=$(q "$db" "SELECT recipient || ' ' || id FROM delivery_outbox
                       WHERE recipient IN ('${p}p', '${p}r', '${p}d') ORDER BY 1" |
        while read -r line; do grep -qxF "$line" "$out" || echo "$line"; done | wc -l)
    never=$(grep -c "^${p}k " "$out")
    if [ "$got" = t ] && [ "$pushed" -eq 0 ] && [ "$never" -eq 0 ]; then
        ok "$lang: the seed's rows: 5 pending and 1 reassigned pushed and acked, 3 left delivered reclaimed by the relay's sweep, pushed again and acked, 4 acked never pushed"
    else
        nok "$lang: the seed's rows pushed and acked, the acked ones untouched ($pushed not pushed, $never acked ones pushed)"
        q "$db" "SELECT recipient, delivery_state, delivery_attempts, count(*) FROM delivery_outbox
                  WHERE recipient LIKE '${p}%' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3" | sed 's/^/# /'
    fi
}

# check_xacts LANG DB APP SETTING LOG: the transactions of the relay run as
# APP, as relay_xacts (observe_relays) saw them: every one committed with
# synchronous_commit SETTING, in every session the relay had (for off: at
# least two, the one terminated and the one after the reconnect); for off
# (the main run, where the first drain claims many batches), some acked the
# last batch and claimed the next (outbox_ack_claim), which no relay that
# claims and acks in separate transactions does
check_xacts()
{
    local lang=$1 db=$2 app=$3 want=$4 log=$5 n_xacts n_want n_pids n_both n_claims
    IFS='|' read -r n_xacts n_want n_pids n_both n_claims < <(q "$db" "SELECT count(*),
            count(*) FILTER (WHERE settings = '$want'),
            (SELECT count(DISTINCT pid) FROM relay_xacts WHERE app = '$app'),
            count(*) FILTER (WHERE claimed > 0 AND acked > 0),
            count(*) FILTER (WHERE claimed > 0)
          FROM (SELECT xid, string_agg(DISTINCT synchronous_commit, ',') AS settings,
                       sum(claimed) AS claimed, sum(acked) AS acked
                  FROM relay_xacts WHERE app = '$app' GROUP BY xid) x")
    if [ "${n_xacts:-0}" -gt 0 ] && [ "$n_want" = "$n_xacts" ] &&
        { [ "$want" != off ] || [ "$n_pids" -ge 2 ]; }; then
        ok "$lang: the relay's $n_xacts transactions that changed rows, in its $n_pids sessions, all committed with synchronous_commit $want (as the server saw them)"
    else
        nok "$lang: the relay's transactions all ran with synchronous_commit $want (${n_want:-?} of ${n_xacts:-?}, $n_pids sessions)"
        q "$db" "SELECT pid, synchronous_commit, count(*) FROM relay_xacts WHERE app = '$app' GROUP BY 1, 2" | sed 's/^/# /'
        show "$log"
    fi
    [ "$want" = off ] || return 0
    if [ "${n_both:-0}" -gt 0 ]; then
        ok "$lang: $n_both of the relay's $n_claims claiming transactions acked the batch before in the same transaction (outbox_ack_claim; $(grep -o 'rounds [0-9]*' "$log" | tail -n 1) logged)"
    else
        nok "$lang: the relay acks a batch and claims the next in one transaction (${n_both:-?} of ${n_claims:-?} claiming transactions also acked)"
        show "$log"
    fi
}

# check_default LANG DB FILE...: the extension's own outbox still holds its
# three default:untouched rows, pending and never claimed, and no relay
# output (FILE...) names them
check_default()
{
    local lang=$1 db=$2 got
    shift 2
    got=$(q "$db" "SELECT count(*) = 3 AND bool_and(delivery_state = 'pending'
                          AND delivery_attempts = 0 AND delivered_at IS NULL)
                     FROM outbox.delivery_outbox")
    if [ "$got" = t ] && ! cat "$@" 2>/dev/null | grep -q '^default:untouched '; then
        ok "$lang: the extension's own outbox is untouched (its 3 rows pending, never claimed)"
    else
        nok "$lang: the extension's own outbox is untouched"
        q "$db" "SELECT id, recipient, delivery_state, delivery_attempts FROM outbox.delivery_outbox" | sed 's/^/# /'
    fi
}

run_lang()
{
    local lang=$1 db=examples_$1 app=examples-relay-$1 dir=$WORK/$1
    local out err half quarter pid1 pid2 acked_at_kill t0 dt
    local n_acked n_lines n_unique dups missing extra failures retries
    local failed_before=$FAILED
    out=$dir/recipients.txt
    err=$dir/relay.log
    mkdir -p "$dir"
    half=$((ROWS / 2))
    quarter=$(((ROWS - half) / 2))

    # Everything here (the relays, the producer and the checks) runs under
    # the tenant's search path, from PGOPTIONS: "delivery_outbox" is
    # tenant_a's table, outbox_enqueue the extension's function.  The main
    # run names the outbox as the data layer would (OUTBOX=delivery_outbox),
    # the delivery policy's run and the producer qualified.
    local -x PGOPTIONS=$TENANT_PATH
    local agents="recipient LIKE 'agent:%'"
    OUTBOX_ARG=", outbox => 'tenant_a.delivery_outbox'"
    RUN_OUTBOX=tenant_a.delivery_outbox

    t0=$SECONDS
    if prepare "$lang"; then
        ok "$lang: example prepared ($(tail -n 1 "$dir/prepare.log"))"
    else
        nok "$lang: example prepared"
        show "$dir/prepare.log"
        return
    fi
    if setup_db "$db" >"$dir/setup.log" 2>&1; then
        ok "$lang: database $db: the extension in schema outbox, tenant_a's seed table (rows in every state) adopted with outbox_attach, a relay role with the tenant relay GRANTs"
    else
        nok "$lang: database $db with the extension, tenant_a's adopted seed table and a relay role"
        show "$dir/setup.log"
        return
    fi
    if grep -q 'NOTICE:  3 delivered rows of table tenant_a.delivery_outbox were never acked' "$dir/setup.log"; then
        ok "$lang: outbox_attach's NOTICE counts the 3 rows the seed left delivered"
    else
        nok "$lang: outbox_attach's NOTICE counts the 3 rows the seed left delivered"
        show "$dir/setup.log"
    fi

    # -- the relay --------------------------------------------------------
    enqueue "$db" 1 "$half"
    relay_cmd "$lang"
    env PGDATABASE="$db" PGUSER="$ROLE" PGAPPNAME="$app" OUTBOX=delivery_outbox \
        BATCH=10 FAIL_EVERY=7 PUSH_DELAY_MS=5 RETRY_AFTER_MS=20 \
        WAIT_MS=30000 SWEEP_EVERY=3 RECLAIM_AFTER=3 \
        BACKOFF_MIN_MS=100 BACKOFF_MAX_MS=800 \
        "${RELAY[@]}" >"$out" 2>"$err" &
    RELAY_PID=$!

    local relay_sql="SELECT pid FROM pg_stat_activity
                      WHERE datname = '$db' AND application_name = '$app'"
    # Mid-run: once some rows are acked, cut the session and keep the relay
    # out for a second.
    if wait_until "$TIMEOUT" "$db" \
        "SELECT count(*) >= $((half / 5)) FROM delivery_outbox WHERE delivery_state = 'acked' AND $agents"; then
        # One session: find the relay's backend, lock the relay out, cut
        # its connection, enqueue while it is away.
        IFS='|' read -r pid1 acked_at_kill < <(psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$db" <<SQL
SELECT pid, (SELECT count(*) FROM delivery_outbox WHERE delivery_state = 'acked' AND $agents)
  FROM ($relay_sql AND state IS NOT NULL) s \gset
REVOKE CONNECT ON DATABASE $db FROM PUBLIC;
SELECT pg_terminate_backend(:pid) \g /dev/null
SELECT count(outbox_enqueue('agent:' || (g % 7), 'work',
              convert_to('{"n": ' || g || '}', 'UTF8')$OUTBOX_ARG))
  FROM generate_series($((half + 1)), $((half + quarter))) g \g /dev/null
SELECT :pid, :count;
SQL
)
        sleep 0.6
        q "$ADMIN_DB" "GRANT CONNECT ON DATABASE $db TO PUBLIC" >/dev/null
        if [ -z "$pid1" ]; then
            nok "$lang: found the relay's session to terminate"
            show "$err"
            stop_relay
            return
        fi
        diag "$lang: terminated the relay's backend $pid1 with $acked_at_kill of $half rows acked; connections refused for 0.6 s"
    else
        pid1=none
        nok "$lang: relay started and acked rows"
        show "$err"
        stop_relay
        return
    fi

    # Reconnected: a new session, after at least one refused attempt.
    if wait_until "$TIMEOUT" "$ADMIN_DB" \
        "SELECT EXISTS ($relay_sql AND pid <> $pid1 AND state IS NOT NULL)"; then
        pid2=$(q "$ADMIN_DB" "$relay_sql AND state IS NOT NULL")
        retries=$(grep -c 'reconnecting in' "$err")
        if [ "$retries" -ge 2 ]; then
            ok "$lang: reconnected with backoff after pg_terminate_backend (backend $pid1 -> $pid2, $retries retries: $(grep -o 'reconnecting in [0-9]* ms' "$err" | awk '{printf "%s%s", sep, $3; sep=","}') ms)"
        else
            nok "$lang: reconnected with backoff after pg_terminate_backend ($retries retries logged, expected >= 2)"
            show "$err"
        fi
    else
        nok "$lang: reconnected with backoff after pg_terminate_backend"
        show "$err"
    fi

    # Rows enqueued while it was away: found by the drain, no notification.
    if wait_until 10 "$db" \
        "SELECT count(*) = $((half + quarter)) FROM delivery_outbox WHERE delivery_state = 'acked' AND $agents"; then
        ok "$lang: the $quarter rows enqueued while it was disconnected were drained after reconnecting"
    else
        nok "$lang: the $quarter rows enqueued while it was disconnected were drained after reconnecting"
        q "$db" "SELECT * FROM outbox_stats('$RUN_OUTBOX')" | sed 's/^/# /'
    fi

    # The rest, in small transactions: woken by NOTIFY.
    local from=$((half + quarter + 1)) step
    step=$(((ROWS - from + 1 + 9) / 10))
    while [ "$from" -le "$ROWS" ]; do
        enqueue "$db" "$from" $((from + step - 1 > ROWS ? ROWS : from + step - 1))
        from=$((from + step))
    done
    if wait_until "$TIMEOUT" "$db" \
        "SELECT count(*) FILTER (WHERE delivery_state = 'acked') = $ROWS
            AND count(*) = $ROWS FROM delivery_outbox WHERE $agents"; then
        ok "$lang: all $ROWS rows acked"
    else
        nok "$lang: all $ROWS rows acked within ${TIMEOUT}s"
        q "$db" "SELECT * FROM outbox_stats('$RUN_OUTBOX')" | sed 's/^/# /'
        show "$err"
    fi
    # the seed's delivered rows come back only with the relay's sweep
    # (SWEEP_EVERY=3, RECLAIM_AFTER=3): a run that acked the agents' rows
    # sooner gives it the time (check_seed below tells what happened)
    wait_until "$TIMEOUT" "$db" \
        "SELECT count(*) FILTER (WHERE delivery_state = 'acked') = 3
           FROM delivery_outbox WHERE recipient = 'seed:d'" || true

    stop_relay
    if [ "$STOP_RC" -eq 0 ] && grep -q 'stopped:' "$err" &&
        [ "$(q "$ADMIN_DB" "SELECT count(*) FROM ($relay_sql) s")" = 0 ]; then
        ok "$lang: SIGTERM stops the relay cleanly (exit 0, session closed)"
    else
        nok "$lang: SIGTERM stops the relay cleanly (exit status $STOP_RC)"
        show "$err"
    fi
    check_xacts "$lang" "$db" "$app" off "$err"

    # The recipients' view: every row, to its recipient, at least once.
    q "$db" "SELECT recipient || ' ' || id FROM delivery_outbox WHERE $agents ORDER BY 1" >"$dir/expected.txt"
    grep '^agent:' "$out" | sort >"$dir/got.txt"
    sort -u "$dir/got.txt" >"$dir/got_unique.txt"
    n_lines=$(wc -l <"$dir/got.txt")
    n_unique=$(wc -l <"$dir/got_unique.txt")
    dups=$((n_lines - n_unique))
    missing=$(comm -23 "$dir/expected.txt" "$dir/got_unique.txt" | wc -l)
    extra=$(comm -13 "$dir/expected.txt" "$dir/got_unique.txt" | wc -l)
    failures=$(grep -c 'push failed: id [0-9]* to agent:' "$err")
    n_acked=$(q "$db" "SELECT count(*) FROM delivery_outbox WHERE delivery_state = 'acked' AND $agents")
    diag "$lang: recipients got $n_lines pushes of $ROWS rows: $dups duplicates (at-least-once), $failures injected push failures released and retried"
    if [ "$missing" -eq 0 ] && [ "$extra" -eq 0 ] && [ "$n_unique" -eq "$ROWS" ] &&
        [ "$n_acked" -eq "$ROWS" ]; then
        ok "$lang: each recipient got each of its rows exactly once, modulo $dups at-least-once duplicates"
    else
        nok "$lang: each recipient got each of its rows ($missing missing, $extra unexpected)"
        comm -3 "$dir/expected.txt" "$dir/got_unique.txt" | head -20 | sed 's/^/# /'
    fi
    if [ "$failures" -gt 0 ] &&
        [ "$(q "$db" "SELECT sum(delivery_attempts) - count(*) >= $failures FROM delivery_outbox WHERE $agents")" = t ]; then
        ok "$lang: failed pushes were released (outbox_release) and delivered on a later attempt"
    else
        nok "$lang: failed pushes were released and delivered later ($failures failures logged)"
        show "$err"
    fi

    # The seed's rows: the pending and reassigned ones pushed and acked,
    # the delivered ones reclaimed by the relay's sweep (RECLAIM_AFTER=3),
    # pushed and acked; the acked ones never pushed.
    check_seed "$lang" "$db" "$out" seed:

    # -- the delivery policy: refused and failed pushes ------------------
    run_policy "$lang" "$db" "$app-policy"

    # -- the producer -----------------------------------------------------
    producer_cmd "$lang"
    if env PGDATABASE="$db" OUTBOX="$RUN_OUTBOX" "${PRODUCER[@]}" >"$dir/producer.out" 2>"$dir/producer.log"; then
        local c_order c_outbox r_order r_outbox verdict
        read -r c_order c_outbox < <(sed -n 's/^committed order=\([0-9]*\) outbox=\([0-9]*\)$/\1 \2/p' "$dir/producer.out")
        read -r r_order r_outbox < <(sed -n 's/^rolled_back order=\([0-9]*\) outbox=\([0-9]*\)$/\1 \2/p' "$dir/producer.out")
        verdict=$(q "$db" "SELECT
              (SELECT count(*) FROM orders WHERE id = ${c_order:-0}) = 1
          AND (SELECT count(*) FROM delivery_outbox
                WHERE id = ${c_outbox:-0} AND delivery_state = 'pending'
                  AND (convert_from(payload, 'UTF8')::jsonb ->> 'order_id')::bigint = ${c_order:-0}) = 1
          AND (SELECT count(*) FROM orders WHERE id = ${r_order:-0}) = 0
          AND (SELECT count(*) FROM delivery_outbox WHERE id = ${r_outbox:-0}) = 0
          AND ${r_order:-0} > 0 AND ${r_outbox:-0} > 0" 2>&1)
        if [ "$verdict" = t ]; then
            ok "$lang: producer: order $c_order and outbox row $c_outbox committed together; rolled-back order $r_order and outbox row $r_outbox left neither"
        else
            nok "$lang: producer: committed both / rolled back neither ($verdict)"
            show "$dir/producer.out"
        fi
    else
        nok "$lang: producer ran"
        show "$dir/producer.log"
    fi

    # -- the gap-safe cursor (python only) --------------------------------
    [ "$lang" = python ] && run_cursor "$db"
    check_default "$lang" "$db" "$dir/recipients.txt" "$dir/policy-recipients.txt" \
        "$dir/producer.out"

    dt=$((SECONDS - t0))
    diag "$lang: ${dt}s"
    if [ "${EXAMPLES_KEEP:-0}" != 1 ] && [ "$FAILED" -eq "$failed_before" ]; then
        q "$ADMIN_DB" "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
    fi
}

# --- one relay for many tenants ---------------------------------------------

# run_multi LANG: the relay of LANG (python, rust) with OUTBOX='*' as a
# relay role granted three tenants' tables (and SELECT on
# delivery_outbox_tables), in a database with a fourth tenant it is not
# granted and the extension's own outbox: one process, one connection,
# every granted tenant's rows pushed and acked; a tenant attached while it
# runs is picked up; the others are untouched.
run_multi()
{
    local lang=$1 db=examples_multi_$1 app=examples-multi-$1 dir=$WORK/multi-$1
    local out err pid1 pid2 t sessions max_sessions=0 got missing extra round
    local failed_before=$FAILED
    local -x PGOPTIONS='-c search_path=outbox,public'
    out=$dir/recipients.txt
    err=$dir/relay.log
    mkdir -p "$dir" "$WORK/$lang"
    if ! prepare "$lang"; then
        nok "multi-$lang: example prepared"
        show "$WORK/$lang/prepare.log"
        return
    fi
    if ! {
        q "$ADMIN_DB" "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null &&
        q "$ADMIN_DB" "CREATE DATABASE $db" >/dev/null &&
        {
            echo "CREATE SCHEMA outbox;"
            echo "CREATE EXTENSION delivery_outbox SCHEMA outbox;"
            echo "SELECT count(outbox.outbox_enqueue('default:untouched', 'work', '\\x00')) FROM generate_series(1, 3);"
            for t in a b c x; do
                echo "CREATE SCHEMA tenant_$t;"
                seed_ddl "tenant_$t"
                seed_rows "tenant_$t" "$t:seed:" 3 2 2 1
                adopt "tenant_$t"
            done
            # tenant_d: a seed table, attached while the relay runs
            echo "CREATE SCHEMA tenant_d;"
            seed_ddl tenant_d
            seed_rows tenant_d d:seed: 3 0 0 0
            make_role
            relay_grants tenant_a tenant_b tenant_c tenant_d
            echo "GRANT SELECT ON outbox.delivery_outbox_tables TO $ROLE;"
        } | psql -X -q -v ON_ERROR_STOP=1 -d "$db"
    } >"$dir/setup.log" 2>&1; then
        nok "multi-$lang: database $db with four tenants' adopted seed tables, three granted to the relay role"
        show "$dir/setup.log"
        return
    fi
    ok "multi-$lang: database $db: tenants a, b, c adopted and granted to the relay role, tenant x adopted and not granted, tenant d's seed table not attached yet"

    relay_cmd "$lang"
    env PGDATABASE="$db" PGUSER="$ROLE" PGAPPNAME="$app" OUTBOX='*' \
        BATCH=5 WAIT_MS=1000 SWEEP_EVERY=2 RECLAIM_AFTER=2 PUSH_DELAY_MS=2 \
        BACKOFF_MIN_MS=100 BACKOFF_MAX_MS=400 \
        "${RELAY[@]}" >"$out" 2>"$err" &
    RELAY_PID=$!
    local relay_sql="SELECT pid FROM pg_stat_activity
                      WHERE datname = '$db' AND application_name = '$app'"
    # the seed's pending rows of a, b and c: drained on start
    if wait_until "$TIMEOUT" "$db" "SELECT (SELECT count(*) FROM tenant_a.delivery_outbox WHERE recipient IN ('a:seed:p', 'a:seed:r') AND delivery_state = 'acked')
                                        + (SELECT count(*) FROM tenant_b.delivery_outbox WHERE recipient IN ('b:seed:p', 'b:seed:r') AND delivery_state = 'acked')
                                        + (SELECT count(*) FROM tenant_c.delivery_outbox WHERE recipient IN ('c:seed:p', 'c:seed:r') AND delivery_state = 'acked') = 12"; then
        ok "multi-$lang: on start, the pending seed rows of tenants a, b and c were drained and acked"
    else
        nok "multi-$lang: on start, the pending seed rows of tenants a, b and c were drained and acked"
        show "$err"
        stop_relay
        return
    fi

    # rows arriving in all three, in small transactions (woken by NOTIFY)
    for round in $(seq 8); do
        for t in a b c; do
            q "$db" "SELECT count(outbox_enqueue('$t:agent:' || (g % 3), 'work', '\\x01',
                                                 outbox => 'tenant_$t.delivery_outbox'))
                       FROM generate_series(1, 4) g" >/dev/null
        done
        sessions=$(q "$ADMIN_DB" "SELECT count(*) FROM ($relay_sql) s")
        [ "${sessions:-0}" -gt "$max_sessions" ] && max_sessions=$sessions
        sleep 0.1
    done

    # cut its connection and keep it out while rows arrive: drained on
    # reconnect, without a notification
    pid1=$(q "$ADMIN_DB" "$relay_sql")
    q "$ADMIN_DB" "REVOKE CONNECT ON DATABASE $db FROM PUBLIC" >/dev/null
    q "$ADMIN_DB" "SELECT pg_terminate_backend($pid1)" >/dev/null
    for t in a b c; do
        q "$db" "SELECT count(outbox_enqueue('$t:away', 'work', '\\x02', outbox => 'tenant_$t.delivery_outbox'))
                   FROM generate_series(1, 5)" >/dev/null
    done
    sleep 0.6
    q "$ADMIN_DB" "GRANT CONNECT ON DATABASE $db TO PUBLIC" >/dev/null
    if wait_until "$TIMEOUT" "$db" "SELECT (SELECT count(*) FROM tenant_a.delivery_outbox WHERE recipient = 'a:away' AND delivery_state = 'acked')
                                        + (SELECT count(*) FROM tenant_b.delivery_outbox WHERE recipient = 'b:away' AND delivery_state = 'acked')
                                        + (SELECT count(*) FROM tenant_c.delivery_outbox WHERE recipient = 'c:away' AND delivery_state = 'acked') = 15"; then
        pid2=$(q "$ADMIN_DB" "$relay_sql")
        ok "multi-$lang: after pg_terminate_backend (backend $pid1 -> $pid2), the 15 rows enqueued in the three tenants while it was away were drained on reconnect"
    else
        nok "multi-$lang: rows enqueued while disconnected drained on reconnect"
        show "$err"
    fi

    # a tenant attached while it runs: served within WAIT_MS
    if adopt tenant_d | psql -X -q -v ON_ERROR_STOP=1 -d "$db" >>"$dir/setup.log" 2>&1 &&
        q "$db" "SELECT count(outbox_enqueue('d:agent', 'work', '\\x03', outbox => 'tenant_d.delivery_outbox'))
                   FROM generate_series(1, 4)" >/dev/null &&
        wait_until 15 "$db" "SELECT count(*) = 7 FROM tenant_d.delivery_outbox WHERE delivery_state = 'acked'"; then
        ok "multi-$lang: tenant_d, attached while the relay ran, was picked up: its 3 seed rows and 4 new ones acked"
    else
        nok "multi-$lang: tenant_d, attached while the relay ran, is served"
        show "$dir/setup.log"
        show "$err"
    fi

    local all_rows="SELECT recipient || ' ' || id, delivery_state FROM tenant_a.delivery_outbox
                    UNION ALL SELECT recipient || ' ' || id, delivery_state FROM tenant_b.delivery_outbox
                    UNION ALL SELECT recipient || ' ' || id, delivery_state FROM tenant_c.delivery_outbox
                    UNION ALL SELECT recipient || ' ' || id, delivery_state FROM tenant_d.delivery_outbox"
    if wait_until "$TIMEOUT" "$db" "SELECT bool_and(delivery_state = 'acked') FROM ($all_rows) r"; then
        ok "multi-$lang: every row of tenants a, b, c and d acked (the seed's delivered rows reclaimed by the relay's sweep first)"
    else
        nok "multi-$lang: every row of tenants a, b, c and d acked"
        q "$db" "SELECT split_part(r.line, ' ', 1), delivery_state, count(*) FROM ($all_rows) r(line, delivery_state) GROUP BY 1, 2 ORDER BY 1, 2" | sed 's/^/# /'
        show "$err"
    fi
    sessions=$(q "$ADMIN_DB" "SELECT count(*) FROM ($relay_sql) s")
    [ "${sessions:-0}" -gt "$max_sessions" ] && max_sessions=$sessions
    stop_relay

    # The recipients' view: every row pushed but the seed's acked ones,
    # nothing of tenant x or of the extension's own table.
    q "$db" "SELECT line FROM ($all_rows) r(line, s) WHERE line NOT LIKE '_:seed:k %' ORDER BY 1" >"$dir/expected.txt"
    sort -u "$out" >"$dir/got_unique.txt"
    missing=$(comm -23 "$dir/expected.txt" "$dir/got_unique.txt" | wc -l)
    extra=$(comm -13 "$dir/expected.txt" "$dir/got_unique.txt" | wc -l)
    if [ "$missing" -eq 0 ] && [ "$extra" -eq 0 ] && [ "$STOP_RC" -eq 0 ] && [ "$max_sessions" -eq 1 ]; then
        ok "multi-$lang: one process, one connection: each of the $(wc -l <"$dir/expected.txt") rows of the four tenants pushed to its recipient ($(($(wc -l <"$out") - $(wc -l <"$dir/got_unique.txt"))) at-least-once duplicates), nothing else; SIGTERM: exit 0"
    else
        nok "multi-$lang: each tenant's rows pushed, nothing else ($missing missing, $extra unexpected, exit $STOP_RC, $max_sessions sessions at most)"
        comm -3 "$dir/expected.txt" "$dir/got_unique.txt" | head -20 | sed 's/^/# /'
        show "$err"
    fi
    got=$(q "$db" "SELECT (SELECT count(*) = 8 AND bool_and(delivery_attempts = CASE WHEN recipient = 'x:seed:k' THEN 1 ELSE delivery_attempts END)
                             AND count(*) FILTER (WHERE delivery_state = 'pending' AND recipient IN ('x:seed:p', 'x:seed:r')) = 4
                             AND count(*) FILTER (WHERE delivery_state = 'delivered' AND delivery_attempts = 1) = 2
                      FROM tenant_x.delivery_outbox)
               AND (SELECT count(*) = 3 AND bool_and(delivery_state = 'pending' AND delivery_attempts = 0)
                      FROM outbox.delivery_outbox)")
    if [ "$got" = t ] && ! grep -q 'tenant_x' "$err"; then
        ok "multi-$lang: tenant_x (attached, not granted) and the extension's own outbox were never served: their rows as they were"
    else
        nok "multi-$lang: tenant_x and the extension's own outbox untouched"
        q "$db" "SELECT recipient, delivery_state, delivery_attempts FROM tenant_x.delivery_outbox" | sed 's/^/# /'
    fi
    if [ "${EXAMPLES_KEEP:-0}" != 1 ] && [ "$FAILED" -eq "$failed_before" ]; then
        q "$ADMIN_DB" "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
    fi
}

# --- the postgres_exporter queries ------------------------------------------

stop_exporter()
{
    if [ -n "$EXPORTER_PID" ]; then
        kill -TERM "$EXPORTER_PID" 2>/dev/null
        for _ in $(seq 50); do
            kill -0 "$EXPORTER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$EXPORTER_PID" 2>/dev/null
        wait "$EXPORTER_PID" 2>/dev/null
        EXPORTER_PID=
    fi
}

stop_private_cluster()
{
    if [ -n "$PRIVATE_PGDATA" ]; then
        "$PRIVATE_PG_CTL" -D "$PRIVATE_PGDATA" -m fast -w -t 60 stop >/dev/null 2>&1
        PRIVATE_PGDATA=
    fi
}

# exporter_server DIR: the server for the exporter checks, in EXP_HOST,
# EXP_PORT and EXP_USER.  delivery_outbox_activity needs the library
# preloaded: this server if it preloads it, else a throwaway cluster of our
# own in DIR/pgdata, listening on a unix socket in DIR only (stopped by
# stop_private_cluster).  On failure EXP_WHY says why.
exporter_server()
{
    local dir=$1 bindir
    EXP_HOST=${PGHOST:-/var/run/postgresql}
    EXP_PORT=${PGPORT:-5432}
    EXP_USER=${PGUSER:-$(id -un)}
    EXP_DB=$ADMIN_DB
    if q "$ADMIN_DB" "SHOW shared_preload_libraries" 2>/dev/null | grep -q delivery_outbox; then
        EXP_WHERE="this server (it preloads delivery_outbox)"
        return 0
    fi
    if [ "$(id -u)" -eq 0 ]; then
        EXP_WHY="this server does not preload delivery_outbox, and initdb refuses to run as root"
        return 1
    fi
    if ! bindir=$("${PG_CONFIG:-pg_config}" --bindir 2>/dev/null) || [ ! -x "$bindir/initdb" ]; then
        EXP_WHY="this server does not preload delivery_outbox, and initdb was not found (PG_CONFIG)"
        return 1
    fi
    rm -rf "$dir/pgdata"
    if ! "$bindir/initdb" -D "$dir/pgdata" -A trust -E UTF8 --locale=C --no-sync \
        -U "$(id -un)" >"$dir/initdb.log" 2>&1; then
        EXP_WHY="initdb failed (see $dir/initdb.log)"
        return 1
    fi
    cat >>"$dir/pgdata/postgresql.conf" <<CONF

# throwaway cluster of examples/test_examples.sh (exporter checks)
listen_addresses = ''
unix_socket_directories = '$dir'
port = $EXP_PORT
max_connections = 20
shared_preload_libraries = 'delivery_outbox'
CONF
    PRIVATE_PG_CTL=$bindir/pg_ctl
    if ! "$PRIVATE_PG_CTL" -D "$dir/pgdata" -l "$dir/server.log" -w -t 60 start \
        >"$dir/pg_ctl.log" 2>&1; then
        EXP_WHY="the cluster did not start (see $dir/server.log)"
        return 1
    fi
    PRIVATE_PGDATA=$dir/pgdata
    EXP_HOST=$dir
    EXP_USER=$(id -un)
    EXP_DB=postgres
    EXP_WHERE="a throwaway cluster with shared_preload_libraries = delivery_outbox (socket $dir)"
}

# metric FILE NAME [LABEL VALUE]: the value of series NAME (whose label
# LABEL is VALUE) in a Prometheus text exposition; empty when there is none
metric()
{
    awk -v name="$2" -v sel="${3:+$3=\"$4\"}" '
        /^#/ { next }
        {
            series = $0; sub(/ [^ ]*$/, "", series)
            n = series; sub(/\{.*/, "", n)
            if (n != name) next
            if (sel != "" && index(series, "{" sel ",") == 0 && index(series, "," sel ",") == 0 &&
                index(series, "," sel "}") == 0 && index(series, "{" sel "}") == 0) next
            print $NF; exit
        }' "$1"
}

# expect_metrics FILE NAME[{LABEL=VALUE}]=WANT ...: each series has the value
# WANT (numerically, or >=N); prints the mismatches, false if there is one
expect_metrics()
{
    local file=$1 e key want name label value got bad=0
    shift
    for e in "$@"; do
        key=${e%=*} want=${e##*=}
        case $key in *'>') key=${key%>} want=">=$want" ;; esac
        name=${key%%\{*} label='' value=''
        if [ "$key" != "$name" ]; then
            label=${key#*\{} label=${label%\}}
            value=${label#*=} label=${label%%=*}
        fi
        got=$(metric "$file" "$name" "$label" "$value")
        if ! awk -v a="$got" -v b="$want" 'BEGIN {
                if (a == "") exit 1
                if (substr(b, 1, 2) == ">=") exit !(a + 0 >= substr(b, 3) + 0)
                exit !(a + 0 == b + 0) }'; then
            diag "$key = ${got:-(none)}, expected $want"
            bad=1
        fi
    done
    [ "$bad" -eq 0 ]
}

free_port()
{
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# run_exporter: the postgres_exporter query file against an outbox with rows
# in every state, dead letters, redeliveries and rows waiting for their
# time, and a second outbox with dead letters of its own: run by
# check_queries.py as README's monitoring role, then scraped through the real
# exporter.
run_exporter()
{
    local db=examples_exporter dir=$WORK/exporter failed_before=$FAILED
    local hport url version tries e
    mkdir -p "$dir"
    if ! exporter_server "$dir"; then
        skip "exporter: queries.yaml checked and scraped" "$EXP_WHY"
        return
    fi
    diag "exporter: on $EXP_WHERE"
    # that server's PG* variables, for q, psql and check_queries.py
    local -x PGHOST=$EXP_HOST PGPORT=$EXP_PORT PGUSER=$EXP_USER
    if ! { q "$EXP_DB" "DROP DATABASE IF EXISTS $db WITH (FORCE)" &&
           q "$EXP_DB" "CREATE DATABASE $db" &&
           psql -X -q -v ON_ERROR_STOP=1 -d "$db" <<SQL
CREATE EXTENSION delivery_outbox;
CREATE SCHEMA tenant_c;
SELECT outbox_create('tenant_c') \g /dev/null
DO \$\$BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$MONITOR') THEN
        CREATE ROLE $MONITOR LOGIN;
    END IF;
END\$\$;
-- README's monitoring role
GRANT USAGE ON SCHEMA public, tenant_c TO $MONITOR;
GRANT EXECUTE ON FUNCTION outbox_stats(regclass), outbox_activity() TO $MONITOR;
GRANT SELECT ON delivery_outbox_activity, delivery_outbox_tables TO $MONITOR;
GRANT SELECT (id, recipient, kind, tenant_id, delivery_state, delivery_attempts,
              created_at, delivered_at, acked_at, not_before)
  ON delivery_outbox TO $MONITOR;
-- outbox_stats on another outbox: SELECT on the columns it reads
GRANT SELECT (recipient, delivery_state, created_at, delivered_at)
  ON tenant_c.delivery_outbox TO $MONITOR;
-- ids 1-10 for agent:a, 11-15 for agent:b, 16 for agent:a enqueued 5
-- minutes ago
SELECT count(outbox_enqueue(CASE WHEN g <= 10 THEN 'agent:a' ELSE 'agent:b' END,
                            'work', '\\x00')) FROM generate_series(1, 15) g;
INSERT INTO delivery_outbox (recipient, kind, payload, created_at)
VALUES ('agent:a', 'work', '\\x00', now() - interval '5 minutes');
-- 1-3 claimed, 1 and 2 acked
SELECT count(*) FROM outbox_claim(3);
SELECT outbox_ack(ARRAY[1, 2]::bigint[]);
-- 11-13 claimed: 11 refused (a dead letter), 12 released for an hour (a
-- redelivery, waiting), 13 reclaimed (a redelivery)
SELECT count(*) FROM outbox_claim(3, 'agent:b');
SELECT outbox_reject(ARRAY[11]::bigint[], error => 'agent:b refused it');
SELECT outbox_release(ARRAY[12]::bigint[], retry_after => '1 hour', error => 'agent:b is down');
SELECT outbox_reclaim_recipient('agent:b');
-- 17, scheduled an hour ahead (waiting)
SELECT outbox_enqueue('agent:c', 'work', '\\x00', not_before => now() + interval '1 hour');
-- so: 13 pending (8 for agent:a), 2 of them waiting, 1 delivered, 2 acked,
-- 1 dead letter.  tenant_c.delivery_outbox: 2 rows, both refused.
SELECT count(outbox_enqueue('agent:t', 'work', '\\x00', outbox => 'tenant_c.delivery_outbox'))
  FROM generate_series(1, 2);
SELECT count(*) FROM outbox_claim(2, outbox => 'tenant_c.delivery_outbox');
SELECT outbox_reject(ARRAY[1, 2]::bigint[], error => 'refused', outbox => 'tenant_c.delivery_outbox');
SQL
         } >"$dir/setup.log" 2>&1; then
        nok "exporter: database with rows in every state, dead letters and a monitoring role"
        show "$dir/setup.log"
        return
    fi

    # What the queries must report, for check_queries.py and the scrape.
    local -a state=(
        delivery_outbox_pending=13
        delivery_outbox_waiting=2
        delivery_outbox_delivered=1
        'delivery_outbox_oldest_pending_age_seconds>=299'
        delivery_outbox_max_open_attempts=1
        'delivery_outbox_recipient_pending{recipient=agent:a}=8'
        'delivery_outbox_recipient_delivered{recipient=agent:a}=1'
        delivery_outbox_notify_queue_limit=0.5
        delivery_outbox_relays_connected=0
    )
    local -a dead=(
        'delivery_outbox_dead_letters{outbox=delivery_outbox}=1'
        'delivery_outbox_dead_letters{outbox=tenant_c.delivery_outbox}=2'
        'delivery_outbox_activity_dead_lettered{outbox=delivery_outbox}=1'
        'delivery_outbox_activity_dead_lettered{outbox=tenant_c.delivery_outbox}=2'
        'delivery_outbox_activity_redriven{outbox=delivery_outbox}=0'
    )
    local -a redelivered=(
        'delivery_outbox_activity_released{outbox=delivery_outbox}=1'
        'delivery_outbox_activity_reclaimed{outbox=delivery_outbox}=1'
        'delivery_outbox_activity_redeliveries{outbox=delivery_outbox}=2'
        'delivery_outbox_activity_redeliveries{outbox=tenant_c.delivery_outbox}=0'
    )
    local -a expect_args=()
    for e in "${state[@]}" "${dead[@]}" "${redelivered[@]}"; do
        # check_queries.py writes ">=" after the "="
        case $e in *'>='*) e=${e%%>=*}'=>='${e#*>=} ;; esac
        expect_args+=(--expect "$e")
    done
    if env PGDATABASE="$db" PGUSER="$MONITOR" "$PYTHON" \
        "$HERE/postgres_exporter/check_queries.py" "$HERE/postgres_exporter/queries.yaml" \
        "${expect_args[@]}" \
        --expect delivery_outbox_recipient_recipient=agent:a \
        --expect 'delivery_outbox_oldest_delivered_age_seconds=>=0' \
        --expect 'delivery_outbox_notify_queue_usage=>=0' \
        >"$dir/check.log" 2>&1; then
        ok "exporter: every query in postgres_exporter/queries.yaml runs as the monitoring role and reports the expected values"
    else
        nok "exporter: queries.yaml as the monitoring role"
        show "$dir/check.log" 60
    fi

    # -- the real exporter, scraped with curl -------------------------------
    if [ ! -x "$EXPORTER" ]; then
        skip "exporter: scraped through prometheus-postgres-exporter" \
            "$EXPORTER not found (apt-get install prometheus-postgres-exporter)"
    elif ! command -v curl >/dev/null 2>&1; then
        skip "exporter: scraped through prometheus-postgres-exporter" \
            "curl not found (apt-get install curl)"
    # (the help read whole first: grep -q stops reading at the match, and
    # under pipefail the exporter's SIGPIPE would fail the test)
    elif ! grep -q -- '--extend.query-path' <<<"$("$EXPORTER" --help 2>&1)"; then
        skip "exporter: scraped through prometheus-postgres-exporter" \
            "$EXPORTER has no --extend.query-path flag"
    else
        version=$("$EXPORTER" --version 2>&1 | sed -n 's/^postgres_exporter, version \([^ ]*\).*/\1/p')
        hport=$(free_port)
        url=http://127.0.0.1:$hport/metrics
        # Only queries.yaml: the built-in metrics and collectors off.
        env DATA_SOURCE_NAME="host=$EXP_HOST port=$EXP_PORT user=$MONITOR dbname=$db sslmode=disable" \
            "$EXPORTER" --web.listen-address="127.0.0.1:$hport" \
            --extend.query-path="$HERE/postgres_exporter/queries.yaml" \
            --disable-default-metrics --disable-settings-metrics \
            --no-collector.database --no-collector.bgwriter \
            >"$dir/exporter.log" 2>&1 &
        EXPORTER_PID=$!
        rm -f "$dir/metrics.txt"
        for tries in $(seq 100); do
            kill -0 "$EXPORTER_PID" 2>/dev/null || break
            if curl -sf --max-time 5 -o "$dir/metrics.txt" "$url" &&
                grep -q '^delivery_outbox_' "$dir/metrics.txt"; then
                break
            fi
            rm -f "$dir/metrics.txt"
            sleep 0.1
        done
        if [ ! -s "$dir/metrics.txt" ]; then
            nok "exporter: prometheus-postgres-exporter ${version:-?} answers on $url"
            show "$dir/exporter.log"
        else
            diag "exporter: prometheus-postgres-exporter ${version:-?} (pid $EXPORTER_PID) on $url, DATA_SOURCE_NAME host=$EXP_HOST user=$MONITOR; scraped after $tries tries"
            if expect_metrics "$dir/metrics.txt" pg_up=1 pg_exporter_last_scrape_error=0 \
                pg_exporter_user_queries_load_error=0 "${state[@]}"; then
                ok "exporter: prometheus-postgres-exporter --extend.query-path=queries.yaml as the monitoring role: pg_up 1, every query ran (last_scrape_error 0), delivery_outbox_waiting 2 of 13 pending, the backlog as expected"
            else
                nok "exporter: prometheus-postgres-exporter ran every query of queries.yaml with the expected backlog and waiting rows"
                grep '^delivery_outbox_[a-z_]*{' "$dir/metrics.txt" | grep -v '_activity_\|_dead_' | sed 's/^/# /'
                show "$dir/exporter.log"
            fi
            if expect_metrics "$dir/metrics.txt" "${dead[@]}"; then
                ok "exporter: scraped dead letters per outbox: delivery_outbox_dead_letters 1 (delivery_outbox) and 2 (tenant_c.delivery_outbox), delivery_outbox_activity_dead_lettered the same"
            else
                nok "exporter: scraped dead letters per outbox"
                grep '^delivery_outbox_.*dead' "$dir/metrics.txt" | sed 's/^/# /'
            fi
            if expect_metrics "$dir/metrics.txt" "${redelivered[@]}"; then
                ok "exporter: scraped redeliveries: released 1 + reclaimed 1 = delivery_outbox_activity_redeliveries 2 (0 in tenant_c.delivery_outbox)"
            else
                nok "exporter: scraped redeliveries"
                grep '^delivery_outbox_activity' "$dir/metrics.txt" | sed 's/^/# /'
            fi
        fi
        stop_exporter
    fi

    if [ "${EXAMPLES_KEEP:-0}" != 1 ] && [ "$FAILED" -eq "$failed_before" ]; then
        if [ -n "$PRIVATE_PGDATA" ]; then
            stop_private_cluster
            rm -rf "$dir/pgdata"
        else
            q "$EXP_DB" "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
        fi
    fi
    stop_private_cluster
}

LANGS=("$@")
[ ${#LANGS[@]} -gt 0 ] || LANGS=(python node c rust multi-python multi-rust exporter)
for lang in "${LANGS[@]}"; do
    case $lang in
    python|node|c|rust) run_lang "$lang" ;;
    multi-python|multi-rust) run_multi "${lang#multi-}" ;;
    exporter) run_exporter ;;
    *) nok "unknown example '$lang' (python, node, c, rust, multi-python, multi-rust, exporter)" ;;
    esac
done
if [ "${EXAMPLES_KEEP:-0}" != 1 ] && [ "$FAILED" -eq 0 ]; then
    if ! q "$ADMIN_DB" "DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1 ||
        ! q "$ADMIN_DB" "DROP ROLE IF EXISTS $MONITOR" >/dev/null 2>&1; then
        diag "roles $ROLE, $MONITOR kept"
    fi
fi
echo "1..$T"
[ "$FAILED" -eq 0 ]
