#!/usr/bin/env bash
#
# bench/memory.sh -- what a session working many outboxes holds
#
# OUTBOXES outboxes s1.t .. sN.t, each made by outbox_create in a schema of
# its own, and beside each a plain table sI.plain of the same shape
# (LIKE delivery_outbox INCLUDING ALL, its own sequence, no trigger), plus
# s0.t and s0.plain for the warm-up.  Two roles, r1 and r2, with the GRANTs
# of docs/reference.md#roles-and-grants: EXECUTE on outbox_enqueue and
# outbox_claim, USAGE on every schema, INSERT and UPDATE on every outbox
# (INSERT and SELECT on the plain tables, USAGE on their sequences).  The
# tables belong to the superuser that made them.
#
# One backend (one psql session reading a script of plain SQL statements,
# each its own transaction, simple query protocol: no PREPARE, no PL/pgSQL)
# works every outbox as r1 (SET ROLE), then every outbox again as r2:
#
#   extension  SELECT outbox_enqueue('agent:1', 'work', ..., outbox => 'sI.t');
#              SELECT count(*) FROM outbox_claim(1, outbox => 'sI.t');
#   plain      INSERT INTO sI.plain (recipient, kind, payload) VALUES (...);
#              SELECT id FROM sI.plain WHERE delivery_state = 'pending'
#               ORDER BY id LIMIT 1;
#
# after the same statements on s0 as both roles (the warm-up: the library's
# and the roles' one-time costs).  After the warm-up and after every
# OUTBOXES / STEPS tables of each role, RESET ROLE and
# SELECT sum(total_bytes) FROM pg_backend_memory_contexts (the whole
# backend's memory contexts).  The plain session runs once; the extension's
# once for each delivery_outbox.max_cached_outboxes in BOUNDS, a fresh
# backend each.  Reported: the growth over the warm-up at each step, and
# its excess over the plain session's at the same step, per outbox; PASS/
# FAIL against issue 22's target (at most 30 KB per outbox beyond plain,
# after both roles, at the default bound).  It reports and exits 0.
#
# Usage (as root, like run.sh):  bench/memory.sh
# Knobs: OUTBOXES (1000), STEPS (4), BOUNDS ("64 16 256"; the first is the
# one the target is read at), BENCH_PORT (5490), BENCH_NO_BUILD=1,
# KEEP_TMP=1.
set -euo pipefail
OUTBOX_PORT=${BENCH_PORT:-5490}
OUTBOX_QUIET=1
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

OUTBOXES=${OUTBOXES:-1000}
STEPS=${STEPS:-4}
BOUNDS=${BOUNDS:-"64 16 256"}
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)

bench_setup
bench_build_extension
OUTBOX_EXTRA_CONF="
shared_preload_libraries = 'delivery_outbox'
max_locks_per_transaction = 256"
outbox_start_cluster

as_user createdb bench || die "createdb bench failed"
LIBRARY=$(md5sum "$("$PG_CONFIG" --pkglibdir)/delivery_outbox.so" | cut -c1-12)

log "making $OUTBOXES outboxes and as many plain tables (one transaction each)"
SETUP=$OUTBOX_WORK/setup.sql
{
    cat <<'SQL'
\set ON_ERROR_STOP 1
\set QUIET 1
SET client_min_messages = warning;
CREATE EXTENSION delivery_outbox;
CREATE ROLE r1 NOLOGIN;
CREATE ROLE r2 NOLOGIN;
GRANT EXECUTE ON FUNCTION
    outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass),
    outbox_claim(integer, text, text, regclass)
  TO r1, r2;
SQL
    for ((i = 0; i <= OUTBOXES; i++)); do
        cat <<SQL
BEGIN;
CREATE SCHEMA s$i;
SELECT outbox_create('s$i', 't') \\g /dev/null
CREATE TABLE s$i.plain (LIKE delivery_outbox INCLUDING ALL);
CREATE SEQUENCE s$i.plain_id_seq OWNED BY s$i.plain.id;
ALTER TABLE s$i.plain ALTER id SET DEFAULT nextval('s$i.plain_id_seq');
GRANT USAGE ON SCHEMA s$i TO r1, r2;
GRANT INSERT, UPDATE ON s$i.t TO r1, r2;
GRANT INSERT, SELECT ON s$i.plain TO r1, r2;
GRANT USAGE ON SEQUENCE s$i.plain_id_seq TO r1, r2;
COMMIT;
SQL
    done
    echo "VACUUM ANALYZE;"
} >"$SETUP"
chown "$OUTBOX_RUN_USER:" "$SETUP"
t0=$(date +%s)
as_user psql -X -q -d bench -f "$SETUP" >"$OUTBOX_WORK/setup.log" 2>&1 ||
    die "setting up failed: $(grep -m1 ERROR "$OUTBOX_WORK/setup.log")"
