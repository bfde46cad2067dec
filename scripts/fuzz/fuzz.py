#!/usr/bin/env python3
#
# scripts/fuzz/fuzz.py -- the fuzz suite's own generator and its checks
#
# Run by scripts/fuzz.sh against the database scripts/fuzz/setup.sql made
# (connection from the PG* environment), in three steps:
#
#   fuzz.py run    hostile sessions in parallel call every outbox function
#                  and write the outbox tables with hostile arguments
#                  (NULLs, empty and huge strings, negative and huge
#                  numbers, wrong states and bookkeeping, arrays with NULLs,
#                  duplicates, two dimensions or odd bounds, names of other
#                  relations), each statement in autocommit or in a
#                  transaction with savepoints, committed, rolled back or
#                  prepared; one more session (role fuzz_app) enqueues
#                  "keep:" rows and only claims and releases them, and
#                  writes down each id it saw committed (--state).  A
#                  returned XX000-class error or a lost connection is a
#                  finding, its statements written to --findings.
#   fuzz.py check  after the run: the state invariants on every outbox,
#                  the registry, outbox_stats against the rows, every index
#                  (amcheck), and every committed "keep:" row still there
#                  (in its outbox or its dead-letter table, once, with its
#                  payload), no row of a rolled-back enqueue.
#   fuzz.py log    the server log: no backend died by a signal, no PANIC,
#                  no failed assertion, no XX000-class error raised in the
#                  extension's code (those raised in PostgreSQL's own code
#                  by sqlsmith's random SQL are listed, not failed).
#
# Each prints TAP-like lines ("ok - ...", "not ok - ...") that fuzz.sh
# numbers; anything else is a comment.
#
# What the hostile sessions may not do, so that the end checks mean
# something: commit a change that would switch an outbox's guard off
# (detach, outbox_set_triggers, DROP, TRUNCATE, the internal helpers) on
# the tracked outboxes -- those run in transactions that are rolled back;
# the scratch schema's tables are theirs to break for good -- and touch a
# "keep:" row: their ids come from their own pool (rows whose recipient is
# not "keep:"), from numbers no sequence reaches, or from queries that
# leave "keep:" rows out.

import argparse
import json
import random
import re
import sys
import threading
import time

import psycopg
from psycopg.types.string import TextLoader

TRACKED = ['outbox.delivery_outbox', 't1.delivery_outbox', 't2.delivery_outbox',
           't3.delivery_outbox', 't4.delivery_outbox', 'seed.delivery_outbox']
SCRATCH = ['scratch.delivery_outbox', 'scratch.plain', 'scratch.wrong',
           'scratch.v', 'scratch.seq']
OTHERS = ['pg_catalog.pg_class', 'pg_catalog.pg_proc', 'outbox.delivery_outbox_registry',
          'outbox.delivery_outbox_tables', 'outbox.delivery_outbox_dead',
          't1.delivery_outbox_dead', 't1.delivery_outbox_pending_idx',
          't2.delivery_outbox_p0', 't2.delivery_outbox_p1', 't4.delivery_outbox_p0',
          't1.delivery_outbox_id_seq', 'seed.delivery_outbox_id_seq',
          'information_schema.tables', 'pg_catalog.pg_stat_activity']
KEEP = 'keep:'
FINDING_STATES = ('XX000', 'XX001', 'XX002')
# Errors that end a statement but are no finding: a timeout, a lock or
# serialization conflict, a cancel.
NOT_EXPECTED_CLASSES = ('XX', '58')


def lit(s):
    """A SQL string literal (standard_conforming_strings is on)."""
    return "'" + s.replace("'", "''") + "'"


class Pool:
    """Ids a hostile session may use: never a keep: row."""

    def __init__(self):
        self.ids = {o: [] for o in TRACKED + SCRATCH[:1]}
        self.lock = threading.Lock()

    def add(self, outbox, ids):
        with self.lock:
            lst = self.ids.setdefault(outbox, [])
            lst.extend(ids)
            if len(lst) > 400:
                del lst[:len(lst) - 400]

    def some(self, rnd, outbox, n):
        with self.lock:
            lst = self.ids.get(outbox) or []
            if not lst:
                return []
            return [rnd.choice(lst) for _ in range(n)]


