#!/usr/bin/env bash
#
# scripts/citus.sh -- Citus built from the vendored tarball, cached
#
# Citus is not a Debian package.  Its source tarballs sit in the shared
# vendor directory beside the repository (never in the repository itself):
#   citus-13.2.2.tar.gz  for PostgreSQL 15 (and 16, 17: 13.x supports 15-17)
#   citus-14.0.1.tar.gz  for PostgreSQL 16-18 (preferred there)
#   citus-13.2.2-pg15.18.patch  applied (patch -p1) to 13.2.2 when the
#     server's own headers declare have_createdb_privilege(), as
#     PostgreSQL 15.18 and later minors do: Citus's compatibility header
#     then defines a second, static one and the build fails.
# This builds the one that fits PG_CONFIG, `make install DESTDIR=...` into
# a staging tree (never the server's own directories: a CI run uses the
# system's PostgreSQL 15), and gathers what a server needs into
#   $OUTBOX_CITUS_CACHE/<major>/<key>/lib/        citus.so, citus_columnar.so, ...
#   $OUTBOX_CITUS_CACHE/<major>/<key>/extension/  the control and SQL files
# where <key> is a hash of the tarball's (and patch's) SHA-256 and the
# server's version and paths, so a second run builds nothing.  About 4-5
# minutes on 2 cores the first time (nice -n 19 make -j2: benchmarks share
# this machine).
#
# Usage:
#   scripts/citus.sh [PG_CONFIG]
#       prints the cache directory (holding lib/ and extension/) on its
#       last line of stdout
#   scripts/citus.sh --copy DIR [PG_CONFIG]
#       also copies that PostgreSQL installation (bindir's parent, sharedir,
#       includedir) under DIR, once, installs Citus into the copy, and
#       prints the copy's pg_config instead.  PostgreSQL 15 has no
#       extension_control_path, so a server loads extensions only from its
#       own sharedir: this is how a test cluster gets Citus without writing
#       into the system's installation.  The caller installs delivery_outbox
#       into the copy with `make install PG_CONFIG=<printed pg_config>`.
# Everything else goes to stderr.
#
# Exit status: 0 done; 2 no tarball for this major (a fresh clone outside
# this setting: callers skip their Citus tests); 1 anything else failed.
#
# Knobs (environment):
#   PG_CONFIG            default /usr/lib/postgresql/15/bin/pg_config
#   OUTBOX_CITUS_VENDOR  the directory holding the tarballs (default: the
#                        first of ../shared/vendor beside the repository and
#                        /work/shared/vendor that exists)
#   OUTBOX_CITUS_CACHE   default /var/cache/delivery_outbox/citus
#
# Run as root (apt-get for the build dependencies, the cache under
# /var/cache); Citus's build runs as root too.

set -euo pipefail

log() { printf 'citus: %s\n' "$*" >&2; }
die() { printf 'citus: error: %s\n' "$*" >&2; exit 1; }

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COPY=
if [ "${1:-}" = --copy ]; then
    [ $# -ge 2 ] || die "usage: $0 --copy DIR [PG_CONFIG]"
    COPY=$2
    shift 2
fi
PG_CONFIG=${1:-${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}}
[ -x "$PG_CONFIG" ] || die "PG_CONFIG=$PG_CONFIG is not an executable pg_config"
CACHE_TOP=${OUTBOX_CITUS_CACHE:-/var/cache/delivery_outbox/citus}

if [ -n "${OUTBOX_CITUS_VENDOR:-}" ]; then
    VENDOR=$OUTBOX_CITUS_VENDOR
else
    VENDOR=
    for d in "$TOP/../shared/vendor" /work/shared/vendor; do
        if [ -d "$d" ]; then VENDOR=$(cd "$d" && pwd); break; fi
    done
fi

version=$("$PG_CONFIG" --version)           # "PostgreSQL 15.20 (Debian ...)"
num=$(printf '%s\n' "$version" | sed -E 's/^PostgreSQL ([0-9]+)(\.([0-9]+))?.*/\1 \3/')
major=${num% *}
case $major in
    15) candidates=(citus-13.2.2.tar.gz) ;;
    16|17) candidates=(citus-14.0.1.tar.gz citus-13.2.2.tar.gz) ;;
    18) candidates=(citus-14.0.1.tar.gz) ;;
    *) log "no Citus release here supports $version"; exit 2 ;;
esac
tarball=
for c in "${candidates[@]}"; do
    if [ -n "$VENDOR" ] && [ -f "$VENDOR/$c" ]; then tarball=$VENDOR/$c; break; fi
done
if [ -z "$tarball" ]; then
    log "no Citus source for PostgreSQL $major (${candidates[*]} not found in ${VENDOR:-../shared/vendor}): not built"
    exit 2
fi
name=$(basename "$tarball" .tar.gz)         # citus-13.2.2

# The patch only where it is needed: 13.2.2 against a server whose headers
# already declare have_createdb_privilege (15.18 and later minors).  A
# 15.17 or older server needs Citus's own definition, and 14.x does not
# support 15 at all.
incdir=$("$PG_CONFIG" --includedir-server)
patchfile=
if [ "$name" = citus-13.2.2 ] && [ "$major" = 15 ] &&
    grep -qs 'have_createdb_privilege' "$incdir/commands/dbcommands.h"; then
    patchfile=$VENDOR/citus-13.2.2-pg15.18.patch
    [ -f "$patchfile" ] ||
        die "$version declares have_createdb_privilege; Citus 13.2.2 needs $patchfile to build, and it is missing"
