#!/usr/bin/env bash
#
# console/test.sh -- the operator's console, tested in a real browser
#
# Prints TAP (numbered "ok N - ..." lines, the plan last) and exits
# non-zero when a test fails.  Steps:
#   1. chromium: Debian's package (as root: apt-get install -y chromium,
#      after apt-get update if needed); when it cannot be had, the browser
#      tests are skipped ("ok N # skip ..."), the EXPLAIN tests still run;
#   2. `console/run --install-only`: npm ci from package-lock.json
#      (playwright-core included; it drives /usr/bin/chromium and downloads
#      no browser);
#   3. a scratch cluster in a temp dir (as the postgres OS user when run as
#      root), unix socket only, delivery_outbox preloaded (for the activity
#      counters), no background worker (nothing changes rows behind the
#      test's back); the extension as installed for PG_CONFIG (default: the
#      system's PostgreSQL 15), in schema outbox;
#   4. test/fixture.sql (outboxes with rows in every state, dead letters of
#      every reason, console_monitor and console_operator) and test/big.sql
#      (big.delivery_outbox: 200,000 rows, 20,000 dead letters, analyzed);
#   5. test/explain.js: EXPLAIN of every statement the pages issue, on
#      big.delivery_outbox, as the superuser and both roles: no Seq Scan on
#      the outbox or its dead-letter table;
#   6. two consoles on 127.0.0.1 (ports the kernel picks): the operator's
#      with an access token, the monitor's without; test/browser.js drives
#      chromium through them and saves a screenshot of each page into
#      CONSOLE_TEST_OUT (default: a temp dir, printed at the end).
#
# Environment: PG_CONFIG, CONSOLE_TEST_OUT, CHROMIUM (default /usr/bin/chromium).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
bindir=$("$PG_CONFIG" --bindir) || { echo "1..0 # skip no pg_config at $PG_CONFIG"; exit 1; }
OUT=${CONSOLE_TEST_OUT:-$(mktemp -d /tmp/console-test-out.XXXXXX)}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/console-test.XXXXXX)
chmod 755 "$work"

n=0
failed=0
# tap: number the "ok - ..." / "not ok - ..." lines of a test script
tap() {
    local line
    while IFS= read -r line; do
        case $line in
            "ok - "*) n=$((n + 1)); echo "ok $n - ${line#ok - }" ;;
            "not ok - "*) n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - ${line#not ok - }" ;;
            *) echo "$line" ;;
        esac
    done
}
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; }

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    [ -f "$work/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

# 1. chromium
have_browser=1
if [ ! -x "$CHROMIUM" ] && [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q chromium >"$work/apt.log" 2>&1 ||
        { apt-get update -q >>"$work/apt.log" 2>&1 && apt-get install -y -q chromium >>"$work/apt.log" 2>&1; }
fi
[ -x "$CHROMIUM" ] || have_browser=0

# 2. the console's packages
if (cd "$here" && ./run --install-only) >"$work/npm.log" 2>&1; then
    pass "npm ci: the console's pinned packages installed"
else
    fail "npm ci: the console's pinned packages installed"
    sed 's/^/#   /' "$work/npm.log"
    echo "1..$n"
    exit 1
fi

# 3. the scratch cluster
if [ "$(id -u)" = 0 ]; then chown postgres "$work"; fi
sock=$work
port=5432
if ! as_pg "$bindir/initdb" -D "$work/data" -A trust -U postgres --no-sync >"$work/initdb.log" 2>&1; then
    fail "initdb"; sed 's/^/#   /' "$work/initdb.log"; echo "1..$n"; exit 1
fi
cat >>"$work/data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$sock'
port = $port
shared_preload_libraries = 'delivery_outbox'
fsync = off
EOF
if ! as_pg "$bindir/pg_ctl" -D "$work/data" -l "$work/server.log" -w start >/dev/null 2>&1; then
    fail "the scratch cluster starts"; sed 's/^/#   /' "$work/server.log"; echo "1..$n"; exit 1
fi
psql() { as_pg "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -U postgres "$@"; }
su_db="host=$sock port=$port dbname=console_test user=postgres"

# 4. the outboxes
if psql -d postgres -c 'CREATE DATABASE console_test' >/dev/null &&
   psql -d console_test -f "$here/test/fixture.sql" >"$work/fixture.log" 2>&1 &&
   psql -d console_test -f "$here/test/big.sql" >>"$work/fixture.log" 2>&1; then
    pass "fixture: outboxes with rows in every state, dead letters, 200,000 rows in big.delivery_outbox"
else
    fail "fixture"; sed 's/^/#   /' "$work/fixture.log"; echo "1..$n"; exit 1
fi

# 5. EXPLAIN of every page's statements
node "$here/test/explain.js" "$su_db" big.delivery_outbox console_monitor console_operator > "$work/explain.tap" 2>&1
tap < "$work/explain.tap"

# 6. the consoles and the browser
start_console() {   # log-file args...: prints the URL
    local log=$1; shift
    node "$here/server.js" --port 0 --sample-interval 1 "$@" >"$log" 2>&1 &
    pids+=($!)
    local i
    for i in $(seq 1 100); do
        if grep -q 'listening on' "$log"; then
            sed -n 's|.*listening on \(http://[^/]*\)/.*|\1|p' "$log" | head -1
            return 0
        fi
        sleep 0.1
    done
    return 1
}
if [ $have_browser = 0 ]; then
    n=$((n + 1)); echo "ok $n # skip chromium cannot be installed ($CHROMIUM missing; see apt-get install chromium)"
else
    token=$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')
    op_url=$(start_console "$work/op.log" --db "host=$sock port=$port dbname=console_test user=console_operator" --token "$token")
    mon_url=$(start_console "$work/mon.log" --db "host=$sock port=$port dbname=console_test user=console_monitor")
    if [ -z "$op_url" ] || [ -z "$mon_url" ]; then
        fail "the consoles start"; sed 's/^/#   /' "$work/op.log" "$work/mon.log"
    else
        pass "the consoles listen on 127.0.0.1 ($op_url as console_operator with a token, $mon_url as console_monitor)"
        case "$op_url$mon_url" in
            http://127.0.0.1:*http://127.0.0.1:*) pass "the consoles listen on 127.0.0.1 only by default" ;;
            *) fail "the consoles listen on 127.0.0.1 only by default" ;;
        esac
        OP_URL=$op_url MON_URL=$mon_url TOKEN=$token DB=$su_db OUT=$OUT CHROMIUM=$CHROMIUM \
            node "$here/test/browser.js" > "$work/browser.tap" 2>&1
        tap < "$work/browser.tap"
        shots=$(ls "$OUT"/*.png 2>/dev/null | wc -l)
        if [ "$shots" -ge 10 ]; then pass "a screenshot of each page: $shots in $OUT"; else fail "screenshots: $shots in $OUT"; fi
    fi
    if [ $failed -gt 0 ]; then
        echo "# console logs:"; sed 's/^/#   /' "$work/op.log" "$work/mon.log" | tail -40
    fi
fi

echo "1..$n"
echo "# screenshots in $OUT"
[ $failed -eq 0 ]