class Hostile:
    """Random statements with hostile arguments."""

    def __init__(self, rnd, pool, superuser):
        self.r = rnd
        self.pool = pool
        self.superuser = superuser
        self.counter = 0

    # -- values -----------------------------------------------------------

    def pick(self, *choices):
        return self.r.choice(choices)

    def outbox(self, allow_null=True):
        r = self.r.random()
        if r < 0.70:
            return self.r.choice(TRACKED)
        if r < 0.80:
            return self.r.choice(SCRATCH)
        if r < 0.92:
            return self.r.choice(OTHERS)
        return None if allow_null else self.r.choice(TRACKED)

    def regclass(self, o=None):
        r = self.r.random()
        if o is None and r < 0.15:
            return self.pick('NULL::regclass', '0::oid::regclass', '1259::oid::regclass',
                             '4294967295::oid::regclass', '987654321::oid::regclass',
                             "'-1'::regclass", "'delivery_outbox'::regclass",
                             "'pg_temp.nope'::regclass")
        if o is None:
            o = self.outbox()
            if o is None:
                return 'NULL::regclass'
        return lit(o) + '::regclass'

    def text(self):
        self.counter += 1
        return self.pick(
            'NULL', "''", "' '", lit('r:%d' % self.r.randint(0, 9)),
            lit('r:%d' % self.r.randint(0, 9)), lit('r:%d' % self.r.randint(0, 9)),
            lit('tenant%d' % self.r.randint(0, 1)), lit('x' * 63), lit('x' * 64),
            "repeat('y', 100000)", "repeat('é', 400000)", lit("a'b\"c\\d"),
            lit('"; DROP TABLE t1.delivery_outbox; --'), lit('delivery_outbox'),
            lit('pending'), lit('\t\n\r'), lit('fz:%d' % self.counter),
            "chr(1) || 'x'", lit('\u00ff\u4e2d\U0001F600'))

    def recipient(self):
        return self.text()

    def bytea(self):
        return self.pick('NULL', "''::bytea", "'\\x00'::bytea", "'\\x7b7d'::bytea",
                         "convert_to('fuzz', 'UTF8')",
                         "decode(repeat('ab', 1048576), 'hex')",
                         "decode(repeat('ab', 1048577), 'hex')",
                         "decode(repeat('00', 300000), 'hex')")

    def int4(self):
        return self.pick('NULL', '0', '-1', '1', '2', '10', '100', '1000', '2147483647',
                         '(-2147483648)', '5', '50')

    def int8(self, outbox=None):
        ids = self.pool.some(self.r, outbox, 1)
        if ids and self.r.random() < 0.6:
            return str(ids[0])
        return self.pick('NULL', '0', '-1', '9223372036854775807', '(-9223372036854775808)',
                         '2147483648', '1000000000000000', '(-42)')

    def interval(self):
        return self.pick('NULL', "'0'::interval", "'-1 second'::interval",
                         "'1 microsecond'::interval", "'1 second'::interval",
                         "'10 ms'::interval", "'1 hour'::interval", "'1 day'::interval",
                         "'100 years'::interval", "'1001 years'::interval",
                         "'178000000 years'::interval", "'-178000000 years'::interval",
                         "'1 mon -30 days'::interval", "'-1 day +1 second'::interval",
                         "'2147483647 days'::interval")

    def timestamptz(self):
        return self.pick('NULL', 'now()', "now() + '1 second'", "now() + '2 seconds'",
                         "now() - '1 hour'::interval", "'infinity'::timestamptz",
                         "'-infinity'::timestamptz", "'epoch'::timestamptz",
                         "'4713-01-01 BC'::timestamptz", "'294276-12-31 23:59:59'::timestamptz",
                         "clock_timestamp() + '1 day'")

    def boolean(self):
        return self.pick('NULL', 'true', 'false')

    def ids(self, outbox=None):
        """A bigint[] expression: never a keep: row."""
        o = outbox
        some = self.pool.some(self.r, o, self.r.randint(1, 6))
        r = self.r.random()
        if r < 0.35 and some:
            return 'ARRAY[%s]::bigint[]' % ', '.join(map(str, some))
        if r < 0.45 and some:
            return 'ARRAY[%s, NULL, %s]::bigint[]' % (some[0], ', '.join(map(str, some)))
        if r < 0.52:
            return self.pick('NULL::bigint[]', "'{}'::bigint[]", 'ARRAY[NULL]::bigint[]',
                             'ARRAY[NULL, NULL]::bigint[]',
                             "ARRAY[-1, 0, 9223372036854775807]::bigint[]")
        if r < 0.60 and len(some) >= 4:
            return 'ARRAY[[%d, %d], [%d, %d]]::bigint[]' % tuple(some[:4])
        if r < 0.66 and len(some) >= 2:
            return "'[5:6]={%d,%d}'::bigint[]" % (some[0], some[1])
        if r < 0.70:
            return 'ARRAY(SELECT -g FROM generate_series(1, %d) g)' % self.pick(1000, 100000)
        if r < 0.85 and o in TRACKED:
            state = self.pick('delivered', 'pending', 'acked')
            return ("ARRAY(SELECT id FROM %s WHERE delivery_state = '%s' AND "
                    "recipient NOT LIKE 'keep:%%' ORDER BY id DESC LIMIT %d)" %
                    (o, state, self.r.randint(1, 200)))
        if r < 0.92 and o in TRACKED:
            return ("ARRAY(SELECT id FROM %s_dead WHERE recipient NOT LIKE 'keep:%%' "
                    "ORDER BY id LIMIT %d)" % (o, self.r.randint(1, 50)))
        return 'ARRAY[%s]::bigint[]' % ', '.join(map(str, some or [-5, -5]))

    def array(self, elem, typ, n):
        r = self.r.random()
        if r < 0.08:
            return 'NULL::%s[]' % typ
        if r < 0.14:
            return "'{}'::%s[]" % typ
        if r < 0.20:
            n = max(0, n + self.r.choice((-1, 1)))
        if r < 0.25 and n >= 2:
            return "ARRAY[ARRAY[%s, %s]]::%s[]" % (elem(), elem(), typ)
        if r < 0.28 and n >= 1:
            # lower bound 3
            return "('[3:%d]=' || (ARRAY[%s]::%s[])::text)::%s[]" % (
                n + 2, ', '.join(elem() for _ in range(n)), typ, typ)
        if r < 0.30:
            return 'array_fill((%s)::%s, ARRAY[%d])' % (elem(), typ, self.pick(0, 1, 5000))
        return 'ARRAY[%s]::%s[]' % (', '.join(elem() for _ in range(n)), typ) if n else "'{}'::%s[]" % typ

    # -- statements -------------------------------------------------------

    def named_outbox(self, o=None):
        if self.r.random() < 0.1:
            return ''
        return ', outbox => ' + self.regclass(o)

    @staticmethod
    def target(ob):
        """The outbox a call's outbox argument (", outbox => expr", or a
        bare regclass expression) works on, when its ids may come from
        the pool; 'safe' when it may be any table (a name the search_path
        resolves): then only ids no sequence reaches."""
        expr = ob[len(', outbox => '):] if ob.startswith(', outbox => ') else ob
        if expr in ('', 'NULL::regclass'):
            return 'outbox.delivery_outbox'
        m = re.match(r"^'([a-z0-9_]+\.[a-z0-9_]+)'::regclass$", expr)
        if m:
            return m.group(1)
        return 'safe'

    def call(self):
        """One call of an outbox function; returns (sql, outbox or None,
        whether it may only run in a transaction that is rolled back)."""
        ob = self.named_outbox(self.outbox())
        o = self.target(ob)
        f = self.r.randint(0, 26)
        if f == 0:
            return ('SELECT outbox.outbox_enqueue(%s, %s, %s, %s, %s, %s, %s%s)' %
                    (self.recipient(), self.pick("'work'", 'NULL', "''", "'chain'", self.text()),
                     self.bytea(), self.text(), self.timestamptz(), self.timestamptz(),
                     self.pick('NULL', 'NULL', self.text(), lit('k%d' % self.r.randint(0, 30))),
                     ob), o, False)
        if f == 1:
            n = self.r.randint(0, 5)
            return ('SELECT * FROM outbox.outbox_enqueue_batch(%s, %s, %s, %s, %s, %s, %s%s)' %
                    (self.array(self.recipient, 'text', n),
                     self.array(lambda: self.pick("'work'", self.text()), 'text', n),
                     self.array(self.bytea, 'bytea', n), self.array(self.text, 'text', n),
                     self.array(self.timestamptz, 'timestamptz', n),
                     self.array(self.timestamptz, 'timestamptz', n),
                     self.array(lambda: self.pick('NULL', lit('k%d' % self.r.randint(0, 9))),
                                'text', n), ob), o, False)
        if f == 3:
            return ('SELECT id, recipient FROM outbox.outbox_ack_claim(%s, %s, %s, %s%s)' %
                    (self.ids(o), self.int4(), self.pick('NULL', 'NULL', self.recipient()),
                     self.pick('NULL', 'NULL', self.text()), ob), o, False)
        if f == 2:
            return ('SELECT id, recipient FROM outbox.outbox_claim(%s, %s, %s%s)' %
                    (self.int4(), self.pick('NULL', 'NULL', self.recipient()),
                     self.pick('NULL', 'NULL', self.text()), ob), o, False)
        if f == 4:
            return ('SELECT outbox.outbox_ack(%s::bigint, %s%s)' %
                    (self.int8(o), self.pick('NULL', self.recipient()), ob), o, False)
        if f == 5:
            return ('SELECT outbox.outbox_ack(%s, %s%s)' %
                    (self.ids(o), self.pick('NULL', self.recipient()), ob), o, False)
        if f == 6:
            return ('SELECT outbox.outbox_release(%s, %s, %s%s)' %
                    (self.ids(o), self.interval(), self.text(), ob), o, False)
        if f == 7:
            return ('SELECT outbox.outbox_reject(%s, %s%s)' %
                    (self.ids(o), self.text(), ob), o, False)
        if f == 8:
            return ('SELECT outbox.outbox_redrive(%s%s)' % (self.ids(o), ob), o, False)
        if f == 9:
            return ('SELECT outbox.outbox_next_due(%s%s)' % (self.recipient(), ob), o, False)
        if f == 10:
            return ('SELECT outbox.outbox_expire(%s%s)' % (self.int4(), ob), o, False)
        if f == 11:
            return ('SELECT outbox.outbox_horizon(%s)' % self.regclass(), o, False)
        if f == 12:
            return ('SELECT outbox.outbox_reclaim(%s, %s%s)' %
                    (self.interval(), self.int4(), ob), o, False)
        if f == 13:
            return ('SELECT outbox.outbox_reclaim_recipient(%s, %s%s)' %
                    (self.recipient(), self.text(), ob), o, False)
        if f == 14:
            return ('SELECT outbox.outbox_reassign(%s, %s%s)' %
                    (self.recipient(), self.recipient(), ob), o, False)
        if f == 15:
            return ('SELECT id, delivery_state FROM outbox.outbox_replay(%s, %s, %s, %s%s)' %
                    (self.recipient(), self.int8(o), self.int4(), self.text(), ob), o, False)
        if f == 16:
            return ('SELECT outbox.outbox_purge(%s%s)' % (self.interval(), ob), o, False)
        if f == 17:
            return ('SELECT * FROM outbox.outbox_stats(%s)' % self.regclass(), o, False)
        if f == 18:
            return ('SELECT outbox.outbox_wait(%s, %s%s)' %
                    (self.pick("'0'", "'10 ms'", "'-1 second'", "'100 ms'", 'NULL',
                               "'1000 years'"), self.recipient(), ob), o, False)
        if f == 19:
            return ('SELECT count(*) FROM outbox.outbox_activity()', None, False)
        if f == 20:
            return ('SELECT outbox.outbox_configure(%s, channel => %s, max_attempts => %s, '
                    'backoff_base => %s, backoff_max => %s, ttl => %s, ordered => %s, '
                    'retain_acked => %s)' %
                    (self.regclass(), self.pick('NULL', 'NULL', self.text()),
                     self.pick('NULL', 'NULL', self.int4()),
                     self.pick('NULL', self.interval()), self.pick('NULL', self.interval()),
                     self.pick('NULL', 'NULL', "'1 day'", self.interval()),
                     self.boolean(), self.pick('NULL', self.interval())), o,
                    # a ttl or max_attempts that dead-letters every row is
                    # fine; ordered/channel changes are too
                    False)
        if f == 21:
            return ('SELECT outbox.outbox_create(%s, %s, %s, %s)' %
                    (self.pick("'scratch'", "'scratch'", "'t1'", "'pg_temp'", "'pg_catalog'",
                               "'nope'", 'NULL', "''", "'outbox'"),
                     self.pick("'fz_%d'" % self.r.randint(0, 5), 'NULL', "''",
                               lit('x' * 70), "'delivery_outbox'", "'plain'"),
                     self.pick('NULL', self.text()),
                     self.pick('NULL', 'NULL', '0', '-1', '1', '1000', '9223372036854775807')),
                    None, False)
        if f == 22:
            return ('SELECT outbox.outbox_attach(%s, %s)' %
                    (self.regclass(), self.pick('NULL', self.text())), None, False)
        if f == 23:
            t = self.regclass()
            return ('SELECT outbox.outbox_detach(%s)' % t, None, not self.scratch_only(t))
        if f == 24:
            t = self.regclass()
            return ('SELECT outbox.outbox_partition(%s, %s)' %
                    (t, self.pick('NULL', '0', '-1', '1', '100', '1000', '9223372036854775807')),
                    None, not self.scratch_only(t))
        if f == 25:
            # the helpers granted to nobody, as the superuser
            t = self.regclass()
            fn = self.pick('outbox_invalidate(%s)' % t, 'outbox_check_relation(%s)' % t,
                           'outbox_require_owner(%s)' % t, 'outbox_make_dead(%s)' % t,
                           'outbox_make_indexes(%s)' % t, 'outbox_grant_triggers(%s)' % t,
                           'outbox_drop_triggers(%s)' % t,
                           'outbox_set_triggers(%s, %s)' % (t, self.text()),
                           'outbox_make_outbox(%s, %s, %s)' % (t, self.text(),
                                                              self.pick("'created'", "'attached'",
                                                                        "'default'", 'NULL', "'x'")),
                           'outbox_partitions_ahead(%s)' % t, 'outbox_calling_role()',
                           'outbox_run_as_owner(%s, %s)' % (t, self.pick(
                               "'SELECT 1'", 'NULL', "''", "'SELECT count(*) FROM pg_class'",
                               "'DELETE FROM t1.delivery_outbox'", "'SELECT 1; SELECT 2'")))
            return ('SELECT outbox.' + fn, None, True)
        return ('SELECT outbox.outbox_invalidate(%s)' % self.regclass(), None, False)

    @staticmethod
    def scratch_only(t):
        """Whether a regclass expression cannot name a tracked outbox (or a
        table of one): a scratch table, a catalog, NULL, an OID."""
        return (not t.startswith("'") or t.startswith("'scratch.") or t.startswith("'pg_")
                or t.startswith("'information_schema.") or t.startswith("'-1'"))

    def cols(self, o):
        """A hostile row for a plain INSERT: (columns, values)."""
        state = self.pick("'pending'", "'pending'", "'delivered'", "'acked'", "'bogus'",
                          "'PENDING'", 'NULL', "''", "'acked '")
        att = self.pick('0', '0', '1', '2', '-1', '2147483647', 'NULL')
        ts = lambda: self.pick('NULL', 'NULL', 'now()', "'infinity'", "'-infinity'",
                               "now() - '1 day'::interval")
        cols = ['recipient', 'kind', 'payload', 'delivery_state', 'delivery_attempts',
                'delivered_at', 'acked_at']
        vals = [self.recipient(), self.pick("'work'", self.text()), self.bytea(), state, att,
                ts(), ts()]
        if self.r.random() < 0.3:
            cols.append('id')
            vals.append(self.pick('(-1)', '(-2)', '0', '1000000000000001',
                                  '9223372036854775807', 'NULL') if self.r.random() < 0.7
                        else self.int8(o))
        if self.r.random() < 0.3:
            cols += ['not_before', 'expires_at', 'dedup_key']
            vals += [self.timestamptz(), self.timestamptz(),
                     self.pick('NULL', "''", lit('k%d' % self.r.randint(0, 5)))]
        if self.r.random() < 0.1:
            cols.append('created_at')
            vals.append(self.pick('NULL', 'now()', "'infinity'"))
        return cols, vals

    def dml(self):
        """A plain write on an outbox table, never on a keep: row."""
        o = self.r.choice(TRACKED + SCRATCH[:2])
        if o.startswith('seed.'):
            pass
        f = self.r.randint(0, 9)
        notkeep = "recipient NOT LIKE 'keep:%'"
        if f <= 2:
            cols, vals = self.cols(o)
            conflict = self.pick('', '', ' ON CONFLICT DO NOTHING',
                                 " ON CONFLICT (id) DO UPDATE SET delivery_state = 'acked' "
                                 "WHERE %s.recipient NOT LIKE 'keep:%%'" % o.split('.')[1])
            if 'id' not in cols and 'DO UPDATE' in conflict:
                conflict = ''
            return ('INSERT INTO %s (%s) VALUES (%s)%s RETURNING id' %
                    (o, ', '.join(cols), ', '.join(vals), conflict), o)
        if f <= 5:
            sets = []
            for col, gen in (('delivery_state', lambda: self.pick(
                                  "'pending'", "'delivered'", "'acked'", "'bogus'", 'NULL')),
                             ('delivery_attempts', self.int4),
                             ('delivered_at', self.timestamptz), ('acked_at', self.timestamptz),
                             ('recipient', self.recipient), ('kind', self.text),
                             ('payload', self.bytea), ('id', lambda: self.pick('id', 'id + 0', '-id')),
                             ('not_before', self.timestamptz), ('expires_at', self.timestamptz),
                             ('dedup_key', lambda: self.pick('NULL', "'k1'", "''")),
                             ('last_error', self.text), ('created_at', self.timestamptz)):
                if self.r.random() < 0.25:
                    sets.append('%s = %s' % (col, gen()))
            if not sets:
                sets = ["delivery_state = 'delivered'"]
            where = self.pick('id = ANY(%s)' % self.ids(o),
                              "delivery_state = 'delivered' AND id %% 7 = %d" % self.r.randint(0, 6),
                              'recipient = %s' % self.recipient())
            return ('UPDATE %s SET %s WHERE %s AND %s' % (o, ', '.join(sets), where, notkeep), o)
        if f == 6:
            where = self.pick('id = ANY(%s)' % self.ids(o),
                              "delivery_state = 'acked' AND id %% 11 = %d" % self.r.randint(0, 10))
            return ('DELETE FROM %s WHERE %s AND %s' % (o, where, notkeep), o)
        if f == 7:
            return ('MERGE INTO %s t USING (SELECT unnest(%s) AS id LIMIT 50) s ON t.id = s.id '
                    "AND t.recipient NOT LIKE 'keep:%%' "
                    'WHEN MATCHED THEN UPDATE SET delivery_state = %s '
                    "WHEN NOT MATCHED AND s.id < 0 THEN INSERT (id, recipient, kind, payload) "
                    "VALUES (s.id - 1000000000, 'fz:merge', 'work', '\\x00')" %
                    (o, self.ids(o), self.pick("'acked'", "'delivered'", "'pending'")), o)
        if f == 8 and o in TRACKED:
            d = o + '_dead'
            return self.pick(
                ("UPDATE %s SET dead_reason = %s WHERE %s AND id = ANY(%s)" %
                 (d, self.pick("'bogus'", "'expired'", 'NULL'), notkeep, self.ids(o)), d),
                ("DELETE FROM %s WHERE %s AND id = ANY(%s)" % (d, notkeep, self.ids(o)), d),
                ("INSERT INTO %s SELECT *, now(), 'rejected' FROM %s WHERE false" % (d, o), d))
        return ('SELECT count(*) FROM %s WHERE %s' % (o, self.pick(
            "delivery_state = 'pending'", "payload = ''", "recipient = ''", 'true')), o)

    def copy_rows(self):
        """Text COPY rows for a plain COPY: a list of tuples."""
        rows = []
        for _ in range(self.r.randint(1, 5)):
            state = self.pick('pending', 'pending', 'delivered', 'acked', 'bogus', None)
            att = self.pick('0', '1', '-1', None, '2147483647')
            ts = self.pick(None, None, '2000-01-01 00:00:00+00', 'infinity')
            rows.append(('fz:copy%d' % self.r.randint(0, 3), self.pick('work', ''),
                         self.pick('\\x00', '\\x', 'ab' * 10, None), state, att, ts,
                         self.pick(None, ts)))
        return rows

    def session_setting(self):
        if self.superuser:
            return self.pick(
                "SET delivery_outbox.direct_insert = off", "SET delivery_outbox.direct_insert = on",
                "SET delivery_outbox.notify = 'deferred'", "SET delivery_outbox.notify = 'off'",
                "SET delivery_outbox.notify = 'commit'",
                "SET delivery_outbox.max_payload_size = '1kB'",
                "RESET delivery_outbox.max_payload_size",
                "SET delivery_outbox.channel = 'fz_chan'", "RESET delivery_outbox.channel",
                "SET session_replication_role = replica", "SET session_replication_role = origin",
                "SET search_path = t1, public", "SET search_path = pg_temp, t2",
                "RESET search_path", "SET TimeZone = 'Pacific/Kiritimati'",
                "SET TimeZone = 'UTC'", "SET ROLE fuzz_app", "SET ROLE fuzz_relay",
                "RESET ROLE", "SET enable_indexscan = off", "RESET enable_indexscan",
                "LISTEN delivery_outbox", "LISTEN t3_wake", "UNLISTEN *",
                "SET delivery_outbox.partition_lock_timeout = 0")
        return self.pick("SET search_path = t1, public", "RESET search_path",
                         "SET TimeZone = 'America/St_Johns'", "RESET TimeZone",
                         "LISTEN delivery_outbox", "UNLISTEN *",
                         "SET delivery_outbox.direct_insert = off")

    def ddl(self):
        """Schema changes, mostly on the scratch tables; the ones on tracked
        outboxes are rolled back."""
        o = self.r.choice(TRACKED)
        return self.pick(
            ('ALTER TABLE %s ADD COLUMN IF NOT EXISTS fz_extra int DEFAULT 1' % o, True),
            ('ALTER TABLE %s DROP COLUMN IF EXISTS fz_extra' % o, True),
            ('CREATE INDEX ON %s (kind)' % o, True),
            ('ALTER TABLE %s DISABLE TRIGGER ALL' % o, True),
            ('TRUNCATE %s' % o, True),
            ('DROP TABLE %s' % o, True),
            ('ALTER TABLE %s RENAME TO fz_renamed' % o, True),
            ('ALTER TABLE %s ENABLE ROW LEVEL SECURITY' % o, True),
            ('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE' % o, True),
            ('VACUUM %s' % o, None),
            ('ANALYZE %s' % o, False),
            ('CREATE TEMP TABLE IF NOT EXISTS fz_temp (LIKE outbox.delivery_outbox INCLUDING ALL)',
             False),
            ('TRUNCATE scratch.delivery_outbox', False),
            ('DROP TABLE IF EXISTS scratch.fz_%d' % self.r.randint(0, 5), False),
            ('ALTER TABLE scratch.delivery_outbox ADD COLUMN IF NOT EXISTS fz_extra int', False),
            ('ALTER TABLE scratch.delivery_outbox ALTER COLUMN delivery_state DROP DEFAULT', False),
            ('DROP TABLE IF EXISTS scratch.plain', False),
            ('CREATE TABLE IF NOT EXISTS scratch.plain (LIKE outbox.delivery_outbox INCLUDING ALL)',
             False),
            ("SELECT outbox.outbox_create('scratch') WHERE to_regclass('scratch.delivery_outbox') IS NULL",
             False),
            ('DROP TABLE IF EXISTS scratch.delivery_outbox', False),
            ('ALTER TABLE scratch.delivery_outbox RENAME TO fz_1', False))


