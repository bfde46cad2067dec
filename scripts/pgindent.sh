#!/usr/bin/env bash
#
# scripts/pgindent.sh -- indent the C sources as PostgreSQL's own are
#
# Runs PostgreSQL's src/tools/pgindent, with the pg_bsd_indent it ships,
# over every .c and .h file of the repository, with PostgreSQL's typedefs
# and ours (typedefs.list).  Both come from Debian's source package
# postgresql-18 (the first major whose tree carries pg_bsd_indent),
# fetched through a private apt configuration holding one deb-src line and
# kept, with the built pg_bsd_indent, under a cache directory; a second run
# fetches and builds nothing.
#
# Usage: scripts/pgindent.sh [--check]
#   --check  change nothing; print the diff and exit 1 when a file is not
#            indented as pgindent would indent it
#
# Knobs (environment):
#   OUTBOX_PGINDENT_CACHE  default /var/cache/delivery_outbox/pgindent
#   OUTBOX_PG18_SUITE      the Debian suite holding postgresql-18 (unstable)
#   OUTBOX_PG18_MIRROR     default http://deb.debian.org/debian
# Needs a C compiler and a PostgreSQL server's headers (pg_config on PATH,
# or PG_CONFIG), perl; root (or sudo) only for the first fetch into
# /var/cache.

set -euo pipefail

TOP=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OUTBOX_PGINDENT_CACHE:-/var/cache/delivery_outbox/pgindent}
SUITE=${OUTBOX_PG18_SUITE:-unstable}
MIRROR=${OUTBOX_PG18_MIRROR:-http://deb.debian.org/debian}
PG_CONFIG=${PG_CONFIG:-pg_config}
CHECK=0
[ "${1:-}" = --check ] && CHECK=1

log() { printf 'pgindent: %s\n' "$*" >&2; }

tools=$CACHE/tools
if [ ! -x "$tools/pg_bsd_indent/pg_bsd_indent" ]; then
    apt=$CACHE/apt
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$CACHE/src"
    echo "deb-src $MIRROR $SUITE main" >"$apt/sources.list"
    opts=(-o "Dir::Etc::SourceList=$apt/sources.list"
          -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$apt/lists"
          -o "Dir::Cache=$apt/cache")
    log "fetching postgresql-18's source ($MIRROR $SUITE)"
    apt-get "${opts[@]}" update >&2
    (cd "$CACHE/src" && apt-get "${opts[@]}" source --download-only postgresql-18 >&2)
    orig=$(find "$CACHE/src" -maxdepth 1 -name 'postgresql-18_*.orig.tar.*' | head -n 1)
    [ -n "$orig" ] || { log "no postgresql-18 source fetched"; exit 2; }
    ver=${orig##*/postgresql-18_}
    top=postgresql-${ver%.orig.tar.*}
    rm -rf "$tools" "$CACHE/src/$top"
    tar -C "$CACHE/src" -xf "$orig" "$top/src/tools/pgindent" "$top/src/tools/pg_bsd_indent"
    mkdir -p "$tools"
    mv "$CACHE/src/$top/src/tools/pgindent" "$CACHE/src/$top/src/tools/pg_bsd_indent" "$tools/"
    rm -rf "$CACHE/src"
    # (18's source against the headers of any major from 15: pg_noreturn,
    # new in 18, given to older ones)
    log "building pg_bsd_indent against $("$PG_CONFIG" --version)"
    (cd "$tools/pg_bsd_indent" &&
     cc -O2 -I. -I"$("$PG_CONFIG" --includedir-server)" \
        -D'pg_noreturn=__attribute__((noreturn))' -o pg_bsd_indent \
        args.c err.c indent.c io.c lexi.c parse.c pr_comment.c \
        -L"$("$PG_CONFIG" --pkglibdir)" -L"$("$PG_CONFIG" --libdir)" \
        -lpgcommon -lpgport)
fi

typedefs=$(mktemp)
trap 'rm -f "$typedefs"' EXIT
cat "$tools/pgindent/typedefs.list" "$TOP/typedefs.list" | sort -u >"$typedefs"

cd "$TOP"
args=(--indent="$tools/pg_bsd_indent/pg_bsd_indent" --typedefs="$typedefs")
files=(*.c *.h)
if [ "$CHECK" = 1 ]; then
    if out=$(perl "$tools/pgindent/pgindent" "${args[@]}" --diff "${files[@]}") &&
       [ -z "$out" ]; then
        log "every file is indented"
        exit 0
    fi
    printf '%s\n' "$out"
    exit 1
fi
perl "$tools/pgindent/pgindent" "${args[@]}" "${files[@]}"
log "indented ${#files[@]} files"
