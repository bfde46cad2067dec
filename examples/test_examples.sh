#!/usr/bin/env bash
#
# examples/test_examples.sh -- run every relay and producer example for real
#
# For each language (python, node, c, rust), in its own database
# examples_<lang>:
#   1. prepare: python3-psycopg importable / `npm ci` / `make` (no warnings)
#      / `cargo build --release` offline, from Debian's packaged crates (no
#      warnings);
#   2. CREATE EXTENSION delivery_outbox; a relay role with README's GRANTs
#      (rust: the extension in schema outbox, and the relay works a created
#      outbox, public.delivery_outbox, which the role has UPDATE and SELECT
#      on; its producer enqueues there too);
#   3. enqueue half of EXAMPLES_ROWS rows across 7 recipients, start the
#      relay (as the relay role, every 7th push failing: FAIL_EVERY=7);
#   4. mid-run, REVOKE CONNECT and pg_terminate_backend() the relay's session,
#      enqueue a quarter of the rows while it cannot reconnect (their
#      notifications reach nobody), GRANT CONNECT again: the relay must back
#      off, reconnect and drain them without a notification;
#   5. enqueue the last quarter in small transactions (woken by NOTIFY);
#   6. wait until every row is acked (bounded), SIGTERM the relay: it must
#      exit 0 promptly and leave no session behind;
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
#      then acked with two attempts;
#   9. run the producer example: the committed order and its outbox row
#      exist, the rolled-back ones do not.
#
# Output is TAP ("ok N - ...", "not ok N - ...", "# ..." diagnostics, "1..N"
# at the end); exit status 1 if a test failed.  scripts/test.sh runs it as
# its "examples" suite; by hand it needs a server reachable through the PG*
# variables where the current role is a superuser, roles may log in without
# a password (trust/peer for local connections) and delivery_outbox is
# installed (make install):
#
#   PGHOST=/tmp PGPORT=5432 examples/test_examples.sh [python] [node] [c]
#
# Knobs: EXAMPLES_ROWS (200), EXAMPLES_TIMEOUT (60 s per wait),
# EXAMPLES_WORK (directory for logs; default a new temporary one, removed
# unless a test failed), EXAMPLES_KEEP=1 (keep the databases and the role),
# PG_CONFIG (for the C build), NPM (npm command).

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROWS=${EXAMPLES_ROWS:-200}
TIMEOUT=${EXAMPLES_TIMEOUT:-60}
ROLE=delivery_outbox_example_relay
MONITOR=delivery_outbox_example_monitor
PYTHON=/usr/bin/python3
NPM=${NPM:-npm}
ADMIN_DB=${PGDATABASE:-postgres}

if [ -n "${EXAMPLES_WORK:-}" ]; then
    WORK=$EXAMPLES_WORK
    mkdir -p "$WORK"
    OWN_WORK=0
else
    WORK=$(mktemp -d /tmp/outbox-examples.XXXXXX)
    OWN_WORK=1
fi

T=0
FAILED=0
RELAY_PID=

ok()   { T=$((T + 1)); echo "ok $T - $*"; [ -n "${EXAMPLES_DEBUG:-}" ] && echo "#   at $(date +%T.%N)"; }
nok()  { T=$((T + 1)); FAILED=$((FAILED + 1)); echo "not ok $T - $*"; }
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
        # cargo's home and the build in the work directory
        (cd "$HERE/rust" &&
            CARGO_HOME=$WORK/cargo-home CARGO_TARGET_DIR=$WORK/rust-target \
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
    rust)   RELAY=("$WORK/rust-target/release/relay") ;;
    esac
}

producer_cmd()
{
    case $1 in
    python) PRODUCER=("$PYTHON" "$HERE/python/producer.py") ;;
    node)   PRODUCER=(node "$HERE/node/producer.js") ;;
    c)      PRODUCER=("$HERE/c/producer") ;;
    rust)   PRODUCER=("$WORK/rust-target/release/producer") ;;
    esac
}

setup_db()
{
    local db=$1
    q "$ADMIN_DB" "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null &&
    q "$ADMIN_DB" "CREATE DATABASE $db" >/dev/null || return 1
    if [ "$db" = examples_rust ]; then
        setup_db_created_outbox "$db"
        return
    fi
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" <<SQL
CREATE EXTENSION delivery_outbox;
DO \$\$BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
        CREATE ROLE $ROLE LOGIN;
    END IF;
END\$\$;
-- README's relay role
GRANT USAGE ON SCHEMA public TO $ROLE;
GRANT EXECUTE ON FUNCTION
    outbox_claim(integer, text, text, regclass),
    outbox_ack(bigint, text, regclass),
    outbox_ack(bigint[], text, regclass),
    outbox_release(bigint[], interval, text, regclass),
    outbox_reject(bigint[], text, regclass),
    outbox_next_due(text, regclass),
    outbox_reclaim(interval, integer, regclass),
    outbox_reclaim_recipient(text, text, regclass),
    outbox_replay(text, bigint, integer, text, regclass)
  TO $ROLE;
SQL
}

