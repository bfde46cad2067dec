#!/usr/bin/python3
"""examples/python/relay.py -- a delivery_outbox relay in Python (psycopg 3).

Copy this file and replace deliver() with the code that pushes a row to its
recipient (an HTTP call, a websocket frame, a queue publish ...).  The loop
around it is the one README's "relay loop" describes:

  connect -> SET synchronous_commit = off -> LISTEN -> ack what was
  pushed before a lost connection -> drain -> wait for a notification (or
  a timeout) -> drain -> ...

  drain:  rows = outbox_ack_claim('{}', BATCH);
          loop: deliver() each row;
                outbox_release(failed ids, retry_after, error);
                outbox_reject(refused ids, error);
                rows = outbox_ack_claim(pushed ids, BATCH)
          until a claim comes back empty (its call acked the last pushed
          ids).

- One round trip and one commit per batch: outbox_ack_claim acks the ids
  pushed from the last batch and claims the next in one statement, so one
  transaction (the relay runs in autocommit).  '{}' acks nothing: the first
  round of a drain.  Failed and refused rows are released or rejected
  before the next round and never acked.
- The relay's session runs with synchronous_commit = off
  (RELAY_SYNCHRONOUS_COMMIT): its commits do not wait for their WAL to reach
  disk, and at-least-once delivery survives losing the last of them in a
  server crash.  A lost claim leaves its rows pending (or, reclaimed, puts
  them back there); a lost ack, release or reject leaves its rows
  delivered, and the sweep makes them pending again.  Either way the row is
  pushed again: a duplicate, never a loss.  The rows themselves are
  committed by the producers, with their own setting.

- LISTEN comes before the first drain, on every (re)connect: a row committed
  before LISTEN is found by the drain, one committed after it is notified.
- Notifications are wake-ups only (the payload is a row id); the relay claims
  by state, so a missed notification (while disconnected) costs nothing.
- Ack after the push, never before.  Ids pushed but not acked when the
  connection broke are acked first thing after reconnecting (a late ack is
  still proof of delivery), so a broken connection does not cause
  redeliveries by itself.
- A failed push (deliver() raises PushFailed, or any other error: the
  recipient is down, a timeout) gives its row back with
  outbox_release(ids, retry_after => RETRY_AFTER_MS, error => ...): no
  relay claims it before then, and last_error keeps the reason.
- A refused push (deliver() raises PushRefused: the recipient answered that
  it can never take this payload, a 4xx-like permanent error) dead-letters
  its row at once with outbox_reject(ids, error => ...): it leaves the
  outbox for the dead-letter table <outbox>_dead (dead_reason 'rejected'),
  from where outbox_redrive() can put it back.
- Before sleeping, the relay asks outbox_next_due() when the next row that
  is not claimable yet (released with retry_after, backed off, scheduled)
  falls due, and sleeps no longer than that: without the background
  worker, nothing else wakes it for such a row.
- Rows claimed by a relay that died stay 'delivered'; every SWEEP_EVERY
  seconds the relay runs outbox_reclaim(RECLAIM_AFTER seconds) to put them
  back to pending.  Several relays sweeping is harmless.
- Connection loss: reconnect with exponential backoff (BACKOFF_MIN_MS,
  doubling up to BACKOFF_MAX_MS, with jitter).
- SIGTERM/SIGINT: finish the row being pushed, give the unpushed rows of the
  batch back, ack what was pushed (outbox_ack), close, exit 0.

Which outbox: OUTBOX names the table (tenant_a.delivery_outbox, or
delivery_outbox resolved by the session's search_path); every call passes it
as outbox => ...  Unset, the relay works the extension's own table.

OUTBOX='*' serves many tenants from one process and one connection: every
outbox listed in delivery_outbox_tables other than the extension's own
(created or attached) that the relay's role may work (USAGE on its schema,
UPDATE and SELECT on the table).  It LISTENs on each outbox's channel
(OUTBOX_CHANNEL is then not used), drains every outbox on start and on
every reconnect, and on a notification the outboxes of that channel, one
batch per outbox in turn, so that one tenant's backlog does not hold up the
others.  The list is read again on every reconnect and whenever a wait ends
without a notification, so an outbox attached later is picked up within
WAIT_MS.  Needs SELECT on delivery_outbox_tables besides the relay GRANTs.

Connection: the libpq environment, whole (PGHOST, PGPORT, PGDATABASE,
PGUSER, PGPASSWORD or ~/.pgpass, PGAPPNAME, PGOPTIONS ...: libpq reads
it; e.g. PGOPTIONS='-c search_path=tenant_a,outbox,public').  Settings
(environment):

  OUTBOX           the outbox table, or '*'   default the extension's own
  OUTBOX_CHANNEL   channel to LISTEN on       default delivery_outbox
  BATCH            rows per claim             default 100
  WAIT_MS          longest sleep without a notification (safety net)
                                              default 5000
  SWEEP_EVERY      seconds between sweeps, 0 = never      default 30
  RECLAIM_AFTER    seconds a row may stay delivered unacked  default 60
  RETRY_AFTER_MS   retry_after of a failed push; 0 = none, the outbox's
                   backoff_base decides           default 1000
  BACKOFF_MIN_MS / BACKOFF_MAX_MS             default 100 / 30000
  RELAY_SYNCHRONOUS_COMMIT  synchronous_commit of the relay's session, set
                   on every (re)connect; on makes each round wait for its
                   WAL flush                       default off
  FAIL_EVERY       test hook: every Nth push fails        default 0 (never)
  FAIL_ONCE_PAYLOAD  test hook: the first push of a row with exactly this
                   payload fails                           default none
  REFUSE_PAYLOAD   test hook: the recipient refuses a row with exactly this
                   payload                                 default none
  PUSH_DELAY_MS    test hook: each push takes this long   default 0

Each successful push prints "recipient id" on stdout; the log goes to stderr
(each connection's line names the session's synchronous_commit, as the
server reports it; the last line counts the rounds of outbox_ack_claim).

Run:  PGDATABASE=shop /usr/bin/python3 examples/python/relay.py
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


OUTBOX = os.environ.get("OUTBOX") or None
DEFAULT_NAME = "(the extension's own)"
CHANNEL = os.environ.get("OUTBOX_CHANNEL") or "delivery_outbox"
BATCH = env_int("BATCH", 100)
WAIT_MS = env_int("WAIT_MS", 5000)
SWEEP_EVERY = env_int("SWEEP_EVERY", 30)
RECLAIM_AFTER = env_int("RECLAIM_AFTER", 60)
RETRY_AFTER_MS = env_int("RETRY_AFTER_MS", 1000)
BACKOFF_MIN_MS = env_int("BACKOFF_MIN_MS", 100)
BACKOFF_MAX_MS = env_int("BACKOFF_MAX_MS", 30000)
FAIL_EVERY = env_int("FAIL_EVERY", 0)
PUSH_DELAY_MS = env_int("PUSH_DELAY_MS", 0)
FAIL_ONCE_PAYLOAD = os.environ.get("FAIL_ONCE_PAYLOAD", "").encode()
REFUSE_PAYLOAD = os.environ.get("REFUSE_PAYLOAD", "").encode()
SYNCHRONOUS_COMMIT = os.environ.get("RELAY_SYNCHRONOUS_COMMIT") or "off"


def log(msg):
    print(f"relay: {msg}", file=sys.stderr, flush=True)


# --- the push: replace this -------------------------------------------------

class PushFailed(Exception):
    """The push did not go through this time (recipient down, timeout, a
    5xx-like answer): the row is released and retried later."""


class PushRefused(Exception):
    """The recipient can never take this row (a 4xx-like answer: malformed,
    unknown kind, forbidden): the row is dead-lettered."""


_pushes = 0


def deliver(row):
    """Push one claimed row to row.recipient.

    Raise PushRefused if the recipient refuses the row for good (it is
    dead-lettered), any other exception to have it retried later.  row has
    the outbox columns: id, recipient, kind, tenant_id, payload (bytes),
    delivery_attempts (1 on the first push).  Recipients dedupe by row.id:
    delivery is at-least-once.
    """
    global _pushes
    _pushes += 1
    if PUSH_DELAY_MS:
        time.sleep(PUSH_DELAY_MS / 1000.0)
    if REFUSE_PAYLOAD and row.payload == REFUSE_PAYLOAD:
        raise PushRefused(f"{row.recipient} refused the payload (REFUSE_PAYLOAD)")
    if FAIL_ONCE_PAYLOAD and row.payload == FAIL_ONCE_PAYLOAD and row.delivery_attempts == 1:
        raise PushFailed(f"injected failure (FAIL_ONCE_PAYLOAD, attempt {row.delivery_attempts})")
    if FAIL_EVERY and _pushes % FAIL_EVERY == 0:
        raise PushFailed(f"injected failure (push {_pushes})")
    print(f"{row.recipient} {row.id}", flush=True)


# --- the relay loop ---------------------------------------------------------

# Every outbox the role may work, for OUTBOX='*': created or attached (not
# the extension's own), its schema and table granted.  (A role that may not
# work a table gets 42501 from the functions: leaving it out here keeps one
# tenant's missing GRANT from stopping the others.)
ALL_OUTBOXES = """
    SELECT format('%I.%I', n.nspname, c.relname) AS outbox, t.channel
      FROM delivery_outbox_tables t
      JOIN pg_catalog.pg_class c ON c.oid = t.outbox
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE t.origin <> 'default'
       AND pg_catalog.has_schema_privilege(n.oid, 'USAGE')
       AND pg_catalog.has_table_privilege(t.outbox, 'UPDATE, SELECT')
     ORDER BY 1"""


class Relay:
    def __init__(self, push):
        self.push = push
        self.stopping = False
        self.woken = set()          # channels notified during a query
        self.outboxes = {}          # outbox (None: the default) -> channel
        self.unacked = {}           # outbox -> ids pushed, ack not yet confirmed
        self.listening = []         # channels of this connection
        self.next_sweep = 0.0
        self.synchronous_commit = None  # as the server reports it
        # acked: rows outbox_ack acked, plus the ids given to
        # outbox_ack_claim, which does not count them; rounds: its calls
        self.counts = dict(pushed=0, acked=0, released=0, failed=0,
                           rejected=0, connects=0, reclaimed=0, rounds=0)
        # SIGTERM/SIGINT set a flag and, through the wake-up fd, end any
        # select() at once.
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)

    def on_signal(self, signum, _frame):
        if not self.stopping:
            log(f"{signal.Signals(signum).name}: finishing the current batch, then stopping")
        self.stopping = True

    def sleep(self, seconds, conn=None):
        """Sleep up to seconds; return early on a signal, or (with conn) on
        input from the server.  True if the server sent something."""
        fds = [self.wake_r] + ([conn.fileno()] if conn is not None else [])
        ready, _, _ = select.select(fds, [], [], max(seconds, 0))
        if self.wake_r in ready:
            try:
                os.read(self.wake_r, 512)
            except BlockingIOError:
                pass
        return conn is not None and conn.fileno() in ready

    def connect(self):
        # Only the fallback here: everything else (PGOPTIONS included) comes
        # from the PG* environment, which libpq reads.
        conn = psycopg.connect(
            "fallback_application_name=delivery_outbox-relay-python",
            autocommit=True, row_factory=namedtuple_row)
        conn.add_notify_handler(self.on_notify)
        # Safe for at-least-once delivery (see the header): a claim or an
        # ack lost in a crash only means the row is pushed again.  Set on
        # every connection: a reconnect is a new session.
        self.synchronous_commit = conn.execute(
            "SELECT pg_catalog.set_config('synchronous_commit', %s, false) AS v",
            (SYNCHRONOUS_COMMIT,)).fetchone().v
        self.listening = self.listen(conn, [])
        return conn

    def listen(self, conn, listening):
        """Read the outboxes to serve (OUTBOX='*') and LISTEN on their
        channels not in listening (those this connection listens to
        already).  Returns the channels listened to now."""
        if OUTBOX == "*":
            found = {r.outbox: r.channel for r in conn.execute(ALL_OUTBOXES)}
            for name in sorted(found.keys() - self.outboxes.keys()):
                log(f"serving {name} (channel {found[name]})")
            for name in sorted(self.outboxes.keys() - found.keys()):
                log(f"no longer serving {name}")
            self.outboxes = found
        else:
            self.outboxes = {OUTBOX: CHANNEL}
        channels = sorted(set(self.outboxes.values()))
        for channel in channels:
            if channel not in listening:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        return channels

    def on_notify(self, notify):
        self.woken.add(notify.channel)

    def ack(self, conn):
        for outbox, ids in list(self.unacked.items()):
            n = conn.execute(
                "SELECT outbox_ack(%s::bigint[], outbox => %s::text::regclass) AS n",
                (ids, outbox)).fetchone().n
            self.counts["acked"] += n
            del self.unacked[outbox]

    def drain(self, conn, channels=None):
        """One batch from each outbox (of the channels given; all if None)
        in turn until nothing is claimable in any of them."""
        todo = [o for o, c in sorted(self.outboxes.items(), key=lambda i: i[0] or "")
                if channels is None or c in channels]
        self.woken.clear()
        while todo and not self.stopping:
            todo = [o for o in todo if self.drain_batch(conn, o)]
            # notified meanwhile: those outboxes get another turn
            for o, c in self.outboxes.items():
                if c in self.woken and o not in todo:
                    todo.append(o)
            self.woken.clear()
        # An outbox leaves todo once its round claimed nothing, and that
        # round acked its pushed ids: left here only when stopping.
        self.ack(conn)

    def drain_batch(self, conn, outbox):
        """One round: ack the ids pushed from this outbox's last batch and
        claim the next, in one statement; push; release failures, reject
        refusals.  The ids pushed now are acked by the next round.  True if
        rows were claimed."""
        ids = self.unacked.get(outbox, [])
        # prepared on the server at the first round of each connection,
        # not parsed and planned again at every batch
        rows = conn.execute(
            "SELECT id, recipient, kind, tenant_id, payload,"
            "       delivery_attempts"
            "  FROM outbox_ack_claim(%s::bigint[], %s::integer,"
            "                        outbox => %s::text::regclass)",
            (ids, BATCH, outbox), prepare=True).fetchall()
        # committed (autocommit): those ids are acked
        self.counts["rounds"] += 1
        self.counts["acked"] += len(ids)
        self.unacked.pop(outbox, None)
        if not rows:
            return False
        unpushed = []                  # claimed, never pushed
        failed = []                    # (id, error): retry later
        refused = []                   # (id, error): dead-letter
        for row in rows:
            if self.stopping:          # shutting down: not pushed
                unpushed.append(row.id)
                continue
            try:
                self.push(row)
            except PushRefused as e:
                log(f"push refused: id {row.id} to {row.recipient}: {e}")
                refused.append((row.id, str(e)))
            except Exception as e:     # noqa: BLE001 -- any push error
                log(f"push failed: id {row.id} to {row.recipient}: {e}")
                self.counts["failed"] += 1
                failed.append((row.id, str(e)))
            else:
                self.counts["pushed"] += 1
                self.unacked.setdefault(outbox, []).append(row.id)
        # One call per row: each keeps its own error in last_error.
        for row_id, error in failed:
            self.counts["released"] += conn.execute(
                "SELECT outbox_release(ARRAY[%s::bigint],"
                " retry_after => NULLIF(%s::integer, 0) * interval '1 ms',"
                " error => %s, outbox => %s::text::regclass) AS n",
                (row_id, RETRY_AFTER_MS, error, outbox)).fetchone().n
        for row_id, error in refused:
            self.counts["rejected"] += conn.execute(
                "SELECT outbox_reject(ARRAY[%s::bigint], error => %s,"
                " outbox => %s::text::regclass) AS n",
                (row_id, error, outbox)).fetchone().n
        if unpushed:                   # back at once, for another relay
            self.counts["released"] += conn.execute(
                "SELECT outbox_release(%s::bigint[], outbox => %s::text::regclass) AS n",
                (unpushed, outbox)).fetchone().n
        return True

    def sweep(self, conn):
        if SWEEP_EVERY <= 0 or time.monotonic() < self.next_sweep:
            return
        self.next_sweep = time.monotonic() + SWEEP_EVERY
        for outbox in sorted(self.outboxes, key=lambda o: o or ""):
            n = conn.execute(
                "SELECT outbox_reclaim(make_interval(secs => %s::float8),"
                " outbox => %s::text::regclass) AS n",
                (RECLAIM_AFTER, outbox)).fetchone().n
            if n:
                self.counts["reclaimed"] += n
                log(f"sweep: {n} rows of {outbox or DEFAULT_NAME} delivered more "
                    f"than {RECLAIM_AFTER} s ago and never acked are pending again")

    def wait(self, conn):
        """Sleep until a notification, a signal, the next sweep, the next
        row falling due or WAIT_MS.  Returns the channels notified, or None
        when the sleep ended for another reason (then every outbox is
        drained)."""
        # Milliseconds until the earliest row that is pending but not
        # claimable yet falls due, in any outbox served; NULL when there is
        # none.
        due_ms = conn.execute(
            "SELECT ceil(EXTRACT(epoch FROM min(outbox_next_due(outbox => o::regclass))"
            "                               - clock_timestamp()) * 1000)::bigint AS ms"
            "  FROM unnest(%s::text[]) o",
            ([o for o in self.outboxes],)).fetchone().ms
        if self.woken:
            return set(self.woken)
        timeout = WAIT_MS / 1000.0
        if due_ms is not None:
            timeout = min(timeout, max(due_ms, 0) / 1000.0)
        if SWEEP_EVERY > 0:
            timeout = min(timeout, self.next_sweep - time.monotonic())
        if self.sleep(timeout, conn):
            # Read what arrived; raises OperationalError if the connection
            # is gone.  The payloads (row ids) are not needed: we drain.
            conn.pgconn.consume_input()
            while (n := conn.pgconn.notifies()) is not None:
                self.woken.add(n.relname.decode())
            if conn.broken or conn.pgconn.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("connection lost")
        return set(self.woken) if self.woken else None

    def serve(self, conn):
        if self.unacked:
            n = sum(len(ids) for ids in self.unacked.values())
            self.ack(conn)
            log(f"acked {n} rows pushed before the connection was lost")
        self.drain(conn)
        while not self.stopping:
            channels = self.wait(conn)
            if channels is None and OUTBOX == "*":
                # no notification: look for outboxes attached meanwhile
                self.listening = self.listen(conn, self.listening)
            self.sweep(conn)
            self.drain(conn, channels)

    def run(self):
        backoff = BACKOFF_MIN_MS
        while not self.stopping:
            conn = None
            try:
                conn = self.connect()
                self.counts["connects"] += 1
                log(f"connected (backend pid {conn.info.backend_pid}, "
                    f"synchronous_commit {self.synchronous_commit}), "
                    f"listening on {', '.join(self.listening) or '(nothing)'}, "
                    f"outbox {OUTBOX or DEFAULT_NAME}"
                    + (f": {len(self.outboxes)} outboxes" if OUTBOX == "*" else ""))
                backoff = BACKOFF_MIN_MS
                self.serve(conn)
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
        if self.unacked:
            log(f"{sum(len(i) for i in self.unacked.values())} pushed rows could not be acked; the "
                f"sweep (outbox_reclaim) will redeliver them")
        log("stopped: " + ", ".join(f"{k} {v}" for k, v in self.counts.items()))
        return 0


if __name__ == "__main__":
    sys.exit(Relay(deliver).run())
