#!/usr/bin/python3
"""scripts/demo_relay.py -- the relay of scripts/demo.sh.

A minimal delivery_outbox relay, the way a real one is built:

  1. LISTEN on the channel first, so no commit after that can be missed;
  2. drain: claim rows with outbox_claim(50) until none is pending, "push"
     each batch to its recipients (here: one printed line per batch) and
     ack the pushed ids with outbox_ack(ids bigint[]);
  3. sleep until a notification wakes it (the payload is only the row id,
     so it is a wake-up, not the data), then drain again.

It deliberately leaves --hold delivered rows unacked, as a recipient that
crashed before acking would.  Once the sweeper (outbox_reclaim) puts them
back to pending, their notification wakes the relay, which claims them
again (delivery_attempts = 2), pushes and acks them: at-least-once.

Connects with libpq's PG* environment variables.  Exits 0 once --expect
distinct rows are acked, 1 on timeout or on anything inconsistent.  Writes
KEY=VALUE lines (integers) to --summary for demo.sh.

Uses Debian's python3-psycopg (psycopg 3.1): waits for notifications with
select() on the connection's socket, which works on every psycopg 3.
"""

import argparse
import re
import select
import sys
import time

import psycopg
from psycopg import sql

TAG = "[relay]   "


def say(msg):
    print(f"{TAG} {msg}", flush=True)


def id_ranges(ids):
    """'1-50' or '3, 7-9' for a sorted list of ints, kept short."""
    parts = []
    start = prev = None
    for i in ids:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = i
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
    if len(parts) > 3:
        parts = parts[:3] + ["..."]
    return ", ".join(parts)


