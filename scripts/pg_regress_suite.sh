#!/usr/bin/env bash
#
# scripts/pg_regress_suite.sh -- PostgreSQL's own regression suite, run with
# and without delivery_outbox preloaded
#
# The library hooks into every backend once it is preloaded (the insert
# markers, the transaction callbacks, the worker on its database).  This
# checks that it changes nothing for SQL that has nothing to do with it:
# PostgreSQL's src/test/regress, from Debian's source package of the
# installed server, runs its parallel_schedule twice, each time against a
# new scratch cluster:
#   plain      no preload
#   preloaded  shared_preload_libraries = 'delivery_outbox',
#              delivery_outbox.database = 'regression' (the database
#              pg_regress creates: the worker connects to it once it exists
#              and waits there for the extension, which is never created)
# Each test of the schedule is one TAP assertion: it passes when both runs
# give it the same verdict and, when it failed, the same diff (paths and
# timestamps taken out).  A test that fails in both runs alike fails because
# of the environment, not of the library: it passes, and is listed ("fails
# in both runs: ...").  Two more assertions: the worker did serve the
# regression database in the preloaded run, and no server process was
# killed by a signal there.
#
# The source comes through apt-get source with a private apt configuration
# (a deb-src line per Debian suite the system uses; the system's own
# sources.list and lists are not touched), then only src/test/regress is
# built (pg_regress, regress.so, contrib/spi's refint.so and autoinc.so).
# Both are cached in $PG_REGRESS_CACHE/postgresql-15-VERSION/ and reused
# while the installed version stays the same.  When the mirror no longer
# has the installed version's source, the newest source of the same major
# version it has is used, with a warning (PG_REGRESS_EXACT=1 skips
# instead): the comparison is between two runs of one server, so a test
# the other minor release changed fails in both runs and is listed.  The
# suite skips ("1..0 # SKIP ...", exit status 0) only when no source
# package can be fetched.
#
# Run as root (apt-get source and the cache in /var/cache; the clusters run
# as the unprivileged user, see scripts/common.sh) or as a user who can
# write the cache.  delivery_outbox must already be installed in the
# server of PG_CONFIG.
#
# Knobs (environment):
#   PG_CONFIG          the server's pg_config (default Debian's 15)
#   OUTBOX_USER        OS user for the clusters (default postgres as root)
#   OUTBOX_PORT        first port to try (default 55432)
#   PG_REGRESS_CACHE   default /var/cache/delivery_outbox
#   PG_REGRESS_WORK    work directory (default a new one under /tmp, removed
#                      at the end unless KEEP_TMP=1)
#   PG_REGRESS_EXACT=1 only the installed version's source will do
#   PG_REGRESS_PRELOADED_CONF  more postgresql.conf lines for the preloaded
#                      cluster only, one per line (e.g.
#                      "delivery_outbox.notify = 'deferred'")
#   KEEP_TMP=1         keep the data directories and the work directory
#
# Usage: scripts/pg_regress_suite.sh

set -uo pipefail

OUTBOX_PORT=${OUTBOX_PORT:-55432}
# shellcheck source=scripts/common.sh
. "$(dirname "$0")/common.sh"

PG_REGRESS_CACHE=${PG_REGRESS_CACHE:-/var/cache/delivery_outbox}
TESTNUM=0
FAILED=0
CLUSTER_DATA=
MADE_WORK=0
WORK=

ok()     { TESTNUM=$((TESTNUM + 1)); echo "ok $TESTNUM - $*"; }
not_ok() { TESTNUM=$((TESTNUM + 1)); FAILED=$((FAILED + 1)); echo "not ok $TESTNUM - $*"; }

# A set-up step that failed: one failed assertion, the plan, exit 1.
fail_setup()
{
    not_ok "$*"
    echo "1..$TESTNUM"
    exit 1
}

skip_all()
{
    echo "1..0 # SKIP $*"
    exit 0
}

stop_cluster()
{
    if [ -n "$CLUSTER_DATA" ]; then
        as_user pg_ctl -D "$CLUSTER_DATA" -m fast -w -t 60 stop >/dev/null 2>&1 ||
            warn "pg_ctl stop failed for $CLUSTER_DATA"
        CLUSTER_DATA=
    fi
}