log "set up in $(($(date +%s) - t0)) s"

# ops KIND I: the statements of KIND (ext or plain) on schema sI
ops()
{
    if [ "$1" = ext ]; then
        printf "SELECT outbox_enqueue('agent:1', 'work', '\\\\x00010203'::bytea, outbox => 's%d.t');\n" "$2"
        printf "SELECT count(*) FROM outbox_claim(1, outbox => 's%d.t');\n" "$2"
    else
        printf "INSERT INTO s%d.plain (recipient, kind, payload) VALUES ('agent:1', 'work', '\\\\x00010203'::bytea);\n" "$2"
        printf "SELECT id FROM s%d.plain WHERE delivery_state = 'pending' ORDER BY id LIMIT 1;\n" "$2"
    fi
}

MEASURE="SELECT 'M|%s|%d|' || sum(total_bytes) || '|' || sum(total_bytes - free_bytes) FROM pg_backend_memory_contexts;"

# script KIND [BOUND]: one backend's statements, with the measurements
script()
{
    local kind=$1 bound=${2:-} role i step=$((OUTBOXES / STEPS))
    echo '\set ON_ERROR_STOP 1'
    # shellcheck disable=SC2059  # MEASURE is the format
    printf "$MEASURE\n" connect 0
    [ -n "$bound" ] && echo "SET delivery_outbox.max_cached_outboxes = $bound;"
    for role in r1 r2; do
        echo "SET ROLE $role;"
        ops "$kind" 0
    done
    echo "RESET ROLE;"
    # shellcheck disable=SC2059
    printf "$MEASURE\n" warm 0
    for role in r1 r2; do
        echo "SET ROLE $role;"
        for ((i = 1; i <= OUTBOXES; i++)); do
            ops "$kind" "$i"
            if [ $((i % step)) = 0 ] || [ "$i" = "$OUTBOXES" ]; then
                echo "RESET ROLE;"
                # shellcheck disable=SC2059
                printf "$MEASURE\n" "$role" "$i"
                [ "$i" = "$OUTBOXES" ] || echo "SET ROLE $role;"
            fi
        done
    done
    echo "SELECT 'C|' || name || '|' || count(*) || '|' || sum(total_bytes)
            FROM pg_backend_memory_contexts GROUP BY name ORDER BY sum(total_bytes) DESC LIMIT 10;"
}

# session TAG KIND [BOUND]: run one backend's script; its M and C lines in
# $OUTBOX_WORK/TAG.out
session()
{
    local f=$OUTBOX_WORK/$1.sql
    script "$2" "${3:-}" >"$f"
    chown "$OUTBOX_RUN_USER:" "$f"
    as_user psql -X -q -At -d bench -f "$f" >"$OUTBOX_WORK/$1.log" 2>&1 ||
        die "session $1 failed: $(grep -m1 -E 'ERROR|FATAL' "$OUTBOX_WORK/$1.log")"
    grep -E '^[MC]\|' "$OUTBOX_WORK/$1.log" >"$OUTBOX_WORK/$1.out"
}

log "plain session"
session plain plain
for b in $BOUNDS; do
    log "extension session, max_cached_outboxes = $b"
    session "ext$b" ext "$b"
done

# bytes TAG PHASE N [FIELD]: sum(total_bytes) (FIELD 4, the default) or
# sum(total_bytes - free_bytes) (FIELD 5) at that measurement
bytes() { awk -F'|' -v p="$2" -v n="$3" -v f="${4:-4}" '$1 == "M" && $2 == p && $3 == n { print $f }' "$OUTBOX_WORK/$1.out"; }

step=$((OUTBOXES / STEPS))
TAGS="plain $(for b in $BOUNDS; do printf 'ext%s ' "$b"; done)"
label() { if [ "$1" = plain ]; then echo 'plain SQL'; else echo "extension, bound ${1#ext}"; fi; }