class Session(threading.Thread):
    def __init__(self, name, user, seed, deadline, budget, pool, findings, hostile=True):
        super().__init__(name=name, daemon=True)
        self.user = user
        self.r = random.Random(seed)
        self.deadline = deadline
        self.budget = budget
        self.pool = pool
        self.findings = findings
        self.hostile = hostile
        self.states = {}
        self.statements = 0
        self.lost = 0
        self.internal = 0
        self.conn = None
        self.log = []          # the statements of the current transaction
        self.gen = Hostile(self.r, pool, user is None)
        self.keep = {}         # keep session: outbox -> {id: (recipient, payload)}
        self.rolled_back = {}  # keep session: outbox -> [ids]
        self.uncertain = set()
        self.error = None
        self.trace = None

    def connect(self):
        kw = {'autocommit': True, 'application_name': self.name}
        if self.user:
            kw['user'] = self.user
        self.conn = psycopg.connect(**kw)
        # values come back as text: a timestamp of 'infinity' or past year
        # 9999 is a fine result that Python's datetime cannot hold
        for typ in ('timestamptz', 'timestamp', 'date', 'interval', 'numeric'):
            self.conn.adapters.register_loader(typ, TextLoader)
        self.conn.execute("SET statement_timeout = '4s'")
        self.conn.execute("SET lock_timeout = '1s'")

    def done(self):
        return time.monotonic() >= self.deadline or (self.budget and self.statements >= self.budget)

    def record(self, sqlstate, msg, stmt):
        self.states[sqlstate] = self.states.get(sqlstate, 0) + 1
        if self.trace:
            self.trace.write('-- %s %s\n%s;\n' % (sqlstate, msg[:200], stmt[:3000]))
        if sqlstate in FINDING_STATES or sqlstate is None:
            with self.findings['lock']:
                self.findings['list'].append((self.name, sqlstate, msg, list(self.log) + [stmt]))

    def execute(self, sql, fetch=True):
        """Run one statement; returns its rows, or None when it failed.
        Raises Lost when the connection is gone."""
        self.statements += 1
        try:
            cur = self.conn.execute(sql)
            rows = cur.fetchall() if fetch and cur.description else []
            self.states['00000'] = self.states.get('00000', 0) + 1
            self.log.append(sql)
            if self.trace:
                self.trace.write('%s;\n' % sql[:3000])
            return rows
        except psycopg.Error as e:
            st = e.sqlstate
            if self.conn.closed or self.conn.broken:
                self.lost += 1
                self.record(None, 'connection lost: %s' % e, sql)
                raise Lost()
            if st is None:
                # raised in the client (a value it cannot convert): the
                # statement itself ran
                st = 'client'
                if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    st = 'client-aborted'
                self.record(st, str(e), sql)
                self.log.append('-- %s: %s' % (st, sql))
                return []
            if st in FINDING_STATES:
                self.internal += 1
            self.record(st, str(e).splitlines()[0] if str(e) else '', sql)
            self.log.append('-- %s: %s' % (st, sql))
            return None

    def run(self):
        try:
            self.connect()
            while not self.done():
                try:
                    if self.hostile:
                        self.hostile_step()
                    else:
                        self.keep_step()
                except Lost:
                    self.log = []
                    try:
                        self.conn.close()
                    except Exception:
                        pass
                    time.sleep(0.5)
                    self.connect()
        except Exception as e:   # a bug of the generator itself
            import traceback
            self.error = '%s: %s' % (e, traceback.format_exc())
        finally:
            try:
                self.conn.close()
            except Exception:
                pass

    # -- a hostile session ------------------------------------------------

    def one(self):
        """One hostile statement: (sql, must_roll_back)."""
        r = self.r.random()
        if r < 0.55:
            sql, o, rb = self.gen.call()
            return sql, rb, o
        if r < 0.85:
            sql, o = self.gen.dml()
            return sql, False, o
        if r < 0.89:
            return self.gen.session_setting(), False, None
        if r < 0.90:
            # one transaction into every tracked outbox (a prepared one
            # keeps the counts of its first four only)
            return ('SELECT ' + ', '.join(
                "outbox.outbox_enqueue('fz:all', 'chain', '\\x01', outbox => %s)" % lit(o)
                for o in TRACKED), False, None)
        if r < 0.93:
            return 'COPY', False, None
        sql, rb = self.gen.ddl()
        return sql, rb, None

    def harvest(self, sql, o, rows):
        """Ids a claim, an enqueue or an insert returned, minus keep: rows."""
        if not rows or not o or o not in self.pool.ids:
            return
        if not re.search(r'outbox_enqueue|outbox_claim|outbox_ack_claim|RETURNING id', sql):
            return
        ids = []
        for row in rows:
            if not row or not isinstance(row[0], int):
                continue
            if len(row) > 1 and isinstance(row[1], str) and row[1].startswith(KEEP):
                continue
            ids.append(row[0])
        if ids:
            self.pool.add(o, ids)

    def do_copy(self):
        o = self.r.choice(TRACKED + ['scratch.delivery_outbox'])
        sql = ('COPY %s (recipient, kind, payload, delivery_state, delivery_attempts, '
               'delivered_at, acked_at) FROM STDIN' % o)
        rows = self.gen.copy_rows()
        self.statements += 1
        try:
            with self.conn.cursor() as cur:
                with cur.copy(sql) as cp:
                    for row in rows:
                        cp.write_row(row)
            self.states['00000'] = self.states.get('00000', 0) + 1
            self.log.append('%s -- %r' % (sql, rows))
            return True
        except psycopg.Error as e:
            st = e.sqlstate or 'client'
            if self.conn.closed or self.conn.broken:
                self.lost += 1
                self.record(None, 'connection lost: %s' % e, sql)
                raise Lost()
            if st in FINDING_STATES:
                self.internal += 1
            self.record(st, str(e).splitlines()[0], '%s -- %r' % (sql, rows))
            self.log.append('-- %s: %s' % (st, sql))
            return False

    def statement(self, sql, o):
        if sql == 'COPY':
            return self.do_copy()
        rows = self.execute(sql)
        if rows is not None:
            self.harvest(sql, o, rows)
        return rows is not None

    def hostile_step(self):
        self.log = []
        sql, rb, o = self.one()
        if not rb and self.r.random() < 0.55:
            # autocommit
            self.statement(sql, o)
            return
        # a transaction: some statements, in savepoints or not, then COMMIT,
        # ROLLBACK or PREPARE TRANSACTION and its end
        self.execute(self.r.choice(('BEGIN', 'BEGIN', 'BEGIN ISOLATION LEVEL REPEATABLE READ',
                                    'BEGIN ISOLATION LEVEL SERIALIZABLE')))
        must_rb = rb
        failed = False
        stmts = [(sql, rb, o)] + [self.one() for _ in range(self.r.randint(0, 4))]
        for n, (s, r_b, ob) in enumerate(stmts):
            must_rb = must_rb or r_b
            sp = self.r.random() < 0.5
            if sp:
                self.execute('SAVEPOINT s%d' % n)
            ok = self.statement(s, ob)
            if not ok:
                if sp:
                    self.execute('ROLLBACK TO SAVEPOINT s%d' % n)
                else:
                    failed = True
                    break
            elif sp and self.r.random() < 0.3:
                self.execute('RELEASE SAVEPOINT s%d' % n)
        if must_rb or failed or self.r.random() < 0.3:
            self.execute('ROLLBACK')
        elif self.r.random() < 0.1 and self.user is None:
            gid = 'fz_%s_%d' % (self.name, self.statements)
            if self.execute("PREPARE TRANSACTION '%s'" % gid) is not None:
                self.execute("%s PREPARED '%s'" % (self.r.choice(('COMMIT', 'ROLLBACK')), gid))
        else:
            self.execute('COMMIT')
        if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.execute('ROLLBACK')

    # -- the keep session ---------------------------------------------------

    def keep_step(self):
        """Enqueue keep: rows, or claim and release some; write down which
        ids committed."""
        self.log = []
        o = self.r.choice(TRACKED)
        recipient = KEEP + str(self.r.randint(0, 4))
        if self.r.random() < 0.6:
            n = self.r.randint(1, 4)
            mode = self.r.choice(('auto', 'commit', 'rollback', 'prepare'))
            if mode != 'auto':
                self.execute('BEGIN')
            got = []
            failed = False
            for _ in range(n):
                self.gen.counter += 1
                payload = 'keep %d %d' % (id(self) % 1000, self.gen.counter)
                nb = self.r.choice(('NULL', 'NULL', "now() + '1 second'"))
                key = self.r.choice(('NULL', lit('keep-%d' % self.gen.counter)))
                if self.r.random() < 0.5:
                    sql = ("SELECT outbox.outbox_enqueue(%s, 'work', convert_to(%s, 'UTF8'), "
                           "'tenant0', %s, NULL, %s, outbox => %s)" %
                           (lit(recipient), lit(payload), nb, key, lit(o)))
                else:
                    sql = ("SELECT * FROM outbox.outbox_enqueue_batch(ARRAY[%s], ARRAY['work'], "
                           "ARRAY[convert_to(%s, 'UTF8')], NULL, ARRAY[%s]::timestamptz[], "
                           "NULL, ARRAY[%s]::text[], outbox => %s)" %
                           (lit(recipient), lit(payload), nb, key, lit(o)))
                rows = self.execute(sql)
                if rows is None:
                    failed = True
                    break
                got.append((rows[0][0], recipient, payload))
            # (in autocommit each enqueue that returned committed; in a
            # transaction, COMMIT and PREPARE TRANSACTION of one that had
            # an error roll it back without an error of their own)
            if mode == 'auto':
                committed = True
            elif mode == 'commit':
                committed = self.execute('COMMIT') is not None and not failed
            elif mode == 'rollback':
                self.execute('ROLLBACK')
                committed = False
            else:
                gid = 'keep_%d' % self.statements
                committed = (self.execute("PREPARE TRANSACTION '%s'" % gid) is not None and
                             not failed and
                             self.execute("COMMIT PREPARED '%s'" % gid) is not None)
                if failed is False and not committed:
                    # the prepared transaction may be there still
                    self.execute("ROLLBACK PREPARED '%s'" % gid)
            if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self.execute('ROLLBACK')
                committed = False
            for i, rec, pl in got:
                (self.keep if committed else self.rolled_back).setdefault(o, {})[i] = (rec, pl)
        else:
            rows = self.execute('SELECT id FROM outbox.outbox_claim(%d, %s, outbox => %s)' %
                                (self.r.randint(1, 5), lit(recipient), lit(o)))
            if rows and self.r.random() < 0.7:
                self.execute("SELECT outbox.outbox_release(ARRAY[%s]::bigint[], %s, %s, "
                             "outbox => %s)" %
                             (', '.join(str(x[0]) for x in rows),
                              self.r.choice(('NULL', "'0'", "'500 ms'")),
                              self.r.choice(('NULL', "'keep: HTTP 503'")), lit(o)))
        time.sleep(0.005)


