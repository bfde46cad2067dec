#!/usr/bin/env bash
#
# scripts/test.sh -- build, install and test delivery_outbox
#
# Installs what is missing, builds (a compiler warning fails the build),
# installs, starts a throwaway cluster as an unprivileged user (see
# scripts/common.sh), then runs each suite on its own so that one failing
# suite does not hide the others:
#   regress     sql/*.sql        make installcheck ISOLATION= TAP_TESTS=
#   regress (direct_insert=off)  the same with PGOPTIONS='-c
#               delivery_outbox.direct_insert=off' (outbox_enqueue through a
#               plain SQL INSERT)
#   isolation   specs/*.spec     make installcheck REGRESS= TAP_TESTS=
#   isolation (preloaded)        the same, the cluster restarted with
#                                shared_preload_libraries = delivery_outbox
#   TAP         t/*.pl           make installcheck REGRESS= ISOLATION=,
#                                two scripts at a time (OUTBOX_TAP_JOBS=2)
#   pg_regress  scripts/pg_regress_suite.sh: PostgreSQL's own regression
#               suite (parallel_schedule), plain and with the library
#               preloaded, on scratch clusters of its own; every test must
#               give the same result in both (about 1.5 min, 2.5 min when it
#               fetches and builds the source; OUTBOX_PG_REGRESS_TEST=0
#               skips it)
#   fuzz        scripts/fuzz.sh: sqlsmith and a generator of hostile calls
#               on a scratch cluster of its own (about 1.5 min;
#               OUTBOX_FUZZ_TEST=0 skips it)
#   pgindent    scripts/pgindent.sh --check: the C sources as pgindent
#               leaves them (OUTBOX_PGINDENT_TEST=0 skips it)
#   examples    examples/test_examples.sh: the Python, Node.js and C relays
#               and producers against the cluster (own databases), and the
#               postgres_exporter queries
#   console     console/test.sh: the operator's console in chromium
#               (OUTBOX_CONSOLE_TEST=0 skips it)
#   citus       t/026_citus.pl (Level 1) and t/027_citus_distributed.pl
#               (Level 2) on a coordinator and two workers, under a
#               copy of the installation with Citus (scripts/citus.sh
#               builds it once from the vendored tarball, 6-7.5 min, then
#               cached; the suite itself about 80 s; a skip without the
#               tarball; OUTBOX_CITUS_TEST=0 skips it); on 18 too
#   [18]        regress, isolation, TAP and examples again on PostgreSQL 18
#               (scripts/pg18.sh builds it once into a cached prefix;
#               OUTBOX_PG18_TEST=0 skips it)
#   package     scripts/package.sh --worktree: versions, META.json, release
#               tarball, dpkg-buildpackage, CREATE EXTENSION from the .deb on
#               a clean installation (about 20-40 s; OUTBOX_PACKAGE_TEST=0
#               skips it)
# Every regress test, every isolation spec, every TAP assertion, every test
# of PostgreSQL's schedule and every examples or package step counts as one
# test; the counts come from the runners' own summaries (PostgreSQL 15's
# pg_regress and prove), checked against their exit status.  On failure it prints regression.diffs and the
# TAP logs.  The last line is always "N passed, N failed"; the exit status is
# non-zero when a test failed or when no test ran.
#
# Usage: scripts/test.sh          (KEEP_TMP=1 keeps the work directory)

set -uo pipefail

# shellcheck source=scripts/common.sh
. "$(dirname "$0")/common.sh"
OUTBOX_PACKAGES="${OUTBOX_EXAMPLE_PACKAGES[*]} ${OUTBOX_PACKAGES:-}"
OUTBOX_COMMAND_PACKAGES="${OUTBOX_EXAMPLE_COMMANDS[*]} ${OUTBOX_COMMAND_PACKAGES:-}"

