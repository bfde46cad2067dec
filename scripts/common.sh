# shellcheck shell=bash
#
# scripts/common.sh -- shared set-up for scripts/test.sh and scripts/demo.sh
#
# Sourced, never run.  outbox_setup does, in order:
#   1. installs the Debian packages that are missing (apt-get as root, sudo
#      otherwise; nothing at all when every package is present);
#   2. copies the source tree (without .git and build products) into a fresh
#      temporary directory under /tmp owned by the unprivileged user that
#      will run the cluster and the tests: `postgres` when we are root
#      (initdb refuses root), else the current user;
#   3. builds there as that user, failing on any compiler warning, then
#      runs `make install` (as root, or through sudo);
#   4. initdb's and starts a throwaway cluster that listens on a unix socket
#      inside the temporary directory only, and exports PGHOST, PGPORT,
#      PGUSER and PGDATABASE for it.
# An EXIT trap stops that cluster and removes the temporary directory
# (KEEP_TMP=1 keeps it).  Nothing else on the machine is touched or stopped.
#
# Knobs (environment):
#   PG_CONFIG        default /usr/lib/postgresql/15/bin/pg_config
#   PG_CFLAGS        extra compiler flags, e.g. '-Wextra -Wno-unused-parameter'
#   OUTBOX_PORT      first port to try, default 54329 (the next free one is used)
#   OUTBOX_USER      OS user for the cluster and tests (default: see above)
#   OUTBOX_PACKAGES  extra Debian packages the caller needs
#   OUTBOX_COMMAND_PACKAGES  extra "command=package" pairs: the package is
#                    installed only when the command is not on PATH
#   OUTBOX_QUIET=1   show build/initdb output only when something fails
#   KEEP_TMP=1       keep the temporary directory (data, logs, results)
#
# After outbox_setup:
#   OUTBOX_WORK  the temporary directory   OUTBOX_SRC   the copied tree
#   OUTBOX_DATA  the data directory        OUTBOX_LOG   the server log
#   PG_BINDIR    the server's bindir       OUTBOX_RUN_USER
#   as_user CMD...   runs CMD as OUTBOX_RUN_USER, in OUTBOX_WORK, with a clean
#                    environment: PATH (server bindir first), HOME, the PG*
#                    variables of the cluster.
#   as_user_bg CMD...  the same in the background; pid in OUTBOX_BG_PID.
# A caller may define outbox_on_exit(), which the trap calls before stopping
# the cluster, and outbox_after_exit RC, called last.

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
OUTBOX_PORT=${OUTBOX_PORT:-54329}
OUTBOX_BASE_PACKAGES=(postgresql-15 postgresql-server-dev-15 build-essential
                      libipc-run-perl)
# What examples/ needs (scripts/test.sh's examples suite): psycopg 3 and
# PyYAML for the Python relay and the exporter check, libpq for the C relay
# (postgresql-server-dev-15 pulls it in too), Node.js for the Node relay,
# cargo and the packaged crates for the Rust relay (built offline).
# shellcheck disable=SC2034  # used by scripts/test.sh
OUTBOX_EXAMPLE_PACKAGES=(python3-psycopg python3-yaml libpq-dev nodejs
                         cargo librust-tokio-postgres-dev librust-tokio-dev
                         librust-futures-util-dev prometheus-postgres-exporter curl)
# What scripts/pg_regress_suite.sh needs to unpack PostgreSQL's source
# (dpkg-source) and configure it as the server is (ICU through pkg-config,
# libxml2, OpenSSL, zlib).
# shellcheck disable=SC2034  # used by scripts/test.sh, pg_regress_suite.sh
OUTBOX_PG_REGRESS_PACKAGES=(dpkg-dev pkgconf libicu-dev libxml2-dev libssl-dev
                            zlib1g-dev)
# "command=package": the package is installed only when the command is
# missing.  NodeSource's nodejs ships npm and conflicts with Debian's npm.
# "optional:command=package": the same, but a failure to install it is only a
# warning, and the tests that need it skip (t/018_patroni.pl: Patroni, etcd).
# shellcheck disable=SC2034  # used by scripts/test.sh
OUTBOX_EXAMPLE_COMMANDS=(npm=npm optional:patroni=patroni optional:etcd=etcd-server)

OUTBOX_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUTBOX_WORK=
OUTBOX_CLUSTER_UP=0
OUTBOX_TORN_DOWN=0