class Lost(Exception):
    pass


def cmd_run(a):
    deadline = time.monotonic() + a.seconds
    pool = Pool()
    findings = {'lock': threading.Lock(), 'list': []}
    # seed the pool with the set-up's rows (never keep: rows, none yet)
    with psycopg.connect(autocommit=True) as c:
        for o in TRACKED + ['scratch.delivery_outbox']:
            pool.add(o, [r[0] for r in c.execute(
                'SELECT id FROM %s ORDER BY random() LIMIT 200' % o)])
    budget = a.statements // (a.sessions + 1) if a.statements else 0
    users = [None, 'fuzz_relay', None, 'fuzz_app']
    sessions = [Session('hostile%d' % i, users[i % len(users)], a.seed * 100 + i, deadline,
                        budget, pool, findings) for i in range(a.sessions)]
    keep = Session('keep', 'fuzz_app', a.seed * 100 + 99, deadline, budget, pool, findings,
                   hostile=False)
    sessions.append(keep)
    t0 = time.monotonic()
    for s in sessions:
        if a.trace:
            s.trace = open('%s-%s.sql' % (a.trace, s.name), 'w')
        s.start()
    for s in sessions:
        s.join(a.seconds + 120)
    took = time.monotonic() - t0
    total = sum(s.statements for s in sessions)
    states = {}
    for s in sessions:
        for k, v in s.states.items():
            states[k] = states.get(k, 0) + v
    print('generator: %d statements in %.0f s from %d sessions (seed %d)' %
          (total, took, len(sessions), a.seed))
    print('SQLSTATEs: ' + ', '.join('%s %d' % kv for kv in sorted(states.items(),
                                                                   key=lambda kv: -kv[1])))
    alive = [s.name for s in sessions if s.is_alive()]
    errors = [(s.name, s.error) for s in sessions if s.error]
    if alive or errors:
        for name, err in errors:
            print('%s: %s' % (name, err))
        print('not ok - generator: every session ended cleanly (still running: %s, failed: %s)'
              % (alive, [n for n, _ in errors]))
    else:
        print('ok - generator: %d statements, %d sessions ended cleanly' % (total, len(sessions)))
    internal = [f for f in findings['list'] if f[1] is not None]
    lost = [f for f in findings['list'] if f[1] is None]
    with open(a.findings, 'w') as out:
        for name, st, msg, stmts in findings['list']:
            out.write('-- %s: %s %s\n' % (name, st or 'connection lost', msg))
            for s in stmts:
                out.write(s[:2000] + ';\n')
            out.write('\n')
    for name, st, msg, stmts in internal[:10]:
        print('%s %s: %s -- %s' % (name, st, msg, stmts[-1][:300]))
    print(('ok' if not internal else 'not ok') +
          ' - generator: no XX000-class error returned (%d)' % len(internal))
    for name, st, msg, stmts in lost[:10]:
        print('%s: %s -- %s' % (name, msg, stmts[-1][:300]))
    print(('ok' if not lost else 'not ok') +
          ' - generator: no connection lost (%d)' % len(lost))
    nkeep = sum(len(v) for v in keep.keep.values())
    with open(a.state, 'w') as out:
        json.dump({'keep': {o: {str(k): v for k, v in d.items()} for o, d in keep.keep.items()},
                   'rolled_back': {o: {str(k): v for k, v in d.items()}
                                   for o, d in keep.rolled_back.items()}}, out)
    print(('ok' if nkeep > 0 else 'not ok') +
          ' - generator: the tracked session committed %d keep: rows' % nkeep)