fi

key=$( { sha256sum "$tarball" | cut -d' ' -f1
         [ -z "$patchfile" ] || sha256sum "$patchfile" | cut -d' ' -f1
         printf '%s\n' "$version" "$("$PG_CONFIG" --pkglibdir)" "$("$PG_CONFIG" --sharedir)" "$incdir"
       } | sha256sum | cut -c1-16)
CACHE=$CACHE_TOP/$major/$name-$key

# install_into PG_CONFIG: copy the cached files into that installation
install_into()
{
    local pc=$1 libdir extdir
    libdir=$("$pc" --pkglibdir)
    extdir=$("$pc" --sharedir)/extension
    cp -a "$CACHE/lib/." "$libdir/"
    cp -a "$CACHE/extension/." "$extdir/"
}

# print_result: the cache directory, or with --copy the copy's pg_config
# (the copy made once, Citus installed into it)
print_result()
{
    local bindir sharedir incroot d rel pc
    if [ -z "$COPY" ]; then
        echo "$CACHE"
        return 0
    fi
    bindir=$("$PG_CONFIG" --bindir)
    sharedir=$("$PG_CONFIG" --sharedir)
    incroot=$("$PG_CONFIG" --includedir)
    pc=$COPY$bindir/pg_config
    if [ ! -f "$COPY/.complete" ]; then
        log "copying the installation of $PG_CONFIG under $COPY"
        rm -rf "$COPY"
        mkdir -p "$COPY"
        # bindir's parent holds bin/ and lib/ (Debian: /usr/lib/postgresql/N;
        # a plain prefix: the prefix, which holds share/ and include/ too);
        # PostgreSQL finds its share and lib directories relative to its
        # binaries, so the copy uses its own
        for d in "$(dirname "$bindir")" "$sharedir" "$incroot"; do
            case $d in "$(dirname "$bindir")"/*) continue ;; esac
            [ -d "$COPY$d" ] && continue
            mkdir -p "$COPY$(dirname "$d")"
            cp -a "$d" "$COPY$d"
        done
        rel=$("$pc" --pkglibdir)
        case $rel in "$COPY"/*) ;; *) die "the copy's pg_config does not point into $COPY ($rel): not relocatable" ;; esac
        touch "$COPY/.complete"
    fi
    install_into "$pc"
    chmod -R a+rwX "$COPY"
    echo "$pc"
}

if [ -f "$CACHE/.complete" ]; then
    log "cached: $name for $version in $CACHE"
    print_result
    exit 0
fi

mkdir -p "$CACHE_TOP"
exec 9>"$CACHE_TOP/lock"
flock 9
if [ -f "$CACHE/.complete" ]; then
    log "cached (built meanwhile): $CACHE"
    print_result
    exit 0
fi

# What Citus's configure asks for: lz4 and zstd (columnar compression),
# krb5 (its libpq connection code includes gssapi).  Not libcurl: configure
# --without-libcurl, so that a test cluster never tries to send Citus's
# anonymous statistics anywhere.
need=()
for p in build-essential liblz4-dev libzstd-dev libkrb5-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
        need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2; then
        apt-get update -qq >&2 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2 ||
            die "apt-get install ${need[*]} failed"
    fi
fi

work=$CACHE.build
rm -rf "$work" "$CACHE" "$CACHE.new"
mkdir -p "$work/stage"
log "building $name for $version${patchfile:+ (with $(basename "$patchfile"))} in $work"
tar -C "$work" -xzf "$tarball"
src=$work/$name
[ -d "$src" ] || die "$tarball did not unpack into $name/"
if [ -n "$patchfile" ]; then
    (cd "$src" && patch -p1 --forward <"$patchfile" >&2) ||
        die "$(basename "$patchfile") does not apply to $name"
fi
start=$(date +%s)
(cd "$src" && ./configure PG_CONFIG="$PG_CONFIG" --without-libcurl \
    >"$work/configure.log" 2>&1) ||
    { tail -n 30 "$work/configure.log" >&2; die "configure failed (log: $work/configure.log)"; }
(cd "$src" && nice -n 19 make -j2 -s >"$work/make.log" 2>&1) ||
    { tail -n 40 "$work/make.log" >&2; die "make failed (log: $work/make.log)"; }
(cd "$src" && make -s install DESTDIR="$work/stage" >>"$work/make.log" 2>&1) ||
    { tail -n 20 "$work/make.log" >&2; die "make install failed (log: $work/make.log)"; }

# from the staging tree: the server's libraries (with their bitcode, when
# the server was built with LLVM) and the extension's files; not the headers
mkdir -p "$CACHE.new/lib" "$CACHE.new/extension"
stage_lib=$work/stage$("$PG_CONFIG" --pkglibdir)
stage_ext=$work/stage$("$PG_CONFIG" --sharedir)/extension
[ -f "$stage_lib/citus.so" ] || die "make install left no citus.so in $stage_lib"
cp -a "$stage_lib/." "$CACHE.new/lib/"
cp -a "$stage_ext/." "$CACHE.new/extension/"
printf '%s\n' "$name" "$version" "${patchfile:+patched with $(basename "$patchfile")}" \
    >"$CACHE.new/BUILD-INFO"
chmod -R a+rX "$CACHE.new"
mv "$CACHE.new" "$CACHE"
touch "$CACHE/.complete"
rm -rf "$work"
log "built $name in $(( $(date +%s) - start )) s into $CACHE"
print_result