class Relay:
    def __init__(self, args):
        self.args = args
        self.conn = psycopg.connect("", autocommit=True)
        self.notified = []          # payloads, in arrival order
        self.claimed = {}           # id -> times claimed
        self.acked = set()
        self.held = set()           # delivered, deliberately not acked
        self.redelivered = {}       # id -> delivery_attempts on redelivery
        self.batches = 0
        self.wakeups = 0
        self.errors = []
        self.sample_shown = False

    # -- notifications ---------------------------------------------------

    def on_notify(self, channel, payload):
        if channel == self.args.channel:
            self.notified.append(payload)

    def listen(self):
        # Notifications that arrive while a query runs reach this handler.
        self.conn.add_notify_handler(
            lambda n: self.on_notify(n.channel, n.payload))
        self.conn.execute(
            sql.SQL("LISTEN {}").format(sql.Identifier(self.args.channel)))

    def wait_for_notify(self, timeout):
        """Sleep until the server sends something or timeout; True if a
        notification arrived."""
        before = len(self.notified)
        ready, _, _ = select.select([self.conn.fileno()], [], [], timeout)
        if ready:
            pgconn = self.conn.pgconn
            pgconn.consume_input()
            while True:
                n = pgconn.notifies()
                if n is None:
                    break
                self.on_notify(n.relname.decode(), n.extra.decode())
        return len(self.notified) > before

    # -- claim, push, ack ------------------------------------------------

    def push(self, rows):
        """Stand-in for sending the rows to their recipients: one line."""
        self.batches += 1
        ids = sorted(r[0] for r in rows)
        per_recipient = {}
        per_kind = {}
        for _id, recipient, kind, _attempts, _payload in rows:
            per_recipient[recipient] = per_recipient.get(recipient, 0) + 1
            per_kind[kind] = per_kind.get(kind, 0) + 1
        who = " ".join(f"{k}={v}" for k, v in sorted(per_recipient.items()))
        kinds = " ".join(f"{k}={v}" for k, v in sorted(per_kind.items()))
        say(f"batch {self.batches}: pushed {len(rows):3d} "
            f"row{'s' if len(rows) != 1 else ' '} "
            f"(ids {id_ranges(ids)}) -> {who} | {kinds}")
        if not self.sample_shown:
            self.sample_shown = True
            _id, recipient, kind, attempts, payload = rows[0]
            say(f"  e.g. id {_id} to {recipient}, kind {kind}, "
                f"attempt {attempts}, payload {bytes(payload).decode()}")

    def drain(self):
        """Claim, push and ack until nothing is pending."""
        while True:
            rows = self.conn.execute(
                "SELECT id, recipient, kind, delivery_attempts, payload"
                "  FROM outbox_claim(%s)", (self.args.batch,)).fetchall()
            if not rows:
                return
            self.push(rows)
            to_ack = []
            for _id, _recipient, _kind, attempts, _payload in rows:
                self.claimed[_id] = self.claimed.get(_id, 0) + 1
                if _id in self.acked:
                    self.errors.append(f"acked row {_id} was claimed again")
                if _id in self.held:
                    self.held.discard(_id)
                    self.redelivered[_id] = attempts
                    say(f"id {_id} is back (delivery_attempts = {attempts}): "
                        f"pushed again, now acked")
                    if attempts != 2:
                        self.errors.append(
                            f"row {_id} redelivered with delivery_attempts "
                            f"{attempts}, expected 2")
                elif (len(self.held) + len(self.redelivered) < self.args.hold
                      and attempts == 1):
                    self.held.add(_id)
                    say(f"id {_id} NOT acked: its recipient 'crashed' before "
                        f"acking; the row stays 'delivered'")
                    continue
                to_ack.append(_id)
            if to_ack:
                n = self.conn.execute(
                    "SELECT outbox_ack(%s::bigint[])", (to_ack,)).fetchone()[0]
                if n != len(to_ack):
                    self.errors.append(
                        f"outbox_ack acked {n} of {len(to_ack)} rows")
                self.acked.update(to_ack)

    # -- main loop -------------------------------------------------------

    def run(self):
        args = self.args
        self.listen()
        say(f"LISTEN {args.channel}: waiting for commits")
        if args.ready:
            with open(args.ready, "w", encoding="ascii") as f:
                f.write("ready\n")
        deadline = time.monotonic() + args.timeout
        self.drain()        # whatever was committed before we listened
        while len(self.acked) < args.expect:
            left = deadline - time.monotonic()
            if left <= 0:
                self.errors.append(
                    f"timeout: {len(self.acked)} of {args.expect} rows acked")
                break
            if self.wait_for_notify(min(left, 1.0)):
                self.wakeups += 1
                self.drain()

        # Let the last notifications arrive (they may trail the rows).
        want = len(self.claimed) + len(self.redelivered)
        until = time.monotonic() + 3.0
        while len(self.notified) < want and time.monotonic() < until:
            self.wait_for_notify(0.2)
        self.check()
        self.report()
        return 0 if not self.errors else 1

    def check(self):
        bad = [p for p in self.notified if not re.fullmatch(r"[0-9]+", p)]
        if bad:
            self.errors.append(
                f"{len(bad)} notification payloads are not a bare id, "
                f"e.g. {bad[0]!r}")
        ids = {int(p) for p in self.notified if re.fullmatch(r"[0-9]+", p)}
        unknown = ids - set(self.claimed)
        if unknown:
            self.errors.append(
                f"notifications for rows never claimed: "
                f"{id_ranges(sorted(unknown))}")
        silent = set(self.claimed) - ids
        if silent:
            self.errors.append(
                f"rows claimed without a notification: "
                f"{id_ranges(sorted(silent))}")
        if self.held:
            self.errors.append(
                f"held rows never came back: {id_ranges(sorted(self.held))}")

    def report(self):
        deliveries = sum(self.claimed.values())
        values = {
            "NOTIFICATIONS": len(self.notified),
            "WAKEUPS": self.wakeups,
            "BATCHES": self.batches,
            "DELIVERIES": deliveries,
            "ROWS": len(self.claimed),
            "ACKED": len(self.acked),
            "REDELIVERED": len(self.redelivered),
            "REDELIVERED_ID": min(self.redelivered, default=0),
            "ERRORS": len(self.errors),
        }
        if self.args.summary:
            with open(self.args.summary, "w", encoding="ascii") as f:
                for k, v in values.items():
                    f.write(f"{k}={v}\n")
        for e in self.errors:
            print(f"{TAG} ERROR: {e}", file=sys.stderr, flush=True)
        say(f"done: {len(self.acked)} rows acked, {deliveries} pushes, "
            f"{len(self.notified)} notifications")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--expect", type=int, required=True,
                   help="stop once this many distinct rows are acked")
    p.add_argument("--hold", type=int, default=1,
                   help="rows to leave delivered but unacked")
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--channel", default="delivery_outbox")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--ready", help="file to create once LISTEN is done")
    p.add_argument("--summary", help="file for KEY=VALUE results")
    args = p.parse_args()
    try:
        return Relay(args).run()
    except psycopg.Error as e:
        print(f"{TAG} ERROR: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
