#!/usr/bin/env bash
#
# scripts/pg18.sh -- PostgreSQL 18 in a private prefix, for the suites on 18
#
# Debian's stable release has no PostgreSQL 18 server package; its source
# package postgresql-18 is in Debian's unstable suite.  This fetches it with
# `apt-get source` through a private apt configuration holding one deb-src
# line (the system's sources and lists stay as they are), builds upstream's
# tree (without Debian's patches, which place the libraries under
# /usr/lib/postgresql/18 whatever the prefix) with the TAP test modules,
# and installs it into a prefix of its own and nowhere else, cached:
# a second run on the same machine finds it there and builds nothing.
# About 4 minutes on 2 cores the first time.
#
# Prints the path of the prefix's pg_config on its last line of stdout;
# everything else goes to stderr.  Exits 2 (and prints nothing on stdout)
# when the source package cannot be fetched.
#
# Knobs (environment):
#   OUTBOX_PG18_CACHE   the cache directory (default /var/cache/delivery_outbox/pg18)
#   OUTBOX_PG18_SUITE   the Debian suite holding postgresql-18 (default unstable)
#   OUTBOX_PG18_MIRROR  default http://deb.debian.org/debian
#
# Run as root (apt-get, the cache under /var/cache); the build itself runs
# as root too, which PostgreSQL's build allows (only initdb refuses root).

set -euo pipefail

CACHE=${OUTBOX_PG18_CACHE:-/var/cache/delivery_outbox/pg18}
SUITE=${OUTBOX_PG18_SUITE:-unstable}
MIRROR=${OUTBOX_PG18_MIRROR:-http://deb.debian.org/debian}
PREFIX=$CACHE/install
APT=$CACHE/apt

log() { printf 'pg18: %s\n' "$*" >&2; }

# The contrib modules the suites load beside the extension
# (pg_stat_statements in t/013, amcheck and auto_explain for debugging),
# built with PGXS against the prefix from the source tree $1.
CONTRIB=(pg_stat_statements amcheck auto_explain)
outbox_pg18_contrib()
{
    local m
    for m in "${CONTRIB[@]}"; do
        make -C "$1/contrib/$m" USE_PGXS=1 PG_CONFIG="$PREFIX/bin/pg_config" \
            -s install >>"$CACHE/make.log" 2>&1 ||
            { tail -n 20 "$CACHE/make.log" >&2; return 1; }
    done
}
contrib_there()
{
    [ -f "$("$PREFIX/bin/pg_config" --pkglibdir)/pg_stat_statements.so" ]
}

if [ -x "$PREFIX/bin/pg_config" ] && [ -f "$PREFIX/.complete" ] && contrib_there; then
    log "cached: $("$PREFIX/bin/pg_config" --version) in $PREFIX"
    echo "$PREFIX/bin/pg_config"
    exit 0
fi

mkdir -p "$CACHE" "$APT/lists/partial" "$APT/cache/archives/partial"
exec 9>"$CACHE/lock"
flock 9

# what the build needs, from the system's own sources
need=()
for p in build-essential dpkg-dev bison flex pkgconf zlib1g-dev libssl-dev \
         libicu-dev liblz4-dev libzstd-dev libipc-run-perl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
        need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

echo "deb-src $MIRROR $SUITE main" >"$APT/sources.list"
APT_OPTS=(-o "Dir::Etc::SourceList=$APT/sources.list"
          -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$APT/lists"
          -o "Dir::Cache=$APT/cache"
          -o APT::Get::Only-Source=true)
log "apt-get update with: $(cat "$APT/sources.list")"
if ! apt-get "${APT_OPTS[@]}" update >&2; then
    log "cannot reach $MIRROR $SUITE: no PostgreSQL 18 source"
    exit 2
fi
src=$CACHE/src
rm -rf "$src"
mkdir -p "$src"
# Upstream's tree, without Debian's patches: they put the libraries under
# /usr/lib/postgresql/18 whatever the prefix
if ! (cd "$src" && apt-get "${APT_OPTS[@]}" source --download-only postgresql-18 >&2 &&
      dpkg-source --skip-patches -x ./*.dsc >&2); then
    log "apt-get source postgresql-18 failed: no PostgreSQL 18 source"
    exit 2
fi
tree=$(find "$src" -mindepth 1 -maxdepth 1 -type d -name 'postgresql-18*' | head -n 1)
[ -n "$tree" ] || { log "no source tree unpacked"; exit 2; }
if [ -x "$PREFIX/bin/pg_config" ] && [ -f "$PREFIX/.complete" ]; then
    # a prefix built before the contrib modules were: only those
    log "adding ${CONTRIB[*]} to $PREFIX"
    outbox_pg18_contrib "$tree"
    chmod -R a+rX "$PREFIX"
    rm -rf "$src"
    echo "$PREFIX/bin/pg_config"
    exit 0
fi
log "building $(basename "$tree") into $PREFIX"

cd "$tree"
./configure --prefix="$PREFIX" --enable-tap-tests --without-readline \
    --with-openssl --with-icu --with-lz4 --with-zstd >"$CACHE/configure.log" 2>&1 ||
    { tail -n 30 "$CACHE/configure.log" >&2; exit 1; }
make -j"$(nproc)" -s >"$CACHE/make.log" 2>&1 ||
    { tail -n 40 "$CACHE/make.log" >&2; exit 1; }
make -s install >>"$CACHE/make.log" 2>&1
# what PGXS's installcheck uses: pg_regress comes with install, the
# isolation tester with its own directory's; and the contrib modules the
# suites load beside the extension
make -C src/test/isolation -s install >>"$CACHE/make.log" 2>&1
outbox_pg18_contrib "$tree"
chmod -R a+rX "$PREFIX"
touch "$PREFIX/.complete"
rm -rf "$src"
log "built $("$PREFIX/bin/pg_config" --version)"
echo "$PREFIX/bin/pg_config"
