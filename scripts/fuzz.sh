#!/usr/bin/env bash
#
# scripts/fuzz.sh -- a bounded fuzz run against the installed delivery_outbox
#
# Starts a scratch cluster of its own (initdb in a temporary directory under
# /tmp, a unix socket there only, the library preloaded with the worker
# serving the database "fuzz" and sweeping every second), makes outboxes
# of every kind with rows in every state (scripts/fuzz/setup.sql), then:
#   1. sqlsmith (Debian package), bounded, once as the superuser and once
#      as a relay role; skipped (ok # skip) when it cannot be installed;
#   2. scripts/fuzz/fuzz.py: sessions in parallel calling every outbox
#      function and writing the tables with hostile arguments, and one
#      session whose rows are tracked ("keep:" recipients);
#   3. checks: no backend died by a signal, no PANIC or assertion, no
#      XX000-class error from the extension, the state invariants on every
#      outbox and dead-letter table, the registry, the indexes (amcheck),
#      outbox_stats against the rows, and no committed tracked row lost.
# It prints TAP ("ok N - ...", "not ok N - ...", the plan last) and exits
# non-zero when a check failed.  The cluster is stopped and its directory
# removed on exit (KEEP_TMP=1 keeps it, with the server log and every
# finding's statement).
#
# It tests what is installed for PG_CONFIG: build and `make install` first
# (scripts/test.sh does).  As root, the cluster and the clients run as the
# postgres OS user.
#
# Knobs (environment):
#   PG_CONFIG              default /usr/lib/postgresql/15/bin/pg_config
#   FUZZ_SECONDS           how long the generator runs (default 45)
#   FUZZ_STATEMENTS        stop the generator after this many statements
#                          (default 0: only FUZZ_SECONDS bounds it)
#   FUZZ_SESSIONS          hostile sessions besides the tracked one (default 3)
#   FUZZ_SQLSMITH_QUERIES  sqlsmith queries per role (default 2500; 0 skips)
#   FUZZ_SEED              random seed (default: from the clock; printed)
#   FUZZ_PORT              the cluster's port (default 54361; its socket is
#                          in the private directory, so it clashes with
#                          nothing)
#   FUZZ_INSTALL=0         do not apt-get install a missing sqlsmith
#   FUZZ_TRACE=1           write every generated statement, with its
#                          SQLSTATE, to trace-<session>.sql (with KEEP_TMP=1)
#   KEEP_TMP=1             keep the temporary directory
# A longer run: FUZZ_SECONDS=1800 FUZZ_SQLSMITH_QUERIES=200000 scripts/fuzz.sh

set -uo pipefail

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
FUZZ_SECONDS=${FUZZ_SECONDS:-45}
FUZZ_STATEMENTS=${FUZZ_STATEMENTS:-0}
FUZZ_SESSIONS=${FUZZ_SESSIONS:-3}
FUZZ_SQLSMITH_QUERIES=${FUZZ_SQLSMITH_QUERIES:-2500}
FUZZ_SEED=${FUZZ_SEED:-$(( $(date +%s) % 1000000 ))}
FUZZ_PORT=${FUZZ_PORT:-54361}
HERE=$(cd "$(dirname "$0")" && pwd)

TESTNO=0
FAILED=0
tap_ok()   { TESTNO=$((TESTNO + 1)); echo "ok $TESTNO - $*"; }
tap_fail() { TESTNO=$((TESTNO + 1)); echo "not ok $TESTNO - $*"; FAILED=$((FAILED + 1)); }
tap_skip() { TESTNO=$((TESTNO + 1)); echo "ok $TESTNO # skip $*"; }
note()     { printf '# %s\n' "$@"; }

# tap_lines: number the "ok - ..." / "not ok - ..." lines of fuzz.py, pass
# its comments through.
tap_lines()
{
    local line
    while IFS= read -r line; do
        case $line in
            "ok - "*)     tap_ok "${line#ok - }" ;;
            "ok # skip "*) tap_skip "${line#ok # skip }" ;;
            "not ok - "*) tap_fail "${line#not ok - }" ;;
            *)            printf '# %s\n' "$line" ;;
        esac
    done
}

