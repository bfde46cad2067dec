#!/usr/bin/python3
"""examples/postgres_exporter/check_queries.py -- run queries.yaml for real.

Used by examples/test_examples.sh: runs every query of a postgres_exporter
query file (connection from the PG* environment, e.g. as a monitoring role)
and checks that it returns exactly the columns its "metrics" declare, that
metric columns are numbers, and, with --expect KEY=VALUE (KEY is
<section>_<column>; VALUE a number, or >=number), the values of the first
row, or with KEY{label=value}=VALUE those of the row whose LABEL column
has that value (e.g. delivery_outbox_dead_letters{outbox=delivery_outbox}=1).
Prints one line per metric; exits 1 on any mismatch.
"""

import argparse
import sys

import psycopg
import yaml


def show(k):
    """An --expect key as it was written."""
    return k[0] if k[1] is None else f"{k[0]}{{{k[1]}}}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("queries")
    p.add_argument("--expect", action="append", default=[])
    args = p.parse_args()
    with open(args.queries, encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    expect = {}
    for e in args.expect:
        # KEY=VALUE or KEY{label=value}=VALUE
        key, sep, rest = e.partition("{")
        if sep:
            selector, _, want = rest.partition("}=")
            expect[(key, selector)] = want
        else:
            key, _, want = e.partition("=")
            expect[(key, None)] = want
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
                labels = [f"{col}={val}" for col, val in zip(columns, row)
                          if usage[col] == "LABEL"]
                for col, val in zip(columns, row):
                    key = f"{section}_{col}"
                    if usage[col] != "LABEL":
                        try:
                            float(val)
                        except (TypeError, ValueError):
                            errors.append(f"{key}: {val!r} is not a number")
                    print(f"  {key}{{{','.join(labels)}}} = {val}")
                    wanted = [k for k in [(key, None)] if r == 0] + \
                        [(key, lab) for lab in labels]
                    for k in wanted:
                        if k not in expect:
                            continue
                        seen.add(k)
                        want = expect[k]
                        try:
                            ok = (float(val) >= float(want[2:])
                                  if want.startswith(">=") else str(val) == want
                                  or (usage[col] != "LABEL"
                                      and float(val) == float(want)))
                        except (TypeError, ValueError):
                            ok = False
                        if not ok:
                            errors.append(f"{show(k)} = {val}, expected {want}")
    for k in set(expect) - seen:
        errors.append(f"{show(k)}: no such metric"
                      + (" in the first row" if k[1] is None else ""))
    for e in errors:
        print(f"ERROR: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
