#!/usr/bin/env bash
#
# bench/instructions.sh -- CPU instructions per enqueue, counted, not timed
#
# bench/run.sh measures throughput on whatever machine it runs on, and on a
# shared machine its numbers move with the neighbours.  This script counts
# the instructions one backend executes per single-row enqueue, which is
# repeatable: a single-user backend (postgres --single, so no other process
# is involved) runs N prepared statements, one transaction each, under
# valgrind's callgrind, once with N = 500 and once with N = 1500; the
# difference divided by 1000 is the cost of one statement, start-up and
# shut-down cancelled out.  Workloads, on the tables of bench/run.sh:
#
#   E1  INSERT into bench_plain (delivery_outbox's shape, no trigger)
#   E2  INSERT into bench_notify (PL/pgSQL AFTER trigger doing pg_notify)
#   E3  SELECT outbox_enqueue(...), delivery_outbox.notify = commit
#   E3-off  the same with notify = off (the insert path alone)
#   E3-sql  E3 with delivery_outbox.direct_insert = off (its INSERT through
#           SPI), to show what the direct insert saves
#   D1-D3   a relay's side, per delivered row: claim + ack in two
#           transactions, outbox_ack_claim in one, and outbox_ack_claim on
#           an outbox with retain_acked '0' (see relay_script below)
#
# In single-user mode nobody listens and no commit waits for a lock, so this
# is the producer's own CPU cost: what the enqueue path costs, not what
# NOTIFY's serialization costs (bench/run.sh shows that).
#
# Usage (as root or with sudo, like bench/run.sh; installs valgrind if
# missing and builds and installs the extension from this tree):
#
#   bench/instructions.sh
#
# Knobs: PG_CONFIG (default PostgreSQL 15's; the extension is built and
# installed for it and its server runs: PG_CONFIG=<18's prefix>/bin/pg_config
# counts on 18), BENCH_NO_BUILD=1 (use the installed extension), KEEP_TMP=1.
# Prints one line per workload and its ratio to E1; exits 0.

set -euo pipefail

# shellcheck source=bench/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

bench_setup valgrind
bench_build_extension
outbox_start_cluster

log "creating the bench database"
as_user createdb bench || die "createdb bench failed"
as_user psql -X -q -v ON_ERROR_STOP=1 -d bench -c "CREATE EXTENSION delivery_outbox" ||
    die "CREATE EXTENSION delivery_outbox failed"
bench_e12_tables bench || die "creating the E1/E2 tables failed"
# single-user mode needs the server stopped
outbox_stop_cluster

# script NAME SETUP STATEMENT N: a file of SETUP then N lines of STATEMENT
script()
{
    local f=$OUTBOX_WORK/$1.$4.sql i
    {
        printf '%s\n' "$2"
        for ((i = 0; i < $4; i++)); do
            printf "$3\n" $((i % 100))
        done
    } >"$f"
    chown "$OUTBOX_RUN_USER:" "$f" 2>/dev/null || true
}

# relay_script W N: a relay's N rounds of DELIVER_BATCH rows each over an
# outbox filled with the same rows for every N (so that the fill cancels
# out), the ids of each round known in advance (a claim takes the lowest):
#   D1  outbox_claim, then outbox_ack(ids) in a transaction of its own
#       (1.2's relay loop: two transactions a round)
#   D2  outbox_ack_claim(previous ids): one transaction a round
#   D3  D2 on an outbox whose retain_acked is '0' (the ack deletes)
# Each line of a single-user script is a transaction of its own.
DELIVER_BATCH=10
DELIVER_FILL=$((1510 * DELIVER_BATCH))
relay_script()
{
    local f=$OUTBOX_WORK/$1.$2.sql i prev ids retain="-1 second"
    [ "$1" = D3 ] && retain=0
    {
        echo "SET delivery_outbox.notify = off;"
        echo "TRUNCATE delivery_outbox;"
        echo "ALTER SEQUENCE delivery_outbox_id_seq RESTART;"
        echo "SELECT outbox_configure('delivery_outbox', retain_acked => '$retain');"
        echo "SELECT count(*) FROM outbox_enqueue_batch(array_fill('agent:1'::text, '{$DELIVER_FILL}'), array_fill('work'::text, '{$DELIVER_FILL}'), array_fill('\\x00'::bytea, '{$DELIVER_FILL}'));"
        prev="{}"
        for ((i = 0; i < $2; i++)); do
            ids="{$(seq -s, $((i * DELIVER_BATCH + 1)) $(((i + 1) * DELIVER_BATCH)))}"
            if [ "$1" = D1 ]; then
                echo "SELECT count(*) FROM outbox_claim($DELIVER_BATCH);"
                echo "SELECT outbox_ack('$ids'::bigint[]);"
            else
                echo "SELECT count(*) FROM outbox_ack_claim('$prev', $DELIVER_BATCH);"
            fi
            prev=$ids
        done
    } >"$f"
    chown "$OUTBOX_RUN_USER:" "$f" 2>/dev/null || true
}