on_exit()
{
    local rc=$?
    trap - EXIT INT TERM HUP
    stop_cluster
    if [ "$MADE_WORK" = 1 ] && [ "${KEEP_TMP:-0}" != 1 ]; then
        rm -rf "$WORK"
    elif [ -n "$WORK" ] && [ "${KEEP_TMP:-0}" = 1 ]; then
        log "kept $WORK (KEEP_TMP=1)"
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# --- the server ------------------------------------------------------------
[ -x "$PG_CONFIG" ] || fail_setup "PG_CONFIG=$PG_CONFIG is an executable pg_config"
PG_BINDIR=$("$PG_CONFIG" --bindir)
pg_version=$("$PG_CONFIG" --version)                # PostgreSQL 15.20 (Debian 15.20-0+deb12u1)
major=$(sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p' <<<"$pg_version")
[ -n "$major" ] || fail_setup "the major version in \"$pg_version\""
[ -f "$("$PG_CONFIG" --pkglibdir)/delivery_outbox.so" ] ||
    fail_setup "delivery_outbox is installed in $("$PG_CONFIG" --pkglibdir)"
server_version=$(sed -n 's/.*(Debian \([^)]*\)).*/\1/p' <<<"$pg_version")
[ -n "$server_version" ] ||
    server_version=$(dpkg-query -W -f='${Version}' "postgresql-$major" 2>/dev/null)
[ -n "$server_version" ] ||
    skip_all "the server ($pg_version) is not Debian's postgresql-$major: no source package to fetch"
srcpkg=postgresql-$major
log "server: $pg_version; source package $srcpkg"

# Needed to unpack the source (dpkg-source) and to configure it with the
# options below; nothing else.
(OUTBOX_BASE_PACKAGES=("${OUTBOX_PG_REGRESS_PACKAGES[@]}")
 OUTBOX_PACKAGES='' OUTBOX_COMMAND_PACKAGES='' outbox_install_packages) ||
    fail_setup "install ${OUTBOX_PG_REGRESS_PACKAGES[*]}"

# --- the source, fetched and built once per version ------------------------
if [ ! -d "$PG_REGRESS_CACHE" ]; then
    if ! mkdir -p "$PG_REGRESS_CACHE" 2>/dev/null; then
        if ! as_root mkdir -p "$PG_REGRESS_CACHE" ||
            ! as_root chown "$(id -u):$(id -g)" "$PG_REGRESS_CACHE"; then
            fail_setup "create $PG_REGRESS_CACHE"
        fi
    fi
fi
[ -w "$PG_REGRESS_CACHE" ] || fail_setup "$PG_REGRESS_CACHE is writable"
umask 022                       # the clusters' user reads the build
exec 9>"$PG_REGRESS_CACHE/lock"
flock 9                         # one fetch and build at a time

APT=$PG_REGRESS_CACHE/apt
APT_OPTS=(-o "Dir::Etc::SourceList=$APT/sources.list"
          -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$APT/lists"
          -o "Dir::Cache=$APT/cache"
          -o Debug::NoLocking=1)

# One "deb-src URI SUITE main" line for each Debian suite of this release
# the system fetches from (CODENAME, -updates, -security), in one-line
# (.list) or deb822 (.sources) form; Debian's own mirrors when none is
# found.
apt_source_lines()
{
    local codename
    codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || codename=bookworm
    {
        cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            awk '$1 == "deb" {
                     i = 2
                     if ($2 ~ /^\[/) while (i <= NF && $i !~ /\]$/) i++
                     if ($2 ~ /^\[/) i++
                     print $i, $(i + 1)
                 }'
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            awk 'function flush(  n, s, i) {
                     if (types ~ /(^| )deb( |$)/) {
                         n = split(suites, s, " ")
                         for (i = 1; i <= n; i++) print uris, s[i]
                     }
                     types = ""; uris = ""; suites = ""
                 }
                 /^[ \t]*$/ { flush(); next }
                 /^Types:/  { sub(/^Types:[ \t]*/, ""); types = $0 }
                 /^URIs:/   { uris = $2 }
                 /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
                 END { flush() }' "$f"
        done
    } | awk -v c="$codename" '$2 == c || $2 == c "-updates" || $2 == c "-security" {
              print "deb-src " $1 " " $2 " main"
          }' | sort -u | grep . ||
        printf 'deb-src http://deb.debian.org/debian %s main\ndeb-src http://deb.debian.org/debian-security %s-security main\n' \
            "$codename" "$codename"
}

APT_UPDATED=
apt_update()
{
    [ -n "$APT_UPDATED" ] && return "$APT_UPDATED"
    mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
    apt_source_lines >"$APT/sources.list"
    log "apt-get update with $APT/sources.list:"
    sed 's/^/    /' "$APT/sources.list"
    if apt-get -q "${APT_OPTS[@]}" update >"$APT/update.log" 2>&1; then
        APT_UPDATED=0
    else
        cat "$APT/update.log"
        APT_UPDATED=1
    fi
    return "$APT_UPDATED"
}

