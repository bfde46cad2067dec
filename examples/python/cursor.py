#!/usr/bin/python3
"""examples/python/cursor.py -- read a recipient's rows with a gap-safe cursor
(psycopg 3).

A reader that follows one recipient's rows in id order, by a cursor
(after_id) instead of by claims: a recipient that pulls its own rows, a
stream a client resumes from the last id it saw, a mirror.  Copy it and
replace process() with what you do with a row.  The loop is the one of
docs/ordered-delivery.md, "Gap-safe cursors":

  connect -> LISTEN -> loop:
      H    := SELECT outbox_horizon(outbox)               -- one statement
      rows := SELECT ... FROM outbox_replay(recipient, after_id, BATCH, ...)
              WHERE id <= H                               -- the next one
      process(rows); ACK=1: outbox_ack(their ids, recipient)
      after_id := the last id processed (saved to CURSOR_FILE, if set)
      none left: wait for a notification (or a timeout), then again

- Why the horizon: ids are taken at insert, not at commit, so a row with a
  lower id can commit after one with a higher id.  A cursor that moved past
  id 11 never reads an id 10 committing later.  outbox_horizon() is the
  highest id H below which no row can still appear; rows up to H are final,
  rows above it wait until H passes them.  So every row is read, in id
  order, once.
- The horizon and the rows are read in two statements, in autocommit
  (READ COMMITTED): the rows' snapshot is then taken after the horizon was
  read, which is what makes it right without the library preloaded too.
- While rows wait above the horizon (an insert into the outbox is still
  running, of any recipient), the reader looks again every HELD_MS: the
  insert that holds it wakes it with its row's NOTIFY when it commits, but
  nothing wakes it when that insert rolls back.
- outbox_replay reads open (pending or delivered) rows: a row acked by
  someone else before the reader got to it is not read.  With ACK=1 the
  reader is the recipient: it acks what it processed (a late ack of a
  pending row counts), so the rows leave the outbox; run no relay for that
  recipient then.  With ACK=0 it only reads.
- Not covered by the horizon: a row that comes back with its old id
  (outbox_redrive of a dead letter) or that is re-addressed to this
  recipient (outbox_reassign, an UPDATE of recipient) after the cursor
  passed its id.  After such an operation, restart the reader with AFTER_ID
  below the lowest id concerned (and dedupe by id).
- Connection loss: reconnect with exponential backoff and jitter, LISTEN,
  and go on from the cursor.  SIGTERM/SIGINT: finish the batch, save the
  cursor, exit 0.

Connection: the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER ...).
Settings (environment):

  RECIPIENT        the recipient to follow      default service:billing
  TENANT           only this tenant's rows      default any
  OUTBOX           the outbox table (regclass text)  default the extension's
  OUTBOX_CHANNEL   channel to LISTEN on         default delivery_outbox
  AFTER_ID         where the cursor starts      default 0 (or CURSOR_FILE's)
  CURSOR_FILE      file the cursor is kept in between runs  default none
  ACK              1: ack the rows processed    default 0
  BATCH            rows per read                default 100
  WAIT_MS          longest wait without a notification     default 5000
  HELD_MS          wait while rows are held above the horizon  default 200
  BACKOFF_MIN_MS / BACKOFF_MAX_MS               default 100 / 30000
  NAIVE            test hook: 1 reads by after_id alone, without the
                   horizon (it can skip rows: the bug this file avoids)
  STOP_AFTER       test hook: exit 0 after this many rows  default 0 (never)

Each row processed prints "recipient id" on stdout; the log goes to stderr.
Needs EXECUTE on outbox_horizon, outbox_replay (and outbox_ack with ACK=1)
and, on an outbox other than the extension's own, SELECT (and UPDATE) on it.

Run:  PGDATABASE=shop RECIPIENT=service:billing /usr/bin/python3 examples/python/cursor.py
Needs Debian's python3-psycopg (psycopg 3.1 or later).
"""

import os
import random
import select
import signal
import sys
import time

import psycopg
from psycopg import sql
from psycopg.rows import namedtuple_row


def env_int(name, default):
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


RECIPIENT = os.environ.get("RECIPIENT") or "service:billing"
TENANT = os.environ.get("TENANT") or None
OUTBOX = os.environ.get("OUTBOX") or None
CHANNEL = os.environ.get("OUTBOX_CHANNEL") or "delivery_outbox"
CURSOR_FILE = os.environ.get("CURSOR_FILE") or None
ACK = env_int("ACK", 0) != 0
BATCH = env_int("BATCH", 100)
WAIT_MS = env_int("WAIT_MS", 5000)
HELD_MS = env_int("HELD_MS", 200)
BACKOFF_MIN_MS = env_int("BACKOFF_MIN_MS", 100)
BACKOFF_MAX_MS = env_int("BACKOFF_MAX_MS", 30000)
NAIVE = env_int("NAIVE", 0) != 0
STOP_AFTER = env_int("STOP_AFTER", 0)


def log(msg):
    print(f"cursor: {msg}", file=sys.stderr, flush=True)


# --- what to do with a row: replace this -----------------------------------