INVARIANTS = """
SELECT coalesce(sum(CASE WHEN NOT ok THEN 1 END), 0), count(*),
       (array_agg(id ORDER BY id) FILTER (WHERE NOT ok))[1:10]
  FROM (SELECT id, coalesce(CASE delivery_state
                 WHEN 'pending' THEN acked_at IS NULL AND delivery_attempts >= 0
                                     AND (delivery_attempts = 0) = (delivered_at IS NULL)
                 WHEN 'delivered' THEN delivered_at IS NOT NULL AND delivery_attempts >= 1
                                       AND acked_at IS NULL
                 WHEN 'acked' THEN acked_at IS NOT NULL AND delivery_attempts >= 0
                 ELSE false END, false) AS ok
          FROM %s) r
"""


def cmd_check(a):
    with open(a.state) as f:
        state = json.load(f)
    c = psycopg.connect(autocommit=True)
    c.execute("SET statement_timeout = '120s'")
    # the worker is still there
    pids = c.execute("SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity "
                     "WHERE backend_type LIKE 'delivery_outbox%'").fetchone()[0]
    print(('ok' if pids else 'not ok') +
          ' - the worker is still running (pid %s; at the start %s)' % (pids, a.worker_pids))
    # prepared transactions left behind by the generator would hold locks
    for (gid,) in c.execute("SELECT gid FROM pg_prepared_xacts").fetchall():
        c.execute("ROLLBACK PREPARED %s" % lit(gid))
    c.execute('BEGIN ISOLATION LEVEL REPEATABLE READ')
    outboxes = c.execute(
        "SELECT outbox::text, dead_table::text, partition_rows IS NOT NULL "
        "FROM outbox.delivery_outbox_tables ORDER BY 1").fetchall()
    names = [o for o, _, _ in outboxes]
    missing = [o for o in TRACKED if o not in names]
    print(('ok' if not missing else 'not ok') +
          ' - every tracked outbox is still an outbox (%d outboxes; missing: %s)' %
          (len(outboxes), missing))
    # the registry names only tables that exist, and each outbox has its
    # four triggers, enabled always
    orphans = c.execute("SELECT count(*) FROM outbox.delivery_outbox_registry r "
                        "WHERE NOT EXISTS (SELECT FROM pg_class WHERE oid = r.outbox)").fetchone()[0]
    print(('ok' if orphans == 0 else 'not ok') +
          ' - no registry row outlives its table (%d)' % orphans)
    bad_trg = c.execute("""
        SELECT string_agg(t.outbox::text, ', ') FROM outbox.delivery_outbox_tables t
         WHERE (SELECT count(*) FROM pg_trigger g WHERE g.tgrelid = t.outbox
                   AND g.tgname IN ('zz_delivery_outbox_state_guard', 'zz_delivery_outbox_inserted',
                                    'zz_delivery_outbox_insert_started',
                                    'zz_delivery_outbox_insert_ended')
                   AND g.tgenabled = 'A') <> 4""").fetchone()[0]
    print(('ok' if not bad_trg else 'not ok') +
          ' - every outbox has its four triggers, enabled always (wrong: %s)' % bad_trg)
    # the state invariants, on every outbox
    for o, dead, _ in outboxes:
        bad, n, ids = c.execute(INVARIANTS % o).fetchone()
        print(('ok' if bad == 0 else 'not ok') +
              ' - state invariants on %s (%d rows%s)' % (o, n, '' if not bad else
                                                         '; %d break them: %s' % (bad, ids)))
    # outbox_stats agrees with the rows (same snapshot)
    wrong = []
    for o, dead, _ in outboxes:
        st = c.execute('SELECT pending, delivered, acked, dead FROM outbox.outbox_stats(%s)'
                       % lit(o)).fetchone()
        cnt = c.execute("SELECT count(*) FILTER (WHERE delivery_state = 'pending'), "
                        "count(*) FILTER (WHERE delivery_state = 'delivered'), "
                        "count(*) FILTER (WHERE delivery_state = 'acked'), "
                        "(SELECT count(*) FROM %s) FROM %s" % (dead, o)).fetchone()
        if tuple(st) != tuple(cnt):
            wrong.append('%s: stats %s, rows %s' % (o, tuple(st), tuple(cnt)))
    print(('ok' if not wrong else 'not ok') +
          ' - outbox_stats agrees with the rows on every outbox%s' %
          ('' if not wrong else ': ' + '; '.join(wrong)))
    # no committed keep: row lost, none duplicated or changed, no phantom
    lost, dup, changed, phantom, total, dead_n = [], [], [], [], 0, 0
    for o in TRACKED:
        rows = {}
        for src in (o, o + '_dead'):
            for i, rec, pl in c.execute(
                    "SELECT id, recipient, convert_from(payload, 'UTF8') FROM %s "
                    "WHERE recipient LIKE 'keep:%%'" % src):
                if i in rows:
                    dup.append('%s %d' % (o, i))
                rows[i] = (rec, pl)
                if src != o:
                    dead_n += 1
        want = {int(k): tuple(v) for k, v in state['keep'].get(o, {}).items()}
        total += len(want)
        for i, v in want.items():
            if i not in rows:
                lost.append('%s %d' % (o, i))
            elif rows[i] != v:
                changed.append('%s %d: %s, want %s' % (o, i, rows[i], v))
        for i in rows:
            if i not in want:
                phantom.append('%s %d' % (o, i))
    print(('ok' if not lost else 'not ok') +
          ' - no committed keep: row lost (%d rows, %d of them dead letters%s)' %
          (total, dead_n, '' if not lost else '; lost: %s' % lost[:10]))
    print(('ok' if not (dup or changed) else 'not ok') +
          ' - every keep: row once, its recipient and payload unchanged%s' %
          ('' if not (dup or changed) else ': %s %s' % (dup[:5], changed[:5])))
    nrb = sum(len(v) for v in state['rolled_back'].values())
    print(('ok' if not phantom else 'not ok') +
          ' - no keep: row that was not committed (%d rolled back%s)' %
          (nrb, '' if not phantom else '; found: %s' % phantom[:10]))
    c.execute('COMMIT')
    # every index of every outbox and dead-letter table (and partition)
    if c.execute("SELECT count(*) FROM pg_extension WHERE extname = 'amcheck'").fetchone()[0]:
        idx = c.execute("""
            SELECT i.indexrelid::regclass::text FROM pg_index i
              JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
             WHERE a.amname = 'btree' AND c.relkind = 'i'
               AND i.indrelid IN (SELECT outbox FROM outbox.delivery_outbox_tables
                                  UNION SELECT dead_table FROM outbox.delivery_outbox_tables
                                  UNION SELECT inhrelid FROM pg_inherits
                                         WHERE inhparent IN (SELECT outbox FROM
                                                             outbox.delivery_outbox_tables))""").fetchall()
        bad = []
        for (ix,) in idx:
            try:
                c.execute('SELECT bt_index_check(%s::regclass, true)' % lit(ix))
            except psycopg.Error as e:
                bad.append('%s: %s' % (ix, e))
        print(('ok' if not bad else 'not ok') +
              ' - amcheck: %d btree indexes of the outboxes are sound%s' %
              (len(idx), '' if not bad else ': %s' % bad[:5]))
    else:
        print('ok # skip amcheck is not available')
    exp = c.execute("SELECT string_agg(o || ' ' || n, ', ') FROM (SELECT t.outbox::text o, "
                    "(SELECT count(*) FROM outbox.delivery_outbox_activity a "
                    " WHERE a.outbox = t.outbox) n FROM outbox.delivery_outbox_tables t) x").fetchone()[0]
    print('activity rows per outbox: %s' % exp)
    c.close()


