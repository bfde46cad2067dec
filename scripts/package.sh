#!/usr/bin/env bash
#
# scripts/package.sh -- release tarball, PGXN metadata, Debian package
#
# Usage:
#   scripts/package.sh [--worktree | REF]   build and test (default REF: HEAD)
#   scripts/package.sh --sync-version       copy the control file's version
#                                           into META.json and debian/changelog
#
# The version lives in delivery_outbox.control (default_version) and nowhere
# else by hand: META.json states it as semver (1.0 -> 1.0.0) and
# debian/changelog as the upstream part of the package version (1.0-1);
# --sync-version rewrites both from the control file.
#
# Build and test, each step one TAP line ("ok N - ..."), then "N passed,
# N failed" (exit status 1 if a step failed):
#   1. the source: `git archive` of REF (--worktree: the working tree's
#      tracked files as they are, uncommitted changes included; outside a
#      git checkout: a copy of the tree);
#   2. versions: control default_version = META.json version and provides
#      version = debian/changelog upstream version;
#   3. META.json: valid JSON with PGXN's required keys, provided files exist;
#   4. the release tarball dist/delivery_outbox-<version>.tar.gz (prefix
#      delivery_outbox-<version>/) holds the control file, the SQL scripts,
#      the C sources, META.json and the Makefile;
#   5. build dependencies (dpkg-dev, debhelper, postgresql-server-dev-all,
#      postgresql-common) installed with apt-get if missing;
#   6. `dpkg-buildpackage -us -uc -b` in the unpacked tarball (pg_buildext,
#      debian/pgversions) -> dist/postgresql-15-delivery-outbox_<v>-<r>_<arch>.deb;
#   7. the .deb holds the library and every extension file, and depends on
#      postgresql-15;
#   8. `dpkg --dry-run -i`: installable here (dependencies satisfied);
#   9. on a clean PostgreSQL: a copy of this machine's PostgreSQL 15
#      installation with every delivery_outbox file removed, the .deb
#      unpacked over it with `dpkg -x`, a throwaway cluster from that copy
#      (unprivileged user, unix socket in a temporary directory):
#      CREATE EXTENSION delivery_outbox at the control file's version, a
#      enqueue/claim/ack round trip, and the library loaded from the package.
#
# Nothing outside dist/ and a temporary directory is changed: the package is
# never installed into the system (dpkg -x, not dpkg -i), so a `make install`
# build in /usr/lib/postgresql stays as it is.  Root (or sudo) is needed only
# for apt-get when build dependencies are missing and for dpkg --dry-run.
#
# Knobs: PG_CONFIG (default /usr/lib/postgresql/15/bin/pg_config),
# KEEP_TMP=1 (keep the temporary directory), OUTBOX_USER (see common.sh).

set -uo pipefail

# shellcheck source=scripts/common.sh
. "$(dirname "$0")/common.sh"

TOP=$OUTBOX_TOP
DIST=$TOP/dist
EXT=delivery_outbox
PKG_WORK=
CLUSTER_DATA=
CLUSTER_BIN=
T=0
FAILED=0

ok()   { T=$((T + 1)); echo "ok $T - $*"; }
nok()  { T=$((T + 1)); FAILED=$((FAILED + 1)); echo "not ok $T - $*"; }
diag() { printf '# %s\n' "$@"; }
# showlog FILE [N]: the last N lines of FILE as diagnostics
showlog() { [ -s "$1" ] && tail -n "${2:-40}" "$1" | sed 's/^/#   /'; }

# shellcheck disable=SC2317  # the EXIT trap
finish()
{
    local rc=$?
    trap - EXIT INT TERM HUP
    if [ -n "$CLUSTER_DATA" ]; then
        as_user "$CLUSTER_BIN/pg_ctl" -D "$CLUSTER_DATA" -m immediate -w stop >/dev/null 2>&1
    fi
    if [ -n "$PKG_WORK" ] && [ -d "$PKG_WORK" ]; then
        if [ "${KEEP_TMP:-0}" = 1 ] || [ "$FAILED" -gt 0 ]; then
            diag "kept $PKG_WORK"
        else
            rm -rf "$PKG_WORK"
        fi
    fi
    if [ "$T" -gt 0 ]; then
        echo "1..$T"
        echo "$((T - FAILED)) passed, $FAILED failed"
        [ "$FAILED" -eq 0 ] && [ "$rc" -eq 0 ] && exit 0
        exit 1
    fi
    exit "$rc"
}

# control_version DIR: default_version from DIR's control file
control_version()
{
    sed -n "s/^[[:space:]]*default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" \
        "$1/$EXT.control"
}

# semver 1.0 -> 1.0.0 (PGXN wants semantic versions)
semver()
{
    case $1 in
    *.*.*) echo "$1" ;;
    *.*)   echo "$1.0" ;;
    *)     echo "$1.0.0" ;;
    esac
}