# table FIELD WHAT: growth over the warm-up at each step, then the excess
# over plain's growth at the same step, total and per outbox worked
table()
{
    local f=$1 tag role i w pw line hdr
    echo "$2, KB: at connection, after the warm-up on s0, growth over the warm-up after N outboxes"
    hdr=$(printf '%-22s %8s %8s' session connect warm)
    for role in r1 r2; do
        for ((i = step; i <= OUTBOXES; i += step)); do hdr="$hdr $(printf '%9s' "$role@$i")"; done
    done
    echo "$hdr"
    for tag in $TAGS; do
        w=$(bytes "$tag" warm 0 "$f")
        line=$(printf '%-22s %8d %8d' "$(label "$tag")" $(($(bytes "$tag" connect 0 "$f") / 1024)) $((w / 1024)))
        for role in r1 r2; do
            for ((i = step; i <= OUTBOXES; i += step)); do
                line="$line $(printf '%9d' $((($(bytes "$tag" "$role" "$i" "$f") - w) / 1024)))"
            done
        done
        echo "$line"
    done
    pw=$(bytes plain warm 0 "$f")
    echo "  beyond plain (the extension's growth - plain's), KB in all, and per distinct outbox worked so far:"
    for tag in $TAGS; do
        [ "$tag" = plain ] && continue
        w=$(bytes "$tag" warm 0 "$f")
        line=$(printf '%-22s %17s' "$(label "$tag")" "")
        local line2
        line2=$(printf '%-22s %17s' "" "")
        for role in r1 r2; do
            for ((i = step; i <= OUTBOXES; i += step)); do
                local x
                x=$((($(bytes "$tag" "$role" "$i" "$f") - w) - ($(bytes plain "$role" "$i" "$f") - pw)))
                line="$line $(printf '%9d' $((x / 1024)))"
                line2="$line2 $(awk -v x="$x" -v n="$([ "$role" = r1 ] && echo "$i" || echo "$OUTBOXES")" \
                    'BEGIN { printf "%9.1f", x / 1024 / n }')"
            done
        done
        echo "$line"
        echo "$line2"
    done
}

echo
echo "delivery_outbox memory cell: one backend, enqueue + claim on each of $OUTBOXES outboxes as r1, then as r2, against INSERT + SELECT on $OUTBOXES plain tables of the same shape; PostgreSQL $("$PG_CONFIG" --version | cut -d' ' -f2)"
echo "command: ${BENCH_CMD:-bench/memory.sh}; commit $(git -C "$OUTBOX_TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)$( [ "${BENCH_NO_BUILD:-0}" = 1 ] && echo " (BENCH_NO_BUILD=1: the installed library, md5 $LIBRARY)"), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg); run took $(($(date +%s) - START)) s"
table 4 "sum(total_bytes) of pg_backend_memory_contexts (what the backend holds)"
table 5 "sum(total_bytes - free_bytes) (what is in use: without AllocSet's free space and block doubling)"
for tag in $TAGS; do
    echo "largest contexts at the end, $(label "$tag") (name: count, KB):"
    awk -F'|' '$1 == "C" { printf "  %-40s %6d %9d\n", $2, $3, $4 / 1024 }' "$OUTBOX_WORK/$tag.out"
done
# slope KIND: KB per further outbox beyond plain from the first step to the
# last of r1, and what the second role added
for b in $BOUNDS; do
    for f in 4 5; do
        awk -v e1="$(bytes "ext$b" r1 "$step" $f)" -v e2="$(bytes "ext$b" r1 "$OUTBOXES" $f)" -v e3="$(bytes "ext$b" r2 "$OUTBOXES" $f)" \
            -v p1="$(bytes plain r1 "$step" $f)" -v p2="$(bytes plain r1 "$OUTBOXES" $f)" -v p3="$(bytes plain r2 "$OUTBOXES" $f)" \
            -v s="$step" -v n="$OUTBOXES" -v b="$b" -v what="$([ $f = 4 ] && echo held || echo 'in use')" 'BEGIN {
            printf "  bound %d, %s: beyond plain, r1@%d to r1@%d %.2f KB per further outbox; r1@%d to r2@%d (the second role) %+d KB\n",
                   b, what, s, n, ((e2 - p2) - (e1 - p1)) / 1024 / (n - s), n, n, ((e3 - p3) - (e2 - p2)) / 1024 }'
    done
done
b=${BOUNDS%% *}
for f in 4 5; do
    awk -v e="$(bytes "ext$b" r2 "$OUTBOXES" $f)" -v w="$(bytes "ext$b" warm 0 $f)" \
        -v p="$(bytes plain r2 "$OUTBOXES" $f)" -v pw="$(bytes plain warm 0 $f)" -v n="$OUTBOXES" -v b="$b" \
        -v what="$([ $f = 4 ] && echo 'held (total_bytes)' || echo 'in use (total - free)')" 'BEGIN {
        k = ((e - w) - (p - pw)) / 1024 / n
        printf "%s  %s beyond plain after %d outboxes as two roles, max_cached_outboxes %d: %.1f KB per outbox (target <= 30)\n",
               (k <= 30 ? "PASS" : "FAIL"), what, n, b, k }'
done