# built VERSION: the cached tree of VERSION, complete.
built() { [ -f "$PG_REGRESS_CACHE/$srcpkg-$1/built" ]; }

# fetch_and_build VERSION: apt-get source, configure, make -C
# src/test/regress, in a scratch directory renamed into place at the end
# (a run killed half-way leaves nothing that looks complete).  Returns 2
# when the source cannot be fetched, 1 when it does not build.
fetch_and_build()
{
    local v=$1 dir=$PG_REGRESS_CACHE/$srcpkg-$1 part tree opt
    local -a conf=(--without-readline)
    part=$dir.partial
    rm -rf "$part"
    mkdir -p "$part"
    log "fetching $srcpkg=$v into $dir"
    if ! (cd "$part" && apt-get -q "${APT_OPTS[@]}" source "$srcpkg=$v") \
        >"$part/fetch.log" 2>&1; then
        grep '^E:' "$part/fetch.log" >&2
        rm -rf "$part"
        return 2
    fi
    tree=$(find "$part" -mindepth 1 -maxdepth 1 -type d -name "$srcpkg-*" | head -n 1)
    if [ -z "$tree" ] || [ ! -f "$tree/src/test/regress/parallel_schedule" ]; then
        echo "no src/test/regress/parallel_schedule in $part" >&2
        return 1
    fi
    # The server's options that change what the headers regress.c is
    # compiled against declare (pg_config.h: USE_ICU, USE_LIBXML,
    # USE_OPENSSL); the rest do not matter to src/test/regress, whose
    # expected outputs follow the server that runs them.  No readline:
    # nothing here is interactive.
    for opt in --with-icu --with-libxml --with-openssl; do
        "$PG_CONFIG" --configure | grep -q -- "'$opt'" && conf+=("$opt")
    done
    log "configure ${conf[*]}; make -C src/test/regress"
    if ! (cd "$tree" && ./configure "${conf[@]}") >"$part/configure.log" 2>&1; then
        tail -n 40 "$part/configure.log" >&2
        return 1
    fi
    if ! make -C "$tree/src/test/regress" -j"$(nproc)" >"$part/make.log" 2>&1; then
        tail -n 40 "$part/make.log" >&2
        return 1
    fi
    rm -f "$part"/*.orig.tar.* "$part"/*.debian.tar.*
    ln -s "$(basename "$tree")" "$part/source"
    touch "$part/built"
    rm -rf "$dir"
    mv "$part" "$dir"
}

# The installed version first; then (unless PG_REGRESS_EXACT=1) the newest
# version of the same source package that is already built or that the
# mirror has.
source_version=
if built "$server_version"; then
    source_version=$server_version
    log "cached: $PG_REGRESS_CACHE/$srcpkg-$server_version"
else
    candidates=()
    if apt_update; then
        mapfile -t candidates < <(apt-cache "${APT_OPTS[@]}" showsrc --only-source "$srcpkg" 2>/dev/null |
            awk '/^Version:/ { print $2 }' | sort -u -V -r)
    fi
    # already built, from an earlier run: kept if the mirror has nothing
    for d in "$PG_REGRESS_CACHE/$srcpkg-"*/built; do
        [ -f "$d" ] || continue
        d=${d%/built}
        candidates+=("${d##*/"$srcpkg"-}")
    done
    rc=2
    tried=" "
    for v in "$server_version" "${candidates[@]}"; do
        case $tried in *" $v "*) continue ;; esac
        tried="$tried$v "
        if [ "$v" != "$server_version" ] && [ "${PG_REGRESS_EXACT:-0}" = 1 ]; then
            break
        fi
        if built "$v"; then
            source_version=$v
            rc=0
            break
        fi
        if [ "$APT_UPDATED" = 0 ]; then
            fetch_and_build "$v"
            rc=$?
            if [ "$rc" = 0 ]; then
                source_version=$v
                # the installed version's own: older ones are of no more use
                if [ "$v" = "$server_version" ]; then
                    find "$PG_REGRESS_CACHE" -mindepth 1 -maxdepth 1 -type d \
                        -name "$srcpkg-*" ! -name "$srcpkg-$v" -exec rm -rf {} +
                fi
                break
            elif [ "$rc" = 1 ]; then
                fail_setup "build src/test/regress of $srcpkg $v (logs in $PG_REGRESS_CACHE/$srcpkg-$v.partial)"
            fi
        fi
    done
    [ -n "$source_version" ] ||
        skip_all "cannot fetch Debian's source package $srcpkg ($server_version${PG_REGRESS_EXACT:+, PG_REGRESS_EXACT=$PG_REGRESS_EXACT}; see $APT)"