WORK=
CLUSTER_UP=0
finish()
{
    local rc=$?
    trap - EXIT INT TERM HUP
    if [ "$CLUSTER_UP" = 1 ]; then
        as_user pg_ctl -D "$WORK/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
            note "pg_ctl stop failed"
    fi
    if [ -n "$WORK" ] && [ -d "$WORK" ]; then
        if [ "${KEEP_TMP:-0}" = 1 ]; then
            note "kept $WORK (KEEP_TMP=1)"
        else
            rm -rf "$WORK"
        fi
    fi
    echo "1..$TESTNO"
    if [ "$FAILED" -gt 0 ] || [ "$rc" -ne 0 ]; then exit 1; fi
    exit 0
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

bail() { tap_fail "$*"; exit 1; }

if [ "$(id -u)" -eq 0 ]; then RUN_USER=postgres; else RUN_USER=$(id -un); fi
[ -x "$PG_CONFIG" ] || bail "PG_CONFIG=$PG_CONFIG is not an executable pg_config"
BINDIR=$("$PG_CONFIG" --bindir)
if [ ! -f "$("$PG_CONFIG" --pkglibdir)/delivery_outbox.so" ] ||
    [ ! -f "$("$PG_CONFIG" --sharedir)/extension/delivery_outbox.control" ]; then
    bail "delivery_outbox is not installed for $PG_CONFIG (make install first)"
fi

# as_user CMD...: CMD as the cluster's OS user, clean environment.
as_user()
{
    local -a cmd=(env -i -C "${WORK:-/tmp}" "PATH=$BINDIR:/usr/bin:/bin"
                  "HOME=${WORK:-/tmp}" LANG=C.UTF-8 "PGHOST=$WORK/sock"
                  "PGPORT=$FUZZ_PORT" "PGDATABASE=fuzz" "PGUSER=$RUN_USER" "$@")
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u "$RUN_USER" -- "${cmd[@]}"
    else
        "${cmd[@]}"
    fi
}

# sqlsmith: the Debian package, installed when missing (as root, or sudo).
SQLSMITH=$(command -v sqlsmith || true)
if [ -z "$SQLSMITH" ] && [ "$FUZZ_SQLSMITH_QUERIES" -gt 0 ] && [ "${FUZZ_INSTALL:-1}" != 0 ]; then
    note "installing sqlsmith"
    if [ "$(id -u)" -eq 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q sqlsmith >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 &&
              DEBIAN_FRONTEND=noninteractive apt-get install -y -q sqlsmith >/dev/null 2>&1; }
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -q sqlsmith >/dev/null 2>&1
    fi
    SQLSMITH=$(command -v sqlsmith || true)
fi
# (python3 as the clients run it: the system's, from a clean PATH)
as_user python3 -c 'import psycopg' 2>/dev/null ||
    bail "python3-psycopg (psycopg 3) is missing: apt-get install python3-psycopg"

WORK=$(mktemp -d /tmp/delivery_outbox_fuzz.XXXXXX) || bail "mktemp failed"
mkdir -p "$WORK/sock"
cp "$HERE/fuzz/setup.sql" "$HERE/fuzz/fuzz.py" "$WORK/"
[ "$(id -u)" -eq 0 ] && chown -R "$RUN_USER:" "$WORK"
chmod 700 "$WORK"
LOG=$WORK/postgres.log
note "seed $FUZZ_SEED, generator ${FUZZ_SECONDS}s / ${FUZZ_STATEMENTS} statements," \
     "$FUZZ_SESSIONS hostile sessions, sqlsmith $FUZZ_SQLSMITH_QUERIES queries per role," \
     "work directory $WORK"

as_user initdb -D "$WORK/data" -A trust -E UTF8 --locale=C --no-sync \
    -U "$RUN_USER" >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log"; bail "initdb"; }
cat >>"$WORK/data/postgresql.conf" <<EOF

# scripts/fuzz.sh
listen_addresses = ''
unix_socket_directories = '$WORK/sock'
port = $FUZZ_PORT
max_connections = 40
max_prepared_transactions = 10
fsync = off
shared_preload_libraries = 'delivery_outbox'
delivery_outbox.database = 'fuzz'
delivery_outbox.sweep_interval = '1s'
delivery_outbox.reclaim_after = '2s'
log_line_prefix = '%m [%p] %e '
log_error_verbosity = verbose
log_min_messages = warning
log_min_error_statement = error
EOF
as_user pg_ctl -D "$WORK/data" -l "$LOG" -w -t 60 start >"$WORK/pg_ctl.log" 2>&1 ||
    { cat "$WORK/pg_ctl.log" "$LOG"; bail "the scratch cluster did not start"; }
CLUSTER_UP=1
psql_q() { as_user psql -X -q -v ON_ERROR_STOP=1 "$@"; }

if psql_q -d postgres -c 'CREATE DATABASE fuzz' >"$WORK/setup.log" 2>&1 &&
    psql_q -f "$WORK/setup.sql" >>"$WORK/setup.log" 2>&1; then
    tap_ok "set-up: outboxes of every kind, rows in every state, the documented roles"
else
    cat "$WORK/setup.log"
    bail "set-up (scripts/fuzz/setup.sql)"
fi
# the worker starts serving the database once it exists: wait for it
for _ in $(seq 1 30); do
    WORKER_PIDS=$(psql_q -At -c "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity WHERE backend_type LIKE 'delivery_outbox%'")
    [ -n "$WORKER_PIDS" ] && break
    sleep 0.5
done
if [ -n "$WORKER_PIDS" ]; then
    tap_ok "the library is preloaded and its worker serves the database (pid $WORKER_PIDS)"
else
    tap_fail "no delivery_outbox worker in pg_stat_activity"
fi

# sqlsmith, as the superuser and as the relay role.  It runs each query in
# a transaction it rolls back, with its own statement_timeout of 1 s.
for who in "$RUN_USER" fuzz_relay; do
    if [ "$FUZZ_SQLSMITH_QUERIES" -le 0 ]; then
        tap_skip "sqlsmith as $who: FUZZ_SQLSMITH_QUERIES=0"
    elif [ -z "$SQLSMITH" ]; then
        tap_skip "sqlsmith as $who: sqlsmith is not installed (apt-get install sqlsmith)"
    else
        start=$(date +%s)
        as_user timeout -k 10 $((60 + FUZZ_SQLSMITH_QUERIES / 10)) "$SQLSMITH" \
            "--target=host=$WORK/sock port=$FUZZ_PORT dbname=fuzz user=$who" \
            "--seed=$FUZZ_SEED" "--max-queries=$FUZZ_SQLSMITH_QUERIES" \
            >"$WORK/sqlsmith-$who.log" 2>&1
        rc=$?
        note "sqlsmith as $who: exit $rc in $(( $(date +%s) - start ))s"
        if as_user psql -X -At -c 'SELECT 1' >/dev/null 2>&1; then
            tap_ok "sqlsmith as $who: $FUZZ_SQLSMITH_QUERIES queries, the server still answers"
        else
            tap_fail "sqlsmith as $who: the server no longer answers (exit $rc)"
        fi
    fi
done

# the generator, then the checks on the rows
tap_lines < <(as_user python3 "$WORK/fuzz.py" run --seconds "$FUZZ_SECONDS" \
    --statements "$FUZZ_STATEMENTS" --sessions "$FUZZ_SESSIONS" \
    --seed "$FUZZ_SEED" --state "$WORK/keep.json" \
    --findings "$WORK/findings.sql" ${FUZZ_TRACE:+--trace "$WORK/trace"} 2>&1)
tap_lines < <(as_user python3 "$WORK/fuzz.py" check --state "$WORK/keep.json" \
    --worker-pids "$WORKER_PIDS" 2>&1)

# the server log: no backend died, nothing internal from the extension
tap_lines < <(as_user python3 "$WORK/fuzz.py" log --log "$LOG" 2>&1)
if [ -s "$WORK/findings.sql" ]; then
    note "the statements of the findings ($WORK/findings.sql):"
    head -c 4000 "$WORK/findings.sql" | sed 's/^/#   /'
fi
