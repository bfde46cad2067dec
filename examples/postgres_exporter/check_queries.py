#!/usr/bin/python3
"""examples/postgres_exporter/check_queries.py -- run queries.yaml for real.

Used by examples/test_examples.sh: runs every query of a postgres_exporter
query file (connection from the PG* environment, e.g. as a monitoring role)
and checks that it returns exactly the columns its "metrics" declare, that
metric columns are numbers, and, with --expect KEY=VALUE (KEY is
<section>_<column>; VALUE a number, or >=number), the values of the first
row.  Prints one line per metric; exits 1 on any mismatch.
"""

import argparse
import sys

import psycopg
import yaml


def main():
    p = argparse.ArgumentParser()
    p.add_argument("queries")
    p.add_argument("--expect", action="append", default=[])
    args = p.parse_args()
    with open(args.queries, encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    expect = dict(e.split("=", 1) for e in args.expect)
    errors = []
    seen = set()
    with psycopg.connect("", autocommit=True) as conn:
        for section, body in spec.items():
            declared = [next(iter(m)) for m in body["metrics"]]
            usage = {next(iter(m)): next(iter(m.values()))["usage"]
                     for m in body["metrics"]}
            try:
                cur = conn.execute(body["query"])
            except psycopg.Error as e:
                errors.append(f"{section}: {e}".strip())
                continue
            columns = [d.name for d in cur.description]
            rows = cur.fetchall()
            if columns != declared:
                errors.append(f"{section}: columns {columns}, metrics declare {declared}")
                continue
            print(f"{section}: {len(rows)} row(s)")
            for r, row in enumerate(rows):
                for col, val in zip(columns, row):
                    key = f"{section}_{col}"
                    if usage[col] != "LABEL":
                        try:
                            float(val)
                        except (TypeError, ValueError):
                            errors.append(f"{key}: {val!r} is not a number")
                    print(f"  {key} = {val}")
                    if r == 0 and key in expect:
                        seen.add(key)
                        want = expect[key]
                        ok = (float(val) >= float(want[2:])
                              if want.startswith(">=") else str(val) == want
                              or (usage[col] != "LABEL"
                                  and float(val) == float(want)))
                        if not ok:
                            errors.append(f"{key} = {val}, expected {want}")
    for key in set(expect) - seen:
        errors.append(f"{key}: no such metric in the first row")
    for e in errors:
        print(f"ERROR: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