fi
exec 9>&-
REG=$PG_REGRESS_CACHE/$srcpkg-$source_version/source/src/test/regress
if [ "$source_version" != "$server_version" ]; then
    warn "the server is $server_version, the regression tests are from $source_version (the mirror has no source of $server_version): tests changed in between fail in both runs"
    echo "# regression tests of $srcpkg $source_version, server $server_version"
else
    echo "# regression tests of $srcpkg $source_version"
fi

# --- the work directory and the clusters -----------------------------------
outbox_pick_user
if [ -n "${PG_REGRESS_WORK:-}" ]; then
    WORK=$PG_REGRESS_WORK
    mkdir -p "$WORK" || fail_setup "create $WORK"
else
    WORK=$(mktemp -d /tmp/delivery_outbox_pg_regress.XXXXXX) || fail_setup "mktemp"
    MADE_WORK=1
fi
mkdir -p "$WORK/sock"
if is_root; then
    chown -R "$OUTBOX_RUN_USER:" "$WORK" || fail_setup "chown $WORK"
fi
OUTBOX_WORK=$WORK               # as_user runs there
outbox_pick_port
PGHOST=$WORK/sock
PGUSER=$OUTBOX_RUN_USER
PGDATABASE=postgres
export PGHOST PGPORT PGUSER PGDATABASE

# run_schedule NAME [CONF-LINE...]: a new cluster with the CONF-LINEs, the
# parallel schedule against it, the cluster stopped; output in
# $WORK/NAME/ (pg_regress.out, regression.diffs, postgres.log).
run_schedule()
{
    local name=$1 out=$WORK/$1 rc
    shift
    CLUSTER_DATA=
    mkdir -p "$out"
    [ "$(id -u)" -eq 0 ] && chown "$OUTBOX_RUN_USER:" "$out"
    log "$name: initdb, start, parallel_schedule"
    if ! as_user initdb -D "$out/data" -A trust -E UTF8 --locale=C --no-sync \
        -U "$OUTBOX_RUN_USER" >"$out/initdb.log" 2>&1; then
        cat "$out/initdb.log" >&2
        return 1
    fi
    # As pg_regress's own temporary instance has it: two prepared
    # transactions so that prepared_xacts runs (and the library's
    # two-phase commit bookkeeping with it).
    {
        echo "listen_addresses = ''"
        echo "unix_socket_directories = '$WORK/sock'"
        echo "port = $PGPORT"
        echo "fsync = off"
        echo "max_prepared_transactions = 2"
        printf '%s\n' "$@"
    } >>"$out/data/postgresql.conf"
    if ! as_user pg_ctl -D "$out/data" -l "$out/postgres.log" -w -t 60 start \
        >"$out/pg_ctl.log" 2>&1; then
        cat "$out/pg_ctl.log" "$out/postgres.log" >&2
        return 1
    fi
    CLUSTER_DATA=$out/data
    as_user "$REG/pg_regress" --inputdir="$REG" --outputdir="$out" \
        --bindir="$PG_BINDIR" --dlpath="$REG" \
        --schedule="$REG/parallel_schedule" --max-concurrent-tests=20 \
        --host="$PGHOST" --port="$PGPORT" >"$out/pg_regress.out" 2>&1
    rc=$?
    log "$name: pg_regress exited $rc; $(grep -E '^ +(All [0-9]+ tests passed|[0-9]+ of [0-9]+ tests)' "$out/pg_regress.out" | sed 's/^ *//')"
    stop_cluster
    if [ "${KEEP_TMP:-0}" != 1 ]; then
        rm -rf "$out/data"
    fi
    return 0
}

start_time=$SECONDS
run_schedule plain ||
    fail_setup "plain: a scratch cluster (initdb, start)"
run_schedule preloaded "shared_preload_libraries = 'delivery_outbox'" \
    "delivery_outbox.database = 'regression'" "${PG_REGRESS_PRELOADED_CONF:-}" ||
    fail_setup "preloaded: a scratch cluster with the library preloaded (initdb, start)"
log "both runs: $((SECONDS - start_time)) s"