def process(row):
    """Handle one row of the recipient, in id order.  row has id, recipient,
    kind, tenant_id, payload (bytes) and delivery_state.  An exception stops
    the batch there: the cursor stays before this row, which is read again
    after WAIT_MS.  A row may be processed again after a crash (the cursor
    is saved after each batch): dedupe by id.
    """
    print(f"{row.recipient} {row.id}", flush=True)


# --- the cursor -------------------------------------------------------------

def load_cursor():
    if CURSOR_FILE and os.path.exists(CURSOR_FILE):
        with open(CURSOR_FILE) as f:
            return int(f.read().strip() or 0)
    return env_int("AFTER_ID", 0)


def save_cursor(after_id):
    if CURSOR_FILE:
        tmp = CURSOR_FILE + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{after_id}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, CURSOR_FILE)


class Reader:
    def __init__(self, handle):
        self.handle = handle
        self.after_id = load_cursor()
        self.stopping = False
        self.woken = False
        self.processed = 0
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)

    def on_signal(self, signum, _frame):
        if not self.stopping:
            log(f"{signal.Signals(signum).name}: stopping after this batch")
        self.stopping = True

    def on_notify(self, _notify):
        self.woken = True

    def connect(self):
        conn = psycopg.connect(
            "fallback_application_name=delivery_outbox-cursor-python",
            autocommit=True, row_factory=namedtuple_row)
        conn.add_notify_handler(self.on_notify)
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        return conn

    def read(self, conn):
        """One round: the rows after the cursor that are final.  Returns
        (rows, held, full): held is true when rows wait above the horizon,
        full when the read came back with BATCH rows (there may be more)."""
        if NAIVE:
            horizon = None
        else:
            # First statement: the horizon.  Then, in the next statement
            # (a snapshot taken after it), the rows.
            horizon = conn.execute(
                "SELECT outbox_horizon(outbox => %s::regclass) AS h",
                (OUTBOX,)).fetchone().h
        rows = conn.execute(
            "SELECT id, recipient, kind, tenant_id, payload, delivery_state,"
            "       %s::bigint IS NULL OR id <= %s::bigint AS final"
            "  FROM outbox_replay(%s, %s, %s, %s, outbox => %s::regclass)"
            " ORDER BY id",
            (horizon, horizon, RECIPIENT, self.after_id, BATCH, TENANT,
             OUTBOX)).fetchall()
        final = []
        for row in rows:
            if not row.final:
                break          # ids are ordered: the rest wait too
            final.append(row)
        return final, len(final) < len(rows), len(rows) == BATCH

    def drain(self, conn):
        """Read and process until nothing final is left.  Returns how long
        to wait at most: HELD_MS while rows are held above the horizon,
        WAIT_MS otherwise (and after a failed process())."""
        while not self.stopping:
            self.woken = False
            rows, held, full = self.read(conn)
            done = []
            failed = False
            for row in rows:
                try:
                    self.handle(row)
                except Exception as e:     # noqa: BLE001 -- any error
                    log(f"process failed at id {row.id}: {e}; read again later")
                    failed = True
                    break
                done.append(row.id)
                if STOP_AFTER and self.processed + len(done) >= STOP_AFTER:
                    self.stopping = True
                    break
            if done:
                if ACK:
                    conn.execute("SELECT outbox_ack(%s::bigint[], %s,"
                                 " outbox => %s::regclass)",
                                 (done, RECIPIENT, OUTBOX))
                # the cursor moves only past what was processed (and acked)
                self.after_id = done[-1]
                self.processed += len(done)
                save_cursor(self.after_id)
            if failed:
                return WAIT_MS
            if held:
                return HELD_MS
            if not full:
                return WAIT_MS
        return 0

    def sleep(self, seconds, conn=None):
        fds = [self.wake_r] + ([conn.fileno()] if conn is not None else [])
        ready, _, _ = select.select(fds, [], [], max(seconds, 0))
        if self.wake_r in ready:
            try:
                os.read(self.wake_r, 512)
            except BlockingIOError:
                pass
        return conn is not None and conn.fileno() in ready

    def wait(self, conn, ms):
        if self.woken:
            return
        if self.sleep(ms / 1000.0, conn):
            conn.pgconn.consume_input()
            while conn.pgconn.notifies() is not None:
                pass
            if conn.broken or conn.pgconn.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("connection lost")

    def run(self):
        backoff = BACKOFF_MIN_MS
        while not self.stopping:
            conn = None
            try:
                conn = self.connect()
                log(f"connected (backend pid {conn.info.backend_pid}), "
                    f"{RECIPIENT} after id {self.after_id}"
                    + (" (NAIVE: without the horizon)" if NAIVE else ""))
                backoff = BACKOFF_MIN_MS
                while not self.stopping:
                    ms = self.drain(conn)
                    if not self.stopping:
                        self.wait(conn, ms)
            except psycopg.Error as e:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                log(f"connection lost: {msg}")
            finally:
                if conn is not None:
                    conn.close()
            if self.stopping:
                break
            delay = random.uniform(backoff / 2, backoff)
            log(f"reconnecting in {delay:.0f} ms")
            self.sleep(delay / 1000.0)
            backoff = min(backoff * 2, BACKOFF_MAX_MS)
        log(f"stopped: {self.processed} rows processed, cursor at id {self.after_id}")
        return 0


if __name__ == "__main__":
    sys.exit(Reader(process).run())
