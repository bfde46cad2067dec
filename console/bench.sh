#!/usr/bin/env bash
#
# console/bench.sh -- how long the console's overview takes to render for an
# outbox of BENCH_ROWS rows (default 1,000,000) and BENCH_DEAD dead letters
# (default 100,000); a measurement, not a test (docs/console.md, "Measured").
#
# A scratch cluster in a temp dir (as the postgres OS user when run as
# root; unix socket only), the extension as installed for PG_CONFIG, the
# outboxes of test/fixture.sql and test/big.sql at that size, the console
# on 127.0.0.1 as console_operator.  Prints, for BENCH_RUNS (default 7)
# GETs of the overview after one warm-up, each wall time (curl) and the
# console's own figure, the median; three GETs of the big outbox's page
# and of a filtered page of its dead letters; outbox_stats() of the big
# outbox alone (psql), which bounds the overview from below; the load.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
rows=${BENCH_ROWS:-1000000}
dead=${BENCH_DEAD:-100000}
runs=${BENCH_RUNS:-7}
bindir=$("$PG_CONFIG" --bindir)
work=$(mktemp -d /tmp/console-bench.XXXXXX)
chmod 755 "$work"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$work"
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    [ -f "$work/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$work/data" -m fast -w stop >/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
(cd "$here" && ./run --install-only)
as_pg "$bindir/initdb" -D "$work/data" -A trust -U postgres >/dev/null
cat >>"$work/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$work'
shared_preload_libraries = 'delivery_outbox'
CONF
as_pg "$bindir/pg_ctl" -D "$work/data" -l "$work/server.log" -w start >/dev/null
psql() { as_pg "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$work" -U postgres "$@"; }
psql -d postgres -c 'CREATE DATABASE console_bench'
psql -d console_bench -f "$here/test/fixture.sql" >/dev/null
echo "loading big.delivery_outbox: $rows rows, $dead dead letters" >&2
psql -d console_bench -v rows="$rows" -v dead="$dead" -f "$here/test/big.sql" >/dev/null
node "$here/server.js" --port 0 --db "host=$work dbname=console_bench user=console_operator" >"$work/console.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -q 'listening on' "$work/console.log" && break; sleep 0.1; done
url=$(sed -n 's|.*listening on \(http://[^/]*\)/.*|\1|p' "$work/console.log")
curl -sf "$url/" >/dev/null   # warm-up: the backends, the catalog caches, the buffer cache
times=()
for i in $(seq 1 "$runs"); do
    out=$(curl -sf -o "$work/page.html" -w '%{time_total}' "$url/")
    srv=$(sed -n 's|.*data-ms="\([0-9.]*\)".*|\1|p' "$work/page.html")
    ms=$(awk -v t="$out" 'BEGIN { printf "%.0f", t * 1000 }')
    echo "run $i: overview ${ms} ms (console: ${srv} ms)"
    times+=("$ms")
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
echo "median overview: ${median} ms over $runs runs ($rows rows, $dead dead letters)"
# the big outbox's own page (outbox_stats again, then bounded reads) and a filtered dead-letter page
oid=$(psql -d console_bench -At -c "SELECT 'big.delivery_outbox'::regclass::oid")
for page in "/o/$oid" "/o/$oid/dead?recipient=agent:7&error=503"; do
    t=()
    for i in 1 2 3; do
        t+=("$(curl -sf -o /dev/null -w '%{time_total}' "$url$page" | awk '{ printf "%.0f", $1 * 1000 }')")
    done
    echo "$page: ${t[*]} ms"
done
stats=$(psql -d console_bench -At -c '\timing on' \
    -c "SELECT pending, delivered, acked, dead FROM outbox.outbox_stats('big.delivery_outbox')" | tr '\n' ' ')
echo "outbox_stats('big.delivery_outbox') alone (pending|delivered|acked|dead): $stats"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