# setup_db_created_outbox DB: the extension in schema outbox, a created
# outbox public.delivery_outbox that the checks below read as
# "delivery_outbox" and the relay works (search_path public, outbox), and
# the relay role with the 1.2 GRANTs: EXECUTE on the functions, UPDATE and
# SELECT on that table
setup_db_created_outbox()
{
    local db=$1
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" <<SQL
CREATE SCHEMA outbox;
CREATE EXTENSION delivery_outbox SCHEMA outbox;
ALTER DATABASE $db SET search_path = public, outbox;
SELECT outbox.outbox_create('public') \g /dev/null
DO \$\$BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
        CREATE ROLE $ROLE LOGIN;
    END IF;
END\$\$;
GRANT USAGE ON SCHEMA public, outbox TO $ROLE;
GRANT EXECUTE ON FUNCTION
    outbox.outbox_claim(integer, text, text, regclass),
    outbox.outbox_ack(bigint, text, regclass),
    outbox.outbox_ack(bigint[], text, regclass),
    outbox.outbox_release(bigint[], interval, text, regclass),
    outbox.outbox_reject(bigint[], text, regclass),
    outbox.outbox_next_due(text, regclass),
    outbox.outbox_reclaim(interval, integer, regclass),
    outbox.outbox_reclaim_recipient(text, text, regclass),
    outbox.outbox_replay(text, bigint, integer, text, regclass)
  TO $ROLE;
GRANT UPDATE, SELECT ON public.delivery_outbox TO $ROLE;
SQL
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
        q "$db" "SELECT * FROM outbox_stats()" | sed 's/^/# /'
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

    OUTBOX_ARG=
    RUN_OUTBOX=
    if [ "$lang" = rust ]; then
        OUTBOX_ARG=", outbox => 'delivery_outbox'"
        RUN_OUTBOX=delivery_outbox
    fi

    t0=$SECONDS
    if prepare "$lang"; then
        ok "$lang: example prepared ($(tail -n 1 "$dir/prepare.log"))"
    else
        nok "$lang: example prepared"
        show "$dir/prepare.log"
        return
    fi
    if setup_db "$db" >"$dir/setup.log" 2>&1; then
        ok "$lang: database $db with CREATE EXTENSION delivery_outbox and a relay role"
    else
        nok "$lang: database $db with CREATE EXTENSION delivery_outbox and a relay role"
        show "$dir/setup.log"
        return
    fi

    # -- the relay --------------------------------------------------------
    enqueue "$db" 1 "$half"
    relay_cmd "$lang"
    env PGDATABASE="$db" PGUSER="$ROLE" PGAPPNAME="$app" OUTBOX="$RUN_OUTBOX" \
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
        "SELECT count(*) >= $((half / 5)) FROM delivery_outbox WHERE delivery_state = 'acked'"; then
        # One session: find the relay's backend, lock the relay out, cut
        # its connection, enqueue while it is away.
        IFS='|' read -r pid1 acked_at_kill < <(psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$db" <<SQL
SELECT pid, (SELECT count(*) FROM delivery_outbox WHERE delivery_state = 'acked')
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
        "SELECT count(*) = $((half + quarter)) FROM delivery_outbox WHERE delivery_state = 'acked'"; then
        ok "$lang: the $quarter rows enqueued while it was disconnected were drained after reconnecting"
    else
        nok "$lang: the $quarter rows enqueued while it was disconnected were drained after reconnecting"
        q "$db" "SELECT * FROM outbox_stats()" | sed 's/^/# /'
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
            AND count(*) = $ROWS FROM delivery_outbox"; then
        ok "$lang: all $ROWS rows acked"
    else
        nok "$lang: all $ROWS rows acked within ${TIMEOUT}s"
        q "$db" "SELECT * FROM outbox_stats()" | sed 's/^/# /'
        show "$err"
    fi

    stop_relay
    if [ "$STOP_RC" -eq 0 ] && grep -q 'stopped:' "$err" &&
        [ "$(q "$ADMIN_DB" "SELECT count(*) FROM ($relay_sql) s")" = 0 ]; then
        ok "$lang: SIGTERM stops the relay cleanly (exit 0, session closed)"
    else
        nok "$lang: SIGTERM stops the relay cleanly (exit status $STOP_RC)"
        show "$err"
    fi

    # The recipients' view: every row, to its recipient, at least once.
    q "$db" "SELECT recipient || ' ' || id FROM delivery_outbox ORDER BY 1" >"$dir/expected.txt"
    sort "$out" >"$dir/got.txt"
    sort -u "$out" >"$dir/got_unique.txt"
    n_lines=$(wc -l <"$dir/got.txt")
    n_unique=$(wc -l <"$dir/got_unique.txt")
    dups=$((n_lines - n_unique))
    missing=$(comm -23 "$dir/expected.txt" "$dir/got_unique.txt" | wc -l)
    extra=$(comm -13 "$dir/expected.txt" "$dir/got_unique.txt" | wc -l)
    failures=$(grep -c 'push failed' "$err")
    n_acked=$(q "$db" "SELECT count(*) FROM delivery_outbox WHERE delivery_state = 'acked'")
    diag "$lang: recipients got $n_lines pushes of $ROWS rows: $dups duplicates (at-least-once), $failures injected push failures released and retried"
    if [ "$missing" -eq 0 ] && [ "$extra" -eq 0 ] && [ "$n_unique" -eq "$ROWS" ] &&
        [ "$n_acked" -eq "$ROWS" ]; then
        ok "$lang: each recipient got each of its rows exactly once, modulo $dups at-least-once duplicates"
    else
        nok "$lang: each recipient got each of its rows ($missing missing, $extra unexpected)"
        comm -3 "$dir/expected.txt" "$dir/got_unique.txt" | head -20 | sed 's/^/# /'
    fi
    if [ "$failures" -gt 0 ] &&
        [ "$(q "$db" "SELECT sum(delivery_attempts) - count(*) >= $failures FROM delivery_outbox")" = t ]; then
        ok "$lang: failed pushes were released (outbox_release) and delivered on a later attempt"
    else
        nok "$lang: failed pushes were released and delivered later ($failures failures logged)"
        show "$err"
    fi

    # -- the delivery policy: refused and failed pushes ------------------
    run_policy "$lang" "$db" "$app"

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

    dt=$((SECONDS - t0))
    diag "$lang: ${dt}s"
    if [ "${EXAMPLES_KEEP:-0}" != 1 ] && [ "$FAILED" -eq "$failed_before" ]; then
        q "$ADMIN_DB" "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
    fi
}

# The postgres_exporter query file, run as README's monitoring role against
# an outbox with rows in every state.
run_exporter()
{
    local db=examples_exporter dir=$WORK/exporter failed_before=$FAILED
    mkdir -p "$dir"
    if ! { q "$ADMIN_DB" "DROP DATABASE IF EXISTS $db WITH (FORCE)" &&
           q "$ADMIN_DB" "CREATE DATABASE $db" &&
           psql -X -q -v ON_ERROR_STOP=1 -d "$db" <<SQL
CREATE EXTENSION delivery_outbox;
DO \$\$BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$MONITOR') THEN
        CREATE ROLE $MONITOR LOGIN;
    END IF;
END\$\$;
-- README's monitoring role
GRANT USAGE ON SCHEMA public TO $MONITOR;
GRANT EXECUTE ON FUNCTION outbox_stats(regclass) TO $MONITOR;
GRANT SELECT (id, recipient, kind, tenant_id, delivery_state, delivery_attempts,
              created_at, delivered_at, acked_at)
  ON delivery_outbox TO $MONITOR;
-- 10 rows for agent:a, 5 for agent:b, one for agent:a enqueued 5 minutes ago
SELECT count(outbox_enqueue(CASE WHEN g <= 10 THEN 'agent:a' ELSE 'agent:b' END,
                            'work', '\\x00')) FROM generate_series(1, 15) g;
INSERT INTO delivery_outbox (recipient, kind, payload, created_at)
VALUES ('agent:a', 'work', '\\x00', now() - interval '5 minutes');
-- 3 of agent:a's claimed, 2 of them acked: 13 pending (8 for agent:a),
-- 1 delivered, 2 acked
SELECT count(*) FROM outbox_claim(3);
SELECT outbox_ack(ARRAY[1, 2]::bigint[]);
SQL
         } >"$dir/setup.log" 2>&1; then
        nok "exporter: database with rows in every state and a monitoring role"
        show "$dir/setup.log"
        return
    fi
    if env PGDATABASE="$db" PGUSER="$MONITOR" "$PYTHON" \
        "$HERE/postgres_exporter/check_queries.py" "$HERE/postgres_exporter/queries.yaml" \
        --expect delivery_outbox_pending=13 \
        --expect delivery_outbox_delivered=1 \
        --expect 'delivery_outbox_oldest_pending_age_seconds=>=299' \
        --expect 'delivery_outbox_oldest_delivered_age_seconds=>=0' \
        --expect delivery_outbox_max_open_attempts=1 \
        --expect delivery_outbox_recipient_recipient=agent:a \
        --expect delivery_outbox_recipient_pending=8 \
        --expect delivery_outbox_recipient_delivered=1 \
        --expect 'delivery_outbox_notify_queue_usage=>=0' \
        --expect delivery_outbox_notify_queue_limit=0.5 \
        --expect delivery_outbox_relays_connected=0 \
        >"$dir/check.log" 2>&1; then
        ok "exporter: every query in postgres_exporter/queries.yaml runs as the monitoring role and reports the expected values"
    else
        nok "exporter: queries.yaml as the monitoring role"
        show "$dir/check.log" 60
    fi
    if [ "${EXAMPLES_KEEP:-0}" != 1 ] && [ "$FAILED" -eq "$failed_before" ]; then
        q "$ADMIN_DB" "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
    fi
}

LANGS=("$@")
[ ${#LANGS[@]} -gt 0 ] || LANGS=(python node c rust exporter)
for lang in "${LANGS[@]}"; do
    case $lang in
    python|node|c|rust) run_lang "$lang" ;;
    exporter) run_exporter ;;
    *) nok "unknown example '$lang' (python, node, c, rust, exporter)" ;;
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
