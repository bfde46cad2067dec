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

# The statements of bench/run.sh's pgbench scripts, prepared.
E1=$(bench_statement e1_insert.sql)
E2=$(bench_statement e2_insert_notify.sql)
E3=$(bench_statement e3_enqueue.sql)
WORKLOADS="E1 E2 E3 E3-off E3-sql"
for n in 500 1500; do
    script E1 "PREPARE q(int) AS $E1;" "EXECUTE q(%d);" $n
    script E2 "PREPARE q(int) AS $E2;" "EXECUTE q(%d);" $n
    script E3 "SET delivery_outbox.notify = commit; PREPARE q(int) AS $E3;" "EXECUTE q(%d);" $n
    script E3-off "SET delivery_outbox.notify = off; PREPARE q(int) AS $E3;" "EXECUTE q(%d);" $n
    script E3-sql "SET delivery_outbox.notify = commit; SET delivery_outbox.direct_insert = off; PREPARE q(int) AS $E3;" "EXECUTE q(%d);" $n
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
echo "delivery_outbox instructions per single-row enqueue: $("$PG_CONFIG" --version), extension $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$OUTBOX_SRC/delivery_outbox.control")"
echo "command: bench/instructions.sh  (postgres --single under callgrind; (Ir at 1500 - Ir at 500) / 1000)"
printf '%-44s %14s %8s\n' "workload" "instructions" "vs E1"
for w in $WORKLOADS; do
    case $w in
        E1) what="E1 raw INSERT (reference)" ;;
        E2) what="E2 INSERT + PL/pgSQL pg_notify trigger" ;;
        E3) what="E3 outbox_enqueue, notify=commit" ;;
        E3-off) what="E3 outbox_enqueue, notify=off" ;;
        E3-sql) what="E3 outbox_enqueue, direct_insert=off" ;;
    esac
    printf '%-44s %14d %8.2f\n' "$what" "${PER[$w]}" \
        "$(awk -v a="${PER[$w]}" -v b="${PER[E1]}" 'BEGIN { printf "%.4f", a / b }')"
done