# --- the comparison --------------------------------------------------------
# verdicts NAME: "test verdict" per test from pg_regress's lines ("test x
# ... ok 12 ms", "     x ... FAILED 40 ms", "... failed (ignored)").
verdicts()
{
    awk '/^(test +| +)?[^ ]+ +\.\.\. / {
             for (i = 1; i <= NF; i++) if ($i == "...") break
             v = $(i + 1)
             if (v == "failed") v = "ignored"
             print $(i - 1), v
         }' "$WORK/$1/pg_regress.out" | sort -u -k1,1 >"$WORK/$1/verdicts"
}

# split_diffs NAME: regression.diffs cut into one file per test under
# $WORK/NAME/diffs/, without what differs from run to run (the output
# directory, the cached tree's path, the timestamps of the ---/+++ lines).
split_diffs()
{
    local d=$WORK/$1/diffs
    mkdir -p "$d"
    [ -f "$WORK/$1/regression.diffs" ] || return 0
    sed -e "s#$WORK/$1#@outputdir@#g" -e "s#$REG#@inputdir@#g" \
        -e '/^\(---\|+++\) /s/\t.*$//' "$WORK/$1/regression.diffs" |
        awk -v d="$d" '/^diff / {
                           f = $NF; sub(/.*\//, "", f); sub(/\.out$/, "", f)
                           if (out != "") close(out)
                           out = d "/" f ".diff"
                       }
                       out != "" { print > out }'
}

for run in plain preloaded; do
    verdicts "$run"
    split_diffs "$run"
done

schedule=$(awk '$1 == "test:" { for (i = 2; i <= NF; i++) print $i }' "$REG/parallel_schedule")
both_fail=()
for t in $schedule; do
    a=$(awk -v t="$t" '$1 == t { print $2 }' "$WORK/plain/verdicts")
    b=$(awk -v t="$t" '$1 == t { print $2 }' "$WORK/preloaded/verdicts")
    a=${a:-missing}
    b=${b:-missing}
    if [ "$a" = missing ] || [ "$b" = missing ]; then
        not_ok "$t # no verdict: plain $a, preloaded $b"
    elif [ "$a" != "$b" ]; then
        not_ok "$t # plain $a, preloaded $b"
    elif [ "$a" = ok ]; then
        ok "$t"
    elif cmp -s "$WORK/plain/diffs/$t.diff" "$WORK/preloaded/diffs/$t.diff"; then
        ok "$t # fails in both runs, the same diff"
        both_fail+=("$t")
    else
        not_ok "$t # fails in both runs, with different diffs"
        diff -u "$WORK/plain/diffs/$t.diff" "$WORK/preloaded/diffs/$t.diff" |
            sed 's/^/# /'
    fi
done
ntests=$(wc -w <<<"$schedule")
differ=$FAILED

# The worker must really have been there: a run without it compares
# nothing.
if grep -q 'delivery_outbox sweeper started for database "regression"' \
    "$WORK/preloaded/postgres.log"; then
    ok "preloaded: the worker served the regression database"
else
    not_ok "preloaded: the worker served the regression database (not in $WORK/preloaded/postgres.log)"
fi
crash_plain=$(grep -c 'terminated by signal' "$WORK/plain/postgres.log")
crash_pre=$(grep -c 'terminated by signal' "$WORK/preloaded/postgres.log")
if [ "$crash_pre" -le "$crash_plain" ]; then
    ok "preloaded: no more server processes killed by a signal than plain ($crash_pre, $crash_plain)"
else
    not_ok "preloaded: no more server processes killed by a signal than plain ($crash_pre, $crash_plain)"
    grep -B2 -A2 'terminated by signal' "$WORK/preloaded/postgres.log" | sed 's/^/# /'
fi

# Listed with the start of each diff; the whole diffs stay in
# $WORK/plain/diffs/.
if [ ${#both_fail[@]} -gt 0 ]; then
    echo "# fails in both runs: ${both_fail[*]}"
    for t in "${both_fail[@]}"; do
        echo "# --- $t: $(awk '/^@@/ { h = 1 } h && /^[-+]/ { n++ } END { print n + 0 }' "$WORK/plain/diffs/$t.diff") lines differ from expected/, the first hunk:"
        awk '/^@@/ { n++ } n == 1' "$WORK/plain/diffs/$t.diff" | head -n 12 | sed 's/^/#   /'
    done
fi
echo "# $ntests tests of parallel_schedule: $((ntests - differ)) the same in both runs (${#both_fail[@]} of them failing in both), $differ not"
echo "1..$TESTNUM"
[ "$FAILED" -eq 0 ]