# changelog_upstream DIR: "1.0" from "delivery-outbox (1.0-1) ..."
changelog_upstream()
{
    sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' "$1/debian/changelog" | sed 's/-[^-]*$//; s/^[0-9]*://'
}

# --- --sync-version --------------------------------------------------------
sync_version()
{
    local v sv up maint
    v=$(control_version "$TOP")
    [ -n "$v" ] || die "no default_version in $TOP/$EXT.control"
    sv=$(semver "$v")
    /usr/bin/python3 - "$TOP/META.json" "$sv" <<'PY' || die "updating META.json failed"
import json, sys
path, version = sys.argv[1], sys.argv[2]
with open(path, encoding="utf-8") as f:
    meta = json.load(f)
meta["version"] = version
for ext in meta.get("provides", {}).values():
    ext["version"] = version
with open(path, "w", encoding="utf-8") as f:
    json.dump(meta, f, indent=3, ensure_ascii=False)
    f.write("\n")
PY
    log "META.json: version $sv"
    up=$(changelog_upstream "$TOP")
    if [ "$up" != "$v" ]; then
        maint=$(sed -n 's/^ -- \(.*>\)  .*/\1/p' "$TOP/debian/changelog" | head -n 1)
        {
            printf '%s (%s-1) unstable; urgency=medium\n\n' \
                "$(sed -n '1s/ .*//p' "$TOP/debian/changelog")" "$v"
            printf '  * New upstream version %s.\n\n' "$v"
            printf ' -- %s  %s\n\n' "$maint" "$(date -R)"
            cat "$TOP/debian/changelog"
        } >"$TOP/debian/changelog.new" && mv "$TOP/debian/changelog.new" "$TOP/debian/changelog"
        log "debian/changelog: new entry $v-1 (edit its text before a release)"
    else
        log "debian/changelog: already at $v"
    fi
}

if [ "${1:-}" = --sync-version ]; then
    sync_version
    exit 0
fi

# --- build and test ----------------------------------------------------------
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

MODE=ref
REF=HEAD
case "${1:-}" in
--worktree) MODE=worktree ;;
-*) die "usage: $0 [--worktree | REF | --sync-version]" ;;
'') ;;
*) REF=$1 ;;
esac

PKG_WORK=$(mktemp -d /tmp/delivery_outbox-pkg.XXXXXX) || die "mktemp failed"
chmod 755 "$PKG_WORK"
mkdir -p "$DIST"