# A set-up failure (packages, build, warnings, initdb) is one failed test,
# so that the closing line is there whatever happens.
SETUP_DONE=0
# shellcheck disable=SC2317  # called from the EXIT trap in common.sh
outbox_after_exit()
{
    if [ "$SETUP_DONE" != 1 ]; then
        echo "0 passed, 1 failed"
    fi
}

set -e
outbox_setup
set +e
SETUP_DONE=1

TOTAL_PASS=0
TOTAL_FAIL=0
TOTAL_SKIP=0
SUMMARY=()

# count_regress LOG: "passed failed" from the output of pg_regress or
# pg_isolation_regress (PostgreSQL 15's, and 18's TAP form of the same).  Its closing summary gives the
# counts (a failure it was told to ignore passes):
#    All N tests passed.
#    P of N tests passed, I failed test(s) ignored.
#    F of N tests failed.
#    F of N tests failed, I of these failures ignored.
# Without one it stopped early (it could not connect, or gave up on a
# diff): then its verdict lines count ("test name ... ok 12 ms", "     name
# ... FAILED", "... failed (ignored)"), a test that started but has no
# verdict is a failure, and so is the missing summary.
count_regress()
{
    awk '
        /^ +All [0-9]+ tests passed\. *$/ {
            summary = 1; spass = $2; sfail = 0; next
        }
        # PostgreSQL 18 writes TAP: "ok 1 - name", "# All N tests passed."
        /^# All [0-9]+ tests passed\. *$/ {
            summary = 1; spass = $3; sfail = 0; next
        }
        /^# [0-9]+ of [0-9]+ tests passed, [0-9]+ failed test\(s\) ignored\. *$/ {
            summary = 1; spass = $4; sfail = 0; next
        }
        /^# [0-9]+ of [0-9]+ tests failed\. *$/ {
            summary = 1; spass = $4 - $2; sfail = $2; next
        }
        /^# [0-9]+ of [0-9]+ tests failed, [0-9]+ of these failures ignored\. *$/ {
            summary = 1; spass = $4 - $2 + $7; sfail = $2 - $7; next
        }
        /^ok [0-9]+ +[-+] /                    { pass++; next }
        /^not ok [0-9]+ +[-+] .*# +\(ignored\)/ { pass++; next }
        /^not ok [0-9]+ +[-+] /                { fail++; next }
        /^ +[0-9]+ of [0-9]+ tests passed, [0-9]+ failed test\(s\) ignored\. *$/ {
            summary = 1; spass = $3; sfail = 0; next
        }
        /^ +[0-9]+ of [0-9]+ tests failed\. *$/ {
            summary = 1; spass = $3 - $1; sfail = $1; next
        }
        /^ +[0-9]+ of [0-9]+ tests failed, [0-9]+ of these failures ignored\. *$/ {
            summary = 1; spass = $3 - $1 + $6; sfail = $1 - $6; next
        }
        /^(test +| +)?[^ ]+ +\.\.\. +ok( |$)/            { pass++; next }
        /^(test +| +)?[^ ]+ +\.\.\. +failed \(ignored\)/ { pass++; next }
        /^(test +| +)?[^ ]+ +\.\.\. +FAILED/             { fail++; next }
        # started but never finished
        /^(test +| +)?[^ ]+ +\.\.\. /                     { fail++; next }
        END {
            if (summary)
                printf "%d %d\n", spass, sfail
            else
                printf "%d %d\n", pass, fail + 1
        }
    ' "$1"
}