SIGNAL = re.compile(r'terminated by signal|was terminated by exception|PANIC:|TRAP:|'
                    r'terminating any other active server processes|'
                    r'all server processes terminated; reinitializing|'
                    r'database system was interrupted|server process .* was terminated')
ERRLINE = re.compile(r'^\S+ \S+ \S+ \[(\d+)\] (XX00[0-2]) (?:ERROR|FATAL):  (?:XX00[0-2]: )?(.*)')
OURS = re.compile(r'(?:delivery_outbox|outbox_\w+)\.c:\d+')


def cmd_log(a):
    died, ours, core = [], [], {}
    lines = open(a.log, errors='replace').read().splitlines()
    for n, line in enumerate(lines):
        if SIGNAL.search(line):
            died.append(line)
        m = ERRLINE.match(line)
        if not m:
            continue
        loc, stmt = '', ''
        for follow in lines[n + 1:n + 8]:
            if 'LOCATION:' in follow and not loc:
                loc = follow.split('LOCATION:', 1)[1].strip()
            elif 'STATEMENT:' in follow and not stmt:
                stmt = follow.split('STATEMENT:', 1)[1].strip()
            elif ERRLINE.match(follow):
                break
        if OURS.search(loc):
            ours.append('%s %s at %s: %s' % (m.group(2), m.group(3), loc, stmt[:400]))
        else:
            key = '%s at %s' % (m.group(3)[:120], loc)
            core.setdefault(key, [0, stmt[:300]])[0] += 1
    for line in died[:10]:
        print(line)
    print(('ok' if not died else 'not ok') +
          ' - server log: no backend terminated by a signal, no PANIC, no assertion (%d)' % len(died))
    for line in ours[:10]:
        print(line)
    print(('ok' if not ours else 'not ok') +
          ' - server log: no XX000-class error raised in the extension (%d)' % len(ours))
    if core:
        print('XX000-class errors raised in PostgreSQL itself (random SQL, not the extension):')
        for key, (cnt, stmt) in sorted(core.items(), key=lambda kv: -kv[1][0])[:15]:
            print('  %dx %s%s' % (cnt, key, ' -- ' + stmt if 'outbox' in stmt else ''))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest='cmd', required=True)
    r = sub.add_parser('run')
    r.add_argument('--seconds', type=float, default=45)
    r.add_argument('--statements', type=int, default=0)
    r.add_argument('--sessions', type=int, default=3)
    r.add_argument('--seed', type=int, default=1)
    r.add_argument('--state', required=True)
    r.add_argument('--findings', required=True)
    r.add_argument('--trace', help='write every statement to TRACE-<session>.sql')
    c = sub.add_parser('check')
    c.add_argument('--state', required=True)
    c.add_argument('--worker-pids', default='')
    lg = sub.add_parser('log')
    lg.add_argument('--log', required=True)
    a = p.parse_args()
    {'run': cmd_run, 'check': cmd_check, 'log': cmd_log}[a.cmd](a)


if __name__ == '__main__':
    sys.exit(main())