# 1. the source tree, exactly as it will be released
SRC=$PKG_WORK/source
mkdir -p "$SRC"
if git -C "$TOP" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    if [ "$MODE" = worktree ]; then
        # The tracked files as they are now.  Read-only for git (no stash,
        # no index lock), so it can run while someone commits.
        if (cd "$TOP" && git ls-files -z | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) |
                tar -C "$SRC" -xf -; then
            ok "source: the working tree's tracked files (HEAD $(git -C "$TOP" rev-parse --short HEAD) plus uncommitted changes)"
        else
            nok "source: the working tree's tracked files"
            exit 1
        fi
    else
        if [ -n "$(git -C "$TOP" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
            diag "uncommitted changes are not packaged (use --worktree to include them)"
        fi
        if git -C "$TOP" archive --format=tar "$REF" | tar -C "$SRC" -xf -; then
            ok "source: git archive of $REF ($(git -C "$TOP" rev-parse --short "$REF"))"
        else
            nok "source: git archive of $REF"
            exit 1
        fi
    fi
else
    if tar -C "$TOP" -cf - --exclude=./dist --exclude='*.o' --exclude='*.so' \
            --exclude='*.bc' --exclude=./results --exclude=./output_iso \
            --exclude=./tmp_check --exclude=./tmp_check_iso --exclude=./log \
            --exclude=./examples/node/node_modules . | tar -C "$SRC" -xf -; then
        ok "source: a copy of $TOP (not a git checkout)"
    else
        nok "source: a copy of $TOP"
        exit 1
    fi
fi

# 2. one version everywhere
VERSION=$(control_version "$SRC")
if [ -z "$VERSION" ]; then
    nok "versions: no default_version in $EXT.control"
    exit 1
fi
# META.json's version and every provides version: one word when they agree
META_V=$(/usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
print(*sorted({str(m.get("version"))} | {str(e.get("version")) for e in m.get("provides", {}).values()}))
' "$SRC/META.json" 2>&1)
DEB_UP=$(changelog_upstream "$SRC")
if [ "$META_V" = "$(semver "$VERSION")" ] && [ "$DEB_UP" = "$VERSION" ]; then
    ok "versions: $EXT.control default_version $VERSION = META.json $META_V = debian/changelog $DEB_UP"
else
    nok "versions: $EXT.control default_version $VERSION, META.json $META_V, debian/changelog $DEB_UP (run scripts/package.sh --sync-version)"
fi

# 3. META.json as PGXN reads it
if out=$(/usr/bin/python3 - "$SRC" <<'PY' 2>&1
import json, os, sys
src = sys.argv[1]
meta = json.load(open(os.path.join(src, "META.json"), encoding="utf-8"))
missing = [k for k in ("name", "abstract", "version", "maintainer", "license",
                       "provides", "meta-spec") if k not in meta]
if missing:
    sys.exit(f"missing keys: {missing}")
for name, ext in meta["provides"].items():
    for k in ("file", "version"):
        if k not in ext:
            sys.exit(f"provides.{name} has no {k}")
    for k in ("file", "docfile"):
        if k in ext and not os.path.exists(os.path.join(src, ext[k])):
            sys.exit(f"provides.{name}.{k} {ext[k]} does not exist")
print(f"{meta['name']} {meta['version']}, license {meta['license']}")
PY
); then
    ok "META.json: PGXN keys present, provided files exist ($out)"
else
    nok "META.json: $out"
fi

# 4. the release tarball
TARBALL=$DIST/$EXT-$VERSION.tar.gz
PREFIX=$EXT-$VERSION
rm -f "$TARBALL"
mkdir -p "$PKG_WORK/tar/$PREFIX"
(cd "$SRC" && tar -cf - .) | tar -C "$PKG_WORK/tar/$PREFIX" -xf -
if tar -C "$PKG_WORK/tar" --owner=0 --group=0 --numeric-owner --sort=name \
        -czf "$TARBALL" "$PREFIX" &&
    listing=$(tar -tzf "$TARBALL") &&
    for f in "$EXT.control" "$EXT--1.0.sql" "$EXT.c" Makefile META.json README.md \
             debian/control debian/rules; do
        grep -qx "$PREFIX/$f" <<<"$listing" || { echo "missing $f"; exit 1; }
    done; then
    ok "tarball: dist/$(basename "$TARBALL") ($(wc -l <<<"$listing") entries, $(du -h "$TARBALL" | cut -f1))"
else
    nok "tarball: dist/$(basename "$TARBALL")"
fi

# 5. build dependencies
BUILD_DEPS=(dpkg-dev debhelper postgresql-server-dev-all postgresql-common)
OUTBOX_BASE_PACKAGES=()
OUTBOX_PACKAGES="${BUILD_DEPS[*]}"
OUTBOX_COMMAND_PACKAGES=
if (outbox_install_packages) >"$PKG_WORK/apt.log" 2>&1; then
    ok "build dependencies installed: ${BUILD_DEPS[*]}"
else
    nok "build dependencies: ${BUILD_DEPS[*]}"
    showlog "$PKG_WORK/apt.log"
    exit 1
fi

# 6. dpkg-buildpackage, in the unpacked tarball
BUILD=$PKG_WORK/build
mkdir -p "$BUILD"
tar -C "$BUILD" -xzf "$TARBALL"
ln -s "$TARBALL" "$BUILD/delivery-outbox_$VERSION.orig.tar.gz"
secs=$SECONDS
DEB=
if (cd "$BUILD/$PREFIX" && dpkg-buildpackage -us -uc -b) >"$PKG_WORK/build.log" 2>&1; then
    for f in "$BUILD"/postgresql-*-delivery-outbox_*.deb; do
        [ -f "$f" ] && DEB=$f
    done
fi
if [ -n "${DEB:-}" ] && [ -f "$DEB" ]; then
    cp "$BUILD"/*.deb "$BUILD"/*.buildinfo "$BUILD"/*.changes "$DIST"/ 2>/dev/null
    ok "dpkg-buildpackage -us -uc -b: dist/$(basename "$DEB") in $((SECONDS - secs)) s"
    DEB=$DIST/$(basename "$DEB")
else
    nok "dpkg-buildpackage -us -uc -b"
    showlog "$PKG_WORK/build.log" 60
    exit 1
fi

# 7. what the package holds
PGV=$("$PG_CONFIG" --version | sed 's/^PostgreSQL \([0-9]*\).*/\1/')
contents=$(dpkg-deb -c "$DEB" | awk '{print $NF}' | sed 's|^\./|/|')
depends=$(dpkg-deb -f "$DEB" Depends)
missing=()
for f in "/usr/lib/postgresql/$PGV/lib/$EXT.so" \
         "/usr/share/postgresql/$PGV/extension/$EXT.control"; do
    grep -qx "$f" <<<"$contents" || missing+=("$f")
done
sql_scripts=("$SRC/$EXT--"*.sql)
for f in "${sql_scripts[@]}"; do
    f=/usr/share/postgresql/$PGV/extension/$(basename "$f")
    grep -qx "$f" <<<"$contents" || missing+=("$f")
done
if [ ${#missing[@]} -eq 0 ] && grep -q "postgresql-$PGV" <<<"$depends"; then
    ok "package holds $EXT.so, the control file and ${#sql_scripts[@]} SQL scripts; Depends: $depends"
else
    nok "package contents (missing: ${missing[*]:-none}; Depends: $depends)"
    dpkg-deb -c "$DEB" | sed 's/^/#   /'
fi

# 8. installable here
if is_root || command -v sudo >/dev/null 2>&1; then
    if as_root dpkg --dry-run -i "$DEB" >"$PKG_WORK/dry-run.log" 2>&1; then
        ok "dpkg --dry-run -i: dependencies satisfied"
    else
        nok "dpkg --dry-run -i"
        showlog "$PKG_WORK/dry-run.log"
    fi
else
    ok "dpkg --dry-run -i # skip: needs root or sudo"
fi

# 9. a clean PostgreSQL installation plus the package: CREATE EXTENSION
ROOT=$PKG_WORK/root
LIBDIR=/usr/lib/postgresql/$PGV
SHAREDIR=/usr/share/postgresql/$PGV
mkdir -p "$ROOT$(dirname "$LIBDIR")" "$ROOT$(dirname "$SHAREDIR")"
if ! cp -a "$LIBDIR" "$ROOT$(dirname "$LIBDIR")/" ||
    ! cp -a "$SHAREDIR" "$ROOT$(dirname "$SHAREDIR")/"; then
    nok "copying the PostgreSQL $PGV installation"
    exit 1
fi
# Forget whatever `make install` put there: only the package may provide it.
find "$ROOT" -name "$EXT*" -prune -exec rm -rf {} +
leftover=$(find "$ROOT" -name "$EXT*" | wc -l)
dpkg-deb -x "$DEB" "$ROOT"
CLUSTER_BIN=$ROOT$LIBDIR/bin
outbox_pick_user
outbox_pick_port
SOCK=$PKG_WORK/sock
mkdir -p "$SOCK" "$PKG_WORK/data"
if is_root; then chown "$OUTBOX_RUN_USER:" "$SOCK" "$PKG_WORK/data"; fi
PG_BINDIR=$CLUSTER_BIN
OUTBOX_WORK=$PKG_WORK
PGHOST=$SOCK
PGUSER=$OUTBOX_RUN_USER
PGDATABASE=postgres
export PGHOST PGPORT PGUSER PGDATABASE
check_log=$PKG_WORK/clean-install.log
if as_user "$CLUSTER_BIN/initdb" -D "$PKG_WORK/data/pg" -A trust -E UTF8 --locale=C \
        --no-sync -U "$OUTBOX_RUN_USER" >"$check_log" 2>&1 &&
    as_user sh -c "cat >>'$PKG_WORK/data/pg/postgresql.conf'" <<EOF &&

# throwaway cluster (scripts/package.sh)
listen_addresses = ''
unix_socket_directories = '$SOCK'
port = $PGPORT
EOF
    CLUSTER_DATA=$PKG_WORK/data/pg &&
    as_user "$CLUSTER_BIN/pg_ctl" -D "$CLUSTER_DATA" -l "$PKG_WORK/data/postgres.log" \
        -w -t 60 start >>"$check_log" 2>&1; then
    result=$(as_user "$CLUSTER_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 2>>"$check_log" <<SQL
CREATE EXTENSION $EXT;
SELECT extversion FROM pg_extension WHERE extname = '$EXT';
SELECT outbox_enqueue('agent:1', 'work', '\\x01') = 1;
SELECT count(*) FROM outbox_claim(10);
SELECT outbox_ack(1);
SELECT count(*) FROM pg_catalog.regexp_split_to_table(pg_catalog.pg_read_file('/proc/self/maps'), E'\\n') l
 WHERE l LIKE '%$ROOT$LIBDIR/lib/$EXT.so';
SQL
    )
    expect=$(printf '%s\n' "$VERSION" t 1 t)
    if [ "$leftover" -eq 0 ] && [ "$(head -n 4 <<<"$result")" = "$expect" ] &&
        [ "$(sed -n 5p <<<"$result")" -gt 0 ] 2>/dev/null; then
        ok "clean PostgreSQL $PGV + dpkg -x of the package: CREATE EXTENSION $EXT (version $VERSION), enqueue/claim/ack, library loaded from the package"
    else
        nok "clean PostgreSQL $PGV + the package: CREATE EXTENSION $EXT (got: $(tr '\n' ' ' <<<"$result"); leftover files: $leftover)"
        showlog "$check_log"
        showlog "$PKG_WORK/data/postgres.log"
    fi
else
    nok "clean PostgreSQL $PGV + the package: the throwaway cluster did not start"
    showlog "$check_log"
    showlog "$PKG_WORK/data/postgres.log"
fi
exit 0