log()  { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die()  { printf 'error: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# Run a command with root privileges: directly as root, else through sudo.
as_root()
{
    if is_root; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        if [ -t 0 ]; then sudo "$@"; else sudo -n "$@"; fi
    else
        printf 'error: need root for: %s (run as root, or install sudo)\n' "$*" >&2
        return 1
    fi
}

# outbox_user_cmd CMD...: set OUTBOX_CMD to CMD run as the unprivileged
# user, in OUTBOX_WORK, with a clean environment (the cluster's PG*, PATH with
# the server's bindir first).
outbox_user_cmd()
{
    local -a envv=(
        "PATH=$PG_BINDIR:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        "HOME=$OUTBOX_RUN_HOME"
        "USER=$OUTBOX_RUN_USER"
        "LOGNAME=$OUTBOX_RUN_USER"
        "LANG=C.UTF-8"
        "PG_CONFIG=$PG_CONFIG"
    )
    local v
    for v in PGHOST PGPORT PGUSER PGDATABASE TERM CI PG_TEST_EXTRA \
             PG_TEST_TIMEOUT_DEFAULT PG_TEST_NOCLEAN; do
        if [ -n "${!v:-}" ]; then envv+=("$v=${!v}"); fi
    done
    OUTBOX_CMD=(env -i -C "${OUTBOX_WORK:-/tmp}" "${envv[@]}" "$@")
    if is_root && [ "$OUTBOX_RUN_USER" != root ]; then
        OUTBOX_CMD=(runuser -u "$OUTBOX_RUN_USER" -- "${OUTBOX_CMD[@]}")
    fi
}

# as_user CMD...: run CMD as the unprivileged user (see outbox_user_cmd).
as_user()
{
    outbox_user_cmd "$@"
    "${OUTBOX_CMD[@]}"
}

# as_user_bg CMD...: the same in the background; OUTBOX_BG_PID is its pid
# (runuser's when we are root: it passes SIGTERM on to CMD).
as_user_bg()
{
    outbox_user_cmd "$@"
    "${OUTBOX_CMD[@]}" &
    # shellcheck disable=SC2034  # read by the caller
    OUTBOX_BG_PID=$!
}

pkg_installed()
{
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

outbox_install_packages()
{
    local -a want=("${OUTBOX_BASE_PACKAGES[@]}")
    local -a missing=()
    local p

    # shellcheck disable=SC2206   # a space-separated list on purpose
    want+=(${OUTBOX_PACKAGES:-})
    local -a optional=()
    for p in ${OUTBOX_COMMAND_PACKAGES:-}; do
        case $p in
            optional:*) p=${p#optional:}
                command -v "${p%%=*}" >/dev/null 2>&1 || optional+=("${p#*=}") ;;
            *) command -v "${p%%=*}" >/dev/null 2>&1 || want+=("${p#*=}") ;;
        esac
    done
    # The optional ones first, on their own (the same steps, in a subshell
    # whose failure is only a warning).
    [ ${#optional[@]} -eq 0 ] ||
        (OUTBOX_BASE_PACKAGES=("${optional[@]}")
         OUTBOX_PACKAGES='' OUTBOX_COMMAND_PACKAGES='' outbox_install_packages) ||
        warn "could not install ${optional[*]}: the tests that need them skip"
    command -v dpkg-query >/dev/null 2>&1 ||
        die "dpkg-query not found: this script installs Debian packages (${want[*]})"
    for p in "${want[@]}"; do
        pkg_installed "$p" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        return 0
    fi
    log "installing Debian packages: ${missing[*]}"
    if ! is_root && ! command -v sudo >/dev/null 2>&1; then
        die "missing Debian packages: ${missing[*]}; install them as root (apt-get install ${missing[*]}) or install sudo"
    fi
    as_root apt-get update -q ||
        die "apt-get update failed"
    # Packages must not start services: Debian's postgresql-15 would start a
    # cluster, prometheus-postgres-exporter a server on every interface.  A
    # policy-rc.d that says 101 ("action forbidden") keeps them stopped; one
    # the machine already has is left alone.
    local policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
    if [ ! -e "$policy" ]; then
        as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy" && made_policy=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" || rc=$?
    [ "$made_policy" = 1 ] && as_root rm -f "$policy"
    [ "$rc" = 0 ] || die "apt-get install ${missing[*]} failed"
    for p in "${missing[@]}"; do
        pkg_installed "$p" || die "package $p is still not installed"
    done
}

outbox_pick_user()
{
    if [ -n "${OUTBOX_USER:-}" ]; then
        OUTBOX_RUN_USER=$OUTBOX_USER
    elif is_root; then
        OUTBOX_RUN_USER=postgres
    else
        OUTBOX_RUN_USER=$(id -un)
    fi
    if is_root && [ "$OUTBOX_RUN_USER" = root ]; then
        die "initdb refuses to run as root: set OUTBOX_USER to an unprivileged user"
    fi
    local pw
    pw=$(getent passwd "$OUTBOX_RUN_USER") ||
        die "OS user '$OUTBOX_RUN_USER' does not exist (the postgresql-15 package creates 'postgres')"
    OUTBOX_RUN_HOME=$(printf '%s\n' "$pw" | cut -d: -f6)
    if ! is_root && [ "$OUTBOX_RUN_USER" != "$(id -un)" ]; then
        die "OUTBOX_USER=$OUTBOX_RUN_USER differs from the current user: only root can switch users"
    fi
}

# A port is busy if something listens on it on loopback, or a server has its
# socket in one of the usual directories.  Our own socket directory is new,
# so nothing can clash there.
port_busy()
{
    local p=$1
    [ -S "/var/run/postgresql/.s.PGSQL.$p" ] && return 0
    [ -S "/tmp/.s.PGSQL.$p" ] && return 0
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && return 0
    return 1
}

outbox_pick_port()
{
    local p=$OUTBOX_PORT i
    for i in $(seq 0 99); do
        if ! port_busy $((p + i)); then
            PGPORT=$((p + i))
            return 0
        fi
    done
    die "no free port in $p..$((p + 99))"
}

# Copy the tree, minus .git and anything a previous build or test run left.
outbox_copy_tree()
{
    OUTBOX_WORK=$(mktemp -d /tmp/delivery_outbox.XXXXXX) ||
        die "mktemp failed"
    OUTBOX_SRC=$OUTBOX_WORK/src
    OUTBOX_DATA=$OUTBOX_WORK/data
    OUTBOX_LOG=$OUTBOX_WORK/postgres.log
    mkdir -p "$OUTBOX_SRC" "$OUTBOX_WORK/sock"
    tar -C "$OUTBOX_TOP" -cf - \
        --exclude=./.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
        --exclude=./results --exclude=./output_iso --exclude=./tmp_check \
        --exclude=./tmp_check_iso --exclude=./log --exclude=./regression.diffs \
        --exclude=./regression.out --exclude=./dist \
        --exclude=./examples/node/node_modules --exclude=./examples/c/relay \
        --exclude=./examples/c/producer --exclude=./console/node_modules . |
        tar -C "$OUTBOX_SRC" -xf - ||
        die "copying $OUTBOX_TOP to $OUTBOX_SRC failed"
    if is_root; then
        chown -R "$OUTBOX_RUN_USER:" "$OUTBOX_WORK" || die "chown $OUTBOX_WORK failed"
    fi
    chmod 700 "$OUTBOX_WORK"
}

# run_logged FILE CMD...: run CMD with its output in FILE; print that output
# unless OUTBOX_QUIET=1 or RUN_LOGGED_QUIET=1, and always when CMD failed.
run_logged()
{
    local out=$1 rc=0
    shift
    "$@" >"$out" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ] || { [ "${OUTBOX_QUIET:-0}" != 1 ] && [ "${RUN_LOGGED_QUIET:-0}" != 1 ]; }; then
        cat "$out"
    fi
    return "$rc"
}

outbox_build()
{
    local out=$OUTBOX_WORK/build.log
    # -Wall comes from PGXS; -Wextra is ours (unused parameters are the
    # norm in fmgr and hook signatures)
    local cflags=${PG_CFLAGS:--Wextra -Wno-unused-parameter}
    log "building in $OUTBOX_SRC with $cflags (any compiler warning fails the build)"
    run_logged "$out" as_user make -C "$OUTBOX_SRC" PG_CONFIG="$PG_CONFIG" \
        "PG_CFLAGS=$cflags" ||
        die "build failed"
    if grep -q 'warning:' "$out"; then
        [ "${OUTBOX_QUIET:-0}" = 1 ] && cat "$out"
        die "the build printed compiler warnings: $(grep -c 'warning:' "$out")"
    fi
    local libdir extdir
    libdir=$("$PG_CONFIG" --pkglibdir)
    extdir=$("$PG_CONFIG" --sharedir)/extension
    if ! is_root && ! command -v sudo >/dev/null 2>&1 &&
        { [ ! -w "$libdir" ] || [ ! -w "$extdir" ]; }; then
        die "make install needs to write $libdir and $extdir: run as root, or install sudo"
    fi
    log "installing into $libdir and $extdir"
    RUN_LOGGED_QUIET=1 run_logged "$OUTBOX_WORK/install.log" \
        as_root make -C "$OUTBOX_SRC" PG_CONFIG="$PG_CONFIG" install ||
        die "make install failed"
}

# outbox_start_cluster: initdb and start the throwaway cluster; lines in
# OUTBOX_EXTRA_CONF are appended to its postgresql.conf (bench/run.sh).
outbox_start_cluster()
{
    local sock=$OUTBOX_WORK/sock
    outbox_pick_port
    log "starting a throwaway cluster as $OUTBOX_RUN_USER (socket $sock, port $PGPORT)"
    RUN_LOGGED_QUIET=1 run_logged "$OUTBOX_WORK/initdb.log" \
        as_user initdb -D "$OUTBOX_DATA" -A trust -E UTF8 --locale=C --no-sync \
        -U "$OUTBOX_RUN_USER" ||
        die "initdb failed"
    cat >>"$OUTBOX_DATA/postgresql.conf" <<EOF

# throwaway test cluster (scripts/common.sh)
listen_addresses = ''
unix_socket_directories = '$sock'
port = $PGPORT
max_connections = 50
${OUTBOX_EXTRA_CONF:-}
EOF
    PGHOST=$sock
    PGUSER=$OUTBOX_RUN_USER
    PGDATABASE=postgres
    export PGHOST PGPORT PGUSER PGDATABASE
    if ! as_user pg_ctl -D "$OUTBOX_DATA" -l "$OUTBOX_LOG" -w -t 60 start >"$OUTBOX_WORK/pg_ctl.log" 2>&1; then
        cat "$OUTBOX_WORK/pg_ctl.log" "$OUTBOX_LOG" >&2
        die "the server did not start"
    fi
    OUTBOX_CLUSTER_UP=1
}

# outbox_switch_major PG_CONFIG: from here on, another PostgreSQL major:
# the cluster stopped, the tree built again and installed for that
# PG_CONFIG (its own prefix), a new cluster initdb'd and started.  Returns
# non-zero (without exiting) when any of it fails.
outbox_switch_major()
{
    local major
    outbox_stop_cluster
    PG_CONFIG=$1
    PG_BINDIR=$("$PG_CONFIG" --bindir) || return 1
    major=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
    as_user make -C "$OUTBOX_SRC" PG_CONFIG="$PG_CONFIG" clean >/dev/null 2>&1
    (outbox_build) || return 1
    OUTBOX_DATA=$OUTBOX_WORK/data-$major
    OUTBOX_LOG=$OUTBOX_WORK/postgres-$major.log
    (outbox_start_cluster) || return 1
    # what outbox_start_cluster set, in this shell
    PGHOST=$OUTBOX_WORK/sock
    PGUSER=$OUTBOX_RUN_USER
    PGDATABASE=postgres
    PGPORT=$(sed -nE 's/^port = ([0-9]+)$/\1/p' "$OUTBOX_DATA/postgresql.conf" | tail -n 1)
    export PGHOST PGPORT PGUSER PGDATABASE
    OUTBOX_CLUSTER_UP=1
}

outbox_stop_cluster()
{
    if [ "$OUTBOX_CLUSTER_UP" = 1 ]; then
        OUTBOX_CLUSTER_UP=0
        as_user pg_ctl -D "$OUTBOX_DATA" -m fast -w -t 60 stop >/dev/null 2>&1 ||
            warn "pg_ctl stop failed (log: $OUTBOX_LOG)"
    fi
}

# Stop what we started and remove the temporary directory; idempotent.
outbox_teardown()
{
    [ "$OUTBOX_TORN_DOWN" = 1 ] && return 0
    OUTBOX_TORN_DOWN=1
    if declare -F outbox_on_exit >/dev/null; then
        outbox_on_exit || true
    fi
    outbox_stop_cluster
    if [ -n "$OUTBOX_WORK" ] && [ -d "$OUTBOX_WORK" ]; then
        if [ "${KEEP_TMP:-0}" = 1 ]; then
            log "kept $OUTBOX_WORK (KEEP_TMP=1)"
        else
            rm -rf "$OUTBOX_WORK"
        fi
    fi
}

outbox_exit_trap()
{
    local rc=$?
    trap - EXIT INT TERM HUP
    outbox_teardown
    if declare -F outbox_after_exit >/dev/null; then
        outbox_after_exit "$rc" || true
    fi
    exit "$rc"
}

outbox_setup()
{
    trap outbox_exit_trap EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP

    outbox_install_packages
    [ -x "$PG_CONFIG" ] || die "PG_CONFIG=$PG_CONFIG is not an executable pg_config"
    PG_BINDIR=$("$PG_CONFIG" --bindir)
    outbox_pick_user
    outbox_copy_tree
    outbox_build
    outbox_start_cluster
}