# count_tap LOG: "passed failed skipped" from TAP output (prove -v, or the
# examples and package steps).  Top-level "ok N" / "not ok N" lines are
# assertions (a "not ok ... # TODO" is an expected failure, so it passes;
# "ok ... # skip" is a skip).  A script that died, or whose plan does not
# match, counts one more failure unless one of its assertions already
# failed.
count_tap()
{
    awk '
        function flush() {
            if (bad && !file_fail) fail++
            bad = 0; file_fail = 0
        }
        /^t\/[^ ]+\.(pl|t) \.\./ { flush(); next }
        /^ok [0-9]+/ {
            if (tolower($0) ~ /# *skip/) skip++; else pass++
            next
        }
        /^not ok [0-9]+/ {
            if ($0 ~ /# *TODO/) pass++; else { fail++; file_fail++ }
            next
        }
        /^1\.\.0 *# *[Ss][Kk][Ii][Pp]/ { skip++; next }
        /Dubious, test returned|Parse errors:|No subtests run|Bad plan/ { bad = 1; next }
        /^Files=[0-9]+, Tests=[0-9]+/ { flush(); next }
        END { flush(); printf "%d %d %d\n", pass, fail, skip }
    ' "$1"
}

# prove_summary LOG: "tests result" from prove's closing lines
# ("Files=12, Tests=415, ..." and "Result: PASS" or "Result: FAIL"); "- -"
# when prove did not get that far.
prove_summary()
{
    awk '
        /^Files=[0-9]+, Tests=[0-9]+/ { t = $2; sub(/^Tests=/, "", t); sub(/,$/, "", t) }
        /^Result: / { r = $2 }
        END { printf "%s %s\n", (t == "" ? "-" : t), (r == "" ? "-" : r) }
    ' "$1"
}

record()
{
    local name=$1 pass=$2 fail=$3 skip=${4:-0}
    TOTAL_PASS=$((TOTAL_PASS + pass))
    TOTAL_FAIL=$((TOTAL_FAIL + fail))
    TOTAL_SKIP=$((TOTAL_SKIP + skip))
    SUMMARY+=("$(printf '    %-27s %5d passed %5d failed' "$name" "$pass" "$fail")$( [ "$skip" -gt 0 ] && printf ' %5d skipped' "$skip")")
}

# show_file FILE [MAXLINES]: print a file under a header, at most its last
# MAXLINES lines.
show_file()
{
    local f=$1 max=${2:-0} n
    [ -s "$f" ] || return 0
    printf '\n----- %s -----\n' "${f#"$OUTBOX_SRC"/}"
    n=$(wc -l <"$f")
    if [ "$max" -gt 0 ] && [ "$n" -gt "$max" ]; then
        printf '(%d lines, showing the last %d)\n' "$n" "$max"
        tail -n "$max" "$f"
    else
        cat "$f"
    fi
}

# run_suite NAME [VAR=VALUE...] -- make-variables...: run one suite with
# the VAR=VALUE pairs in the environment of make and the test programs
# (as_user starts from a clean environment, so they go through env), print
# its output as it goes, keep it in $OUTBOX_WORK/NAME.out; sets SUITE_RC.
run_suite()
{
    local name=$1
    local -a envv=()
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        envv+=("$1")
        shift
    done
    [ "${1:-}" = -- ] && shift
    log "suite: $name${envv[*]:+ (${envv[*]})}"
    as_user env "${envv[@]}" make -C "$OUTBOX_SRC" PG_CONFIG="$PG_CONFIG" \
        installcheck "$@" 2>&1 |
        tee "$OUTBOX_WORK/$name.out"
    SUITE_RC=${PIPESTATUS[0]}
}

# regress_suite LABEL NAME [VAR=VALUE...]: the regress suite, recorded
# under LABEL.
regress_suite()
{
    local label=$1 name=$2 p f
    shift 2
    run_suite "$name" "$@" -- ISOLATION= TAP_TESTS=
    read -r p f < <(count_regress "$OUTBOX_WORK/$name.out")
    if [ "$SUITE_RC" -ne 0 ] && [ "$f" -eq 0 ]; then
        warn "$label: make exited $SUITE_RC without a failed test; counting one failure"
        f=1
    fi
    if [ "$f" -gt 0 ]; then
        show_file "$OUTBOX_SRC/regression.diffs"
    fi
    record "$label" "$p" "$f"
}

# record_tap LABEL NAME: count the TAP lines of $OUTBOX_WORK/NAME.out, the
# output of a suite that exited with SUITE_RC, and record them under LABEL;
# a non-zero exit without a failed assertion counts one failure.
record_tap()
{
    local label=$1 name=$2 p f s
    read -r p f s < <(count_tap "$OUTBOX_WORK/$name.out")
    if [ "$SUITE_RC" -ne 0 ] && [ "$f" -eq 0 ]; then
        warn "$label: exited $SUITE_RC without a failed assertion; counting one failure"
        f=1
    fi
    record "$label" "$p" "$f" "$s"
}

have() { compgen -G "$OUTBOX_SRC/$1" >/dev/null; }

# --- the suites of one major ---------------------------------------------
# core_suites TAG SFX: regress (twice), isolation (twice) and TAP against
# the running cluster, recorded with TAG after their names and their logs
# kept with SFX after theirs: once on PostgreSQL 15, once on 18.
core_suites()
{
    local TAG=$1 SFX=$2 p f s n tests result logf
    # --- regress ---------------------------------------------------------------
    # Twice: as installed, and with outbox_enqueue's direct insert off (it then
    # inserts with a plain SQL INSERT), set for every session through PGOPTIONS.
    if have 'sql/*.sql'; then
        regress_suite "regress$TAG" "regress$SFX"
        regress_suite "regress (direct_insert=off)$TAG" "regress_direct_insert_off$SFX" \
            'PGOPTIONS=-c delivery_outbox.direct_insert=off'
    else
        log "suite: regress: no sql/*.sql, skipped"
    fi

    # --- isolation -------------------------------------------------------------
    if have 'specs/*.spec'; then
        run_suite "isolation$SFX" -- REGRESS= TAP_TESTS=
        read -r p f < <(count_regress "$OUTBOX_WORK/isolation$SFX.out")
        if [ "$SUITE_RC" -ne 0 ] && [ "$f" -eq 0 ]; then
            warn "isolation: make exited $SUITE_RC without a failed test; counting one failure"
            f=1
        fi
        if [ "$f" -gt 0 ]; then
            show_file "$OUTBOX_SRC/output_iso/regression.diffs"
        fi
        record "isolation$TAG" "$p" "$f"

        # The same specs with the library preloaded: the insert markers of
        # ordered delivery and outbox_horizon() are then in shared memory, not
        # in the lock manager, and each spec must read the same either way.
        log "restarting the cluster with shared_preload_libraries = delivery_outbox"
        if as_user pg_ctl -D "$OUTBOX_DATA" -l "$OUTBOX_LOG" -w -t 60 \
            -o "-c shared_preload_libraries=delivery_outbox" restart \
            >"$OUTBOX_WORK/pg_ctl.log" 2>&1; then
            run_suite "isolation_preloaded$SFX" -- REGRESS= TAP_TESTS=
            read -r p f < <(count_regress "$OUTBOX_WORK/isolation_preloaded$SFX.out")
            if [ "$SUITE_RC" -ne 0 ] && [ "$f" -eq 0 ]; then
                warn "isolation (preloaded): make exited $SUITE_RC without a failed test; counting one failure"
                f=1
            fi
            if [ "$f" -gt 0 ]; then
                show_file "$OUTBOX_SRC/output_iso/regression.diffs"
            fi
            record "isolation (preloaded)$TAG" "$p" "$f"
            as_user pg_ctl -D "$OUTBOX_DATA" -l "$OUTBOX_LOG" -w -t 60 \
                -o "-c shared_preload_libraries=''" restart \
                >"$OUTBOX_WORK/pg_ctl.log" 2>&1 ||
                die "the server did not restart without the preload"
        else
            cat "$OUTBOX_WORK/pg_ctl.log" "$OUTBOX_LOG" >&2
            record "isolation (preloaded)$TAG" 0 1
        fi
    else
        log "suite: isolation: no specs/*.spec, skipped"
    fi

    # --- TAP -------------------------------------------------------------------
    if have 't/*.pl'; then
        # two test scripts at a time (OUTBOX_TAP_JOBS): they mostly wait on
        # their clusters, so the suite takes about half as long; prove -v
        # still prints each script's lines together
        run_suite "tap$SFX" -- REGRESS= ISOLATION= \
            PROVE_FLAGS="-v -j${OUTBOX_TAP_JOBS:-2}"
        read -r p f s < <(count_tap "$OUTBOX_WORK/tap$SFX.out")
        read -r tests result < <(prove_summary "$OUTBOX_WORK/tap$SFX.out")
        if [ "$result" != PASS ] && [ "$f" -eq 0 ]; then
            warn "TAP: prove's result is \"$result\" without a failed assertion; counting one failure"
            f=1
        elif [ "$SUITE_RC" -ne 0 ] && [ "$f" -eq 0 ]; then
            warn "TAP: make exited $SUITE_RC without a failed assertion; counting one failure"
            f=1
        fi
        # prove's Tests= is every assertion it saw, skipped ones included: the
        # lines count_tap counted.
        n=$(grep -cE '^(not )?ok [0-9]+' "$OUTBOX_WORK/tap$SFX.out")
        if [ "$tests" != - ] && [ "$tests" -ne "$n" ]; then
            warn "TAP: prove counted $tests assertions, the log has $n; counting one failure"
            f=$((f + 1))
        fi
        if [ "$f" -gt 0 ]; then
            for logf in "$OUTBOX_SRC"/tmp_check/log/*; do
                [ -f "$logf" ] && show_file "$logf" 400
            done
        fi
        record "TAP$TAG" "$p" "$f" "$s"
    else
        log "suite: TAP: no t/*.pl, skipped"
    fi
}

core_suites "" ""

# --- PostgreSQL's regression suite -----------------------------------------
# PostgreSQL's own src/test/regress (parallel_schedule, from Debian's source
# package of the installed server, fetched and built once into
# /var/cache/delivery_outbox) on two scratch clusters of its own: plain, and
# with the library preloaded and its worker on the regression database.
# Each test must give the same result in both runs; one failing in both is
# listed in the output.  As the caller (root or sudo: apt-get source, the
# cache); it skips only when no source package can be fetched
# (OUTBOX_PG_REGRESS_TEST=0 skips it anyway).
if [ "${OUTBOX_PG_REGRESS_TEST:-1}" = 0 ]; then
    log "suite: pg_regress: skipped (OUTBOX_PG_REGRESS_TEST=0)"
elif [ -f "$OUTBOX_TOP/scripts/pg_regress_suite.sh" ]; then
    log "suite: pg_regress (PostgreSQL's parallel_schedule, plain and preloaded)"
    env PG_CONFIG="$PG_CONFIG" OUTBOX_USER="$OUTBOX_RUN_USER" \
        PG_REGRESS_WORK="$OUTBOX_WORK/pg_regress" \
        bash "$OUTBOX_TOP/scripts/pg_regress_suite.sh" 2>&1 |
        tee "$OUTBOX_WORK/pg_regress.out"
    SUITE_RC=${PIPESTATUS[0]}
    record_tap 'pg_regress (plain=preloaded)' pg_regress
fi

# --- fuzz ------------------------------------------------------------------
# scripts/fuzz.sh: sqlsmith and hostile calls of every function against
# outboxes of every kind, on a scratch cluster of its own (library
# preloaded); then no crash, no internal error, the invariants and every
# committed row (about 1.5 min; FUZZ_SECONDS and FUZZ_SQLSMITH_QUERIES
# make it longer; OUTBOX_FUZZ_TEST=0 skips it).
if [ "${OUTBOX_FUZZ_TEST:-1}" = 0 ]; then
    log "suite: fuzz: skipped (OUTBOX_FUZZ_TEST=0)"
elif [ -f "$OUTBOX_TOP/scripts/fuzz.sh" ]; then
    log "suite: fuzz (sqlsmith and hostile calls)"
    env PG_CONFIG="$PG_CONFIG" OUTBOX_USER="$OUTBOX_RUN_USER" \
        bash "$OUTBOX_SRC/scripts/fuzz.sh" 2>&1 |
        tee "$OUTBOX_WORK/fuzz.out"
    SUITE_RC=${PIPESTATUS[0]}
    record_tap fuzz fuzz
fi

# --- pgindent --------------------------------------------------------------
# The C sources as PostgreSQL's pgindent leaves them (scripts/pgindent.sh
# --check; its tools are fetched and built once, cached): one test.
# OUTBOX_PGINDENT_TEST=0 skips it.
if [ "${OUTBOX_PGINDENT_TEST:-1}" = 0 ]; then
    log "suite: pgindent: skipped (OUTBOX_PGINDENT_TEST=0)"
elif [ -f "$OUTBOX_TOP/scripts/pgindent.sh" ]; then
    log "suite: pgindent --check"
    (cd "$OUTBOX_SRC" && PG_CONFIG="$PG_CONFIG" bash scripts/pgindent.sh --check) \
        >"$OUTBOX_WORK/pgindent.out" 2>&1
    case $? in
        0) record pgindent 1 0 ;;
        2) tail -n 5 "$OUTBOX_WORK/pgindent.out"
           record pgindent 0 0 1 ;;
        *) show_file "$OUTBOX_WORK/pgindent.out" 200
           record pgindent 0 1 ;;
    esac
fi

# --- examples --------------------------------------------------------------
if [ -f "$OUTBOX_SRC/examples/test_examples.sh" ]; then
    log "suite: examples"
    as_user env EXAMPLES_RUST_TARGET="$OUTBOX_WORK/rust-target" EXAMPLES_WORK="$OUTBOX_WORK/examples" EXAMPLES_KEEP="${KEEP_TMP:-0}" \
        bash "$OUTBOX_SRC/examples/test_examples.sh" 2>&1 |
        tee "$OUTBOX_WORK/examples.out"
    SUITE_RC=${PIPESTATUS[0]}
    record_tap examples examples
else
    log "suite: examples: no examples/test_examples.sh, skipped"
fi

# --- console ---------------------------------------------------------------
# console/test.sh: the operator's console (docs/console.md) in Debian's
# chromium driven by playwright-core, against a scratch cluster of its own,
# and EXPLAIN of every statement its pages issue (no Seq Scan on an outbox
# or its dead letters); it installs chromium and the console's npm
# packages itself, and skips the browser part only when chromium cannot be
# installed.  Screenshots go to $OUTBOX_WORK/console-shots.
# OUTBOX_CONSOLE_TEST=0 skips it.
if [ "${OUTBOX_CONSOLE_TEST:-1}" = 0 ]; then
    log "suite: console: skipped (OUTBOX_CONSOLE_TEST=0)"
elif [ -f "$OUTBOX_SRC/console/test.sh" ]; then
    log "suite: console (chromium, playwright-core)"
    env PG_CONFIG="$PG_CONFIG" CONSOLE_TEST_OUT="$OUTBOX_WORK/console-shots" \
        bash "$OUTBOX_SRC/console/test.sh" 2>&1 |
        tee "$OUTBOX_WORK/console.out"
    SUITE_RC=${PIPESTATUS[0]}
    record_tap console console
fi

# --- Citus -----------------------------------------------------------------
# t/026_citus.pl: Level 1 on Citus (a coordinator and two workers on
# loopback, the outbox local on the coordinator, orders distributed), and
# t/027_citus_distributed.pl: Level 2 (the outbox distributed with them), under
# a copy of this PostgreSQL installation that has Citus in it: PostgreSQL 15
# loads extensions only from its own sharedir, and the system's must stay
# as it is.  scripts/citus.sh builds Citus from the vendored tarball once
# (cached under /var/cache/delivery_outbox/citus) and makes the copy; the
# extension, as built for the current major, goes into the copy too.  As
# the caller (root or sudo: apt-get, the cache).  A skip when the tarball
# is absent; OUTBOX_CITUS_TEST=0 skips it.  On 15 here, on 18 (Citus
# 14.0.1) in the [18] section.
# citus_suite TAG SFX: the suite for the current PG_CONFIG.
citus_suite()
{
    local TAG=$1 SFX=$2 start cfg rc saved_config saved_bindir logf
    if [ "${OUTBOX_CITUS_TEST:-1}" = 0 ]; then
        log "suite: citus$TAG: skipped (OUTBOX_CITUS_TEST=0)"
        return 0
    fi
    [ -f "$OUTBOX_SRC/t/026_citus.pl" ] || return 0
    log "suite: citus$TAG (scripts/citus.sh, t/026_citus.pl, t/027_citus_distributed.pl)"
    start=$(date +%s)
    cfg=$(as_root bash "$OUTBOX_TOP/scripts/citus.sh" --copy "$OUTBOX_WORK/citus-pg$SFX" \
        "$PG_CONFIG" 2>"$OUTBOX_WORK/citus-build$SFX.log" | tail -n 1)
    rc=${PIPESTATUS[0]}
    tail -n 3 "$OUTBOX_WORK/citus-build$SFX.log"
    if [ "$rc" = 2 ]; then
        warn "citus$TAG: no Citus source here: t/026_citus.pl skipped"
        record "citus (no Citus source)$TAG" 0 0 1
    elif [ "$rc" != 0 ] || [ ! -x "$cfg" ]; then
        show_file "$OUTBOX_WORK/citus-build$SFX.log" 60
        record "citus build$TAG" 0 1
    elif ! as_user make -C "$OUTBOX_SRC" PG_CONFIG="$cfg" install \
        >"$OUTBOX_WORK/citus-install$SFX.log" 2>&1; then
        show_file "$OUTBOX_WORK/citus-install$SFX.log" 60
        record "citus (install into the copy)$TAG" 0 1
    else
        saved_config=$PG_CONFIG
        saved_bindir=$PG_BINDIR
        PG_CONFIG=$cfg
        PG_BINDIR=$("$PG_CONFIG" --bindir)
        run_suite "citus$SFX" -- REGRESS= ISOLATION= \
            PROVE_TESTS="t/026_citus.pl t/027_citus_distributed.pl" PROVE_FLAGS=-v
        record_tap "citus$TAG" "citus$SFX"
        if [ "$(count_tap "$OUTBOX_WORK/citus$SFX.out" | cut -d' ' -f2)" != 0 ]; then
            for logf in "$OUTBOX_SRC"/tmp_check/log/*02[67]_citus*; do
                [ -f "$logf" ] && show_file "$logf" 200
            done
        fi
        PG_CONFIG=$saved_config
        PG_BINDIR=$saved_bindir
    fi
    log "citus$TAG: $(( $(date +%s) - start )) s"
}
citus_suite "" ""

# --- package ---------------------------------------------------------------
# As the caller (root or sudo: apt-get for the build dependencies); it builds
# and starts its own throwaway cluster and installs nothing into the system.
if [ "${OUTBOX_PACKAGE_TEST:-1}" = 0 ]; then
    log "suite: package: skipped (OUTBOX_PACKAGE_TEST=0)"
elif [ -f "$OUTBOX_TOP/scripts/package.sh" ]; then
    log "suite: package"
    bash "$OUTBOX_TOP/scripts/package.sh" --worktree 2>&1 | tee "$OUTBOX_WORK/package.out"
    SUITE_RC=${PIPESTATUS[0]}
    record_tap package package
fi

# --- PostgreSQL 18 --------------------------------------------------------
# The same core suites and the examples on PostgreSQL 18, built once into a
# private, cached prefix from Debian's source package (scripts/pg18.sh,
# about 4.5 minutes the first time).  The package suite needs Debian's
# PostgreSQL 15 packages and PostgreSQL's own suite the installed server's
# source: both ran on 15 only.  OUTBOX_PG18_TEST=0 skips it.
if [ "${OUTBOX_PG18_TEST:-1}" = 0 ]; then
    log "suite: PostgreSQL 18: skipped (OUTBOX_PG18_TEST=0)"
else
    PG15_CONFIG=$PG_CONFIG
    log "PostgreSQL 18: finding or building it (scripts/pg18.sh)"
    pg18_config=$(as_root bash "$OUTBOX_TOP/scripts/pg18.sh" 2>"$OUTBOX_WORK/pg18.log" | tail -n 1)
    pg18_rc=${PIPESTATUS[0]}
    tail -n 3 "$OUTBOX_WORK/pg18.log"
    if [ "$pg18_rc" = 2 ]; then
        warn "PostgreSQL 18: its source package could not be fetched; the suites ran on 15 only"
        record 'PostgreSQL 18 (not fetched)' 0 0 1
    elif [ "$pg18_rc" != 0 ] || [ ! -x "$pg18_config" ]; then
        show_file "$OUTBOX_WORK/pg18.log" 60
        record 'PostgreSQL 18 build' 0 1
    elif ! outbox_switch_major "$pg18_config"; then
        record 'build and cluster [18]' 0 1
    else
        log "suites on $("$PG_CONFIG" --version)"
        core_suites " [18]" "_18"
        citus_suite " [18]" "_18"
        if [ -f "$OUTBOX_SRC/examples/test_examples.sh" ]; then
            log "suite: examples [18]"
            as_user env EXAMPLES_RUST_TARGET="$OUTBOX_WORK/rust-target" EXAMPLES_WORK="$OUTBOX_WORK/examples_18" EXAMPLES_KEEP="${KEEP_TMP:-0}" \
                bash "$OUTBOX_SRC/examples/test_examples.sh" 2>&1 |
                tee "$OUTBOX_WORK/examples_18.out"
            SUITE_RC=${PIPESTATUS[0]}
            record_tap 'examples [18]' examples_18
        fi
        # pg_upgrade from a 15 cluster to an 18 one: the 15 TAP harness
        # with the 15 binaries, the 18 ones named by OUTBOX_PG18_BINDIR
        if [ -f "$OUTBOX_SRC/t/025_pg_upgrade.pl" ]; then
            pg18_bindir=$PG_BINDIR
            saved_config=$PG_CONFIG
            PG_CONFIG=$PG15_CONFIG
            PG_BINDIR=$("$PG_CONFIG" --bindir)
            run_suite tap_upgrade "OUTBOX_PG18_BINDIR=$pg18_bindir" -- \
                REGRESS= ISOLATION= PROVE_TESTS=t/025_pg_upgrade.pl PROVE_FLAGS=-v
            record_tap 'TAP pg_upgrade 15 -> 18' tap_upgrade
            PG_CONFIG=$saved_config
            PG_BINDIR=$pg18_bindir
        fi
        log "PostgreSQL's own suite and the package suite ran on 15 only"
    fi
fi

outbox_teardown

log "results"
if [ ${#SUMMARY[@]} -gt 0 ]; then
    printf '%s\n' "${SUMMARY[@]}"
fi
if [ "$TOTAL_PASS" -eq 0 ] && [ "$TOTAL_FAIL" -eq 0 ]; then
    echo "error: no test ran" >&2
fi
if [ "$TOTAL_SKIP" -gt 0 ]; then
    echo "($TOTAL_SKIP skipped)"
fi
echo "$TOTAL_PASS passed, $TOTAL_FAIL failed"

if [ "$TOTAL_FAIL" -gt 0 ] || [ "$TOTAL_PASS" -eq 0 ]; then
    exit 1
fi
exit 0