# The statements of bench/run.sh's pgbench scripts, prepared.
E1=$(bench_statement e1_insert.sql)
E2=$(bench_statement e2_insert_notify.sql)
E3=$(bench_statement e3_enqueue.sql)
WORKLOADS="E1 E2 E3 E3-off E3-sql D1 D2 D3"
for n in 500 1500; do
    script E1 "PREPARE q(int) AS $E1;" "EXECUTE q(%d);" $n
    script E2 "PREPARE q(int) AS $E2;" "EXECUTE q(%d);" $n
    script E3 "SET delivery_outbox.notify = commit; PREPARE q(int) AS $E3;" "EXECUTE q(%d);" $n
    script E3-off "SET delivery_outbox.notify = off; PREPARE q(int) AS $E3;" "EXECUTE q(%d);" $n
    script E3-sql "SET delivery_outbox.notify = commit; SET delivery_outbox.direct_insert = off; PREPARE q(int) AS $E3;" "EXECUTE q(%d);" $n
    relay_script D1 $n
    relay_script D2 $n
    relay_script D3 $n
done

# count W N: total instructions of a single-user backend running W's N lines
count()
{
    local out=$OUTBOX_WORK/callgrind.$1.$2
    as_user valgrind --tool=callgrind --callgrind-out-file="$out" \
        postgres --single -D "$OUTBOX_DATA" -c synchronous_commit=off -c fsync=off \
        bench <"$OUTBOX_WORK/$1.$2.sql" >"$OUTBOX_WORK/single.$1.$2.log" 2>&1 ||
        die "postgres --single under callgrind failed for $1 ($OUTBOX_WORK/single.$1.$2.log)"
    if grep -qE '(ERROR|FATAL):' "$OUTBOX_WORK/single.$1.$2.log"; then
        die "$1 raised an error: $(grep -m1 -E '(ERROR|FATAL):' "$OUTBOX_WORK/single.$1.$2.log")"
    fi
    sed -n 's/^summary: //p' "$out"
}

log "counting instructions (callgrind, single-user backend; a few minutes)"
declare -A PER
for w in $WORKLOADS; do
    a=$(count "$w" 500)
    b=$(count "$w" 1500)
    PER[$w]=$(((b - a) / 1000))
done

echo
echo "delivery_outbox instructions per single-row enqueue, and per delivered row (D: a relay's rounds of $DELIVER_BATCH): $("$PG_CONFIG" --version), extension $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$OUTBOX_SRC/delivery_outbox.control")"
echo "command: bench/instructions.sh  (postgres --single under callgrind; (Ir at 1500 - Ir at 500) / 1000)"
printf '%-44s %14s %8s\n' "workload" "instructions" "vs E1"
for w in $WORKLOADS; do
    case $w in
        E1) what="E1 raw INSERT (reference)" ;;
        E2) what="E2 INSERT + PL/pgSQL pg_notify trigger" ;;
        E3) what="E3 outbox_enqueue, notify=commit" ;;
        E3-off) what="E3 outbox_enqueue, notify=off" ;;
        E3-sql) what="E3 outbox_enqueue, direct_insert=off" ;;
        D1) what="D1 claim + ack, two transactions (per row)" ;;
        D2) what="D2 outbox_ack_claim, one (per row)" ;;
        D3) what="D3 D2 with retain_acked 0 (per row)" ;;
    esac
    case $w in
        D*) PER[$w]=$((PER[$w] / DELIVER_BATCH)) ;;
    esac
    printf '%-44s %14d %8.2f\n' "$what" "${PER[$w]}" \
        "$(awk -v a="${PER[$w]}" -v b="${PER[E1]}" 'BEGIN { printf "%.4f", a / b }')"
done
