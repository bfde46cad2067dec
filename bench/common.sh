# shellcheck shell=bash
#
# bench/common.sh -- what bench/run.sh and bench/instructions.sh share.
# Sourced, never run; sources scripts/common.sh.
#
#   bench_setup PACKAGES...   the EXIT trap, the Debian packages (plus
#                             PACKAGES), the run user and a copy of the tree
#   bench_build_extension     build and install it (one build at a time on
#                             this machine), or BENCH_NO_BUILD=1: use the
#                             installed one
#   bench_e12_tables DB       bench_plain (E1) and bench_notify (E2) in DB,
#                             which has the extension
#   bench_statement FILE      a pgbench script's statement, its :r as $1
#                             (for PREPARE)

# shellcheck source=scripts/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/scripts/common.sh"

BENCH_DIR=$OUTBOX_TOP/bench

bench_setup()
{
    trap outbox_exit_trap EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    OUTBOX_PACKAGES="$* ${OUTBOX_PACKAGES:-}"
    outbox_install_packages
    [ -x "$PG_CONFIG" ] || die "PG_CONFIG=$PG_CONFIG is not an executable pg_config"
    PG_BINDIR=$("$PG_CONFIG" --bindir)
    outbox_pick_user
    outbox_copy_tree
}

bench_build_extension()
{
    if [ "${BENCH_NO_BUILD:-0}" = 1 ]; then
        log "BENCH_NO_BUILD=1: using the installed extension"
        return
    fi
    # The extension directory is shared by everyone on this machine.
    exec 9>/tmp/outbox-build.lock
    flock 9
    outbox_build
    flock -u 9
    exec 9>&-
}

# E1's table has delivery_outbox's columns, defaults, constraints and indexes
# and its own sequence, no trigger; E2's the same plus the seed system's
# PL/pgSQL AFTER INSERT trigger doing pg_notify(channel, id).
bench_e12_tables()
{
    as_user psql -X -q -v ON_ERROR_STOP=1 -d "$1" <<'SQL'
CREATE TABLE bench_plain (LIKE delivery_outbox INCLUDING ALL);
CREATE SEQUENCE bench_plain_id_seq OWNED BY bench_plain.id;
ALTER TABLE bench_plain ALTER id SET DEFAULT nextval('bench_plain_id_seq');
CREATE TABLE bench_notify (LIKE delivery_outbox INCLUDING ALL);
CREATE SEQUENCE bench_notify_id_seq OWNED BY bench_notify.id;
ALTER TABLE bench_notify ALTER id SET DEFAULT nextval('bench_notify_id_seq');
CREATE FUNCTION bench_notify_id() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_notify('delivery_outbox', NEW.id::text); RETURN NULL; END $$;
CREATE TRIGGER bench_notify_id AFTER INSERT ON bench_notify
    FOR EACH ROW EXECUTE FUNCTION bench_notify_id();
SQL
}

bench_statement()
{
    grep -v -e '^--' -e '^\\' "$BENCH_DIR/$1" | tr '\n' ' ' |
        sed -e 's/:r\b/$1/g' -e 's/; *$//'
}
