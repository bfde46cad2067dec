
# Copyright (c) 2026, delivery_outbox developers

# t/020_partitions.pl
#
# Partitioned outboxes (1.2) with the library preloaded and a worker
# serving "postgres" (sweep_interval 200 ms, delivery_outbox.retain_acked
# -1, so only an outbox's own retain_acked lets the worker remove rows):
#
# - the worker makes partitions ahead of the sequence as rows arrive by
#   plain INSERT (which never makes one itself): after its sweep the
#   partition of the next id and the one after it exist, and no more;
# - with retain_acked set by outbox_configure, the worker drops a
#   partition whose ids are all drawn and whose rows are all acked (its
#   dead letters gone to the dead-letter table), not before its newest ack
#   is retain_acked old, and never one holding an open row; it deletes no
#   acked row of a partition it keeps; the outbox's purged counter counts
#   the dropped rows;
# - a partition that qualifies while a transaction holds the outbox is
#   left for a later sweep, and meanwhile producers are not held up by the
#   waiting drop (each enqueue well within a second); once the transaction
#   ends the worker drops it;
# - retain_acked of an ordinary outbox is what the worker's purge of it
#   uses too, and reset (a negative interval) hands it back to the GUC.
#
# pg_dump + pg_restore (into a new database, "src" -> "dst", no worker
# there) of a partitioned outbox with rows in every state (pending with a
# dedup key, delivered, acked, released with an error, a dead letter) and a
# partition dropped by outbox_purge: every row (all 14 columns, in its
# partition), every partition with its bounds and triggers, the dead
# letters, the sequence position, partition_rows and retain_acked come
# back; the partitions are still no members of the extension; afterwards
# enqueue (making the next partition), claim, ack, the dedup key and the
# state guard work.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $node = outbox_node(
	'main',
	preload => 1,
	conf => q{
delivery_outbox.database = 'postgres'
delivery_outbox.sweep_interval = '200ms'
delivery_outbox.reclaim_after = -1
delivery_outbox.retain_acked = -1
},
	databases => ['src'],
	extension => [ 'postgres', 'src' ]);
wait_for_worker($node);

# The partitions of $tbl in $db, in id order, comma-separated.
sub parts
{
	my ($db, $tbl) = @_;
	return $node->safe_psql(
		$db, qq{
SELECT string_agg(c.relname, ',' ORDER BY substring(c.relname FROM '\\d+\$')::int)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = '$tbl'::regclass});
}

# The same with bounds and owners, one line each.
sub parts_bounds
{
	my ($db, $tbl) = @_;
	return $node->safe_psql(
		$db, qq{
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), pg_get_userbyid(c.relowner)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = '$tbl'::regclass
 ORDER BY substring(c.relname FROM '\\d+\$')::int});
}

# The server's clock, as a timestamptz text.
sub server_now
{
	return $node->safe_psql('postgres', 'SELECT clock_timestamp()');
}

# Wait for two whole sweeps that began after now.  (A sweep's partition
# upkeep comes after its other steps, so the worker's activity at the end of
# a sweep is "delivery_outbox: partitions" here, not the "delivery_outbox:
# sweep" OutboxTest's wait_for_sweep waits for.)
sub two_sweeps
{
	for (1 .. 2)
	{
		my $t = server_now();
		$node->poll_query_until(
			'postgres', qq{
SELECT state = 'idle' AND query = 'delivery_outbox: partitions'
       AND state_change > '$t'::timestamptz
  FROM pg_stat_activity WHERE backend_type = 'delivery_outbox sweeper'})
		  or die "no sweep after $t";
	}
}

###########################################################################
# Part 1: the worker makes partitions ahead of plain INSERTs
###########################################################################

$node->safe_psql(
	'postgres', q{
CREATE SCHEMA w;
SELECT outbox_create('w', 'q', partition_rows => 10);
});
is(parts('postgres', 'w.q'), 'q_p0,q_p1',
	'outbox_create makes the partition of id 1 and the one after it');

my $insert = sub {
	my ($n, $recipient) = @_;
	$node->safe_psql(
		'postgres', qq{
INSERT INTO w.q (recipient, kind, payload)
SELECT '$recipient', 'work', '\\x01' FROM generate_series(1, $n)});
};

$insert->(10, 'agent:a');    # ids 1-10; next id 11, in p1
ok( $node->poll_query_until(
		'postgres', "SELECT to_regclass('w.q_p2') IS NOT NULL"),
	'the worker makes p2 once the next id is in p1');
$insert->(10, 'agent:b');    # ids 11-20; next id 21, in p2
ok( $node->poll_query_until(
		'postgres', "SELECT to_regclass('w.q_p3') IS NOT NULL"),
	'... and p3 once the next id is in p2');
$insert->(15, 'agent:c');    # ids 21-35; next id 36, in p3
ok( $node->poll_query_until(
		'postgres', "SELECT to_regclass('w.q_p4') IS NOT NULL"),
	'... and p4 once the next id is in p3');
two_sweeps();
is( parts_bounds('postgres', 'w.q'),
	"q_p0|FOR VALUES FROM ('1') TO ('11')|postgres\n"
	  . "q_p1|FOR VALUES FROM ('11') TO ('21')|postgres\n"
	  . "q_p2|FOR VALUES FROM ('21') TO ('31')|postgres\n"
	  . "q_p3|FOR VALUES FROM ('31') TO ('41')|postgres\n"
	  . "q_p4|FOR VALUES FROM ('41') TO ('51')|postgres",
	'... and no more: p0-p4, 10 ids each, owned by the outbox\'s owner');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(format('%s:%s', tableoid::regclass, count), ',' ORDER BY tableoid::regclass::text)
  FROM (SELECT tableoid, count(*) FROM w.q GROUP BY 1) s}),
	'w.q_p0:10,w.q_p1:10,w.q_p2:10,w.q_p3:5',
	'every inserted row is in its partition');

###########################################################################
# Part 2: the worker drops old fully acked partitions
###########################################################################

$node->safe_psql('postgres',
	"SELECT outbox_configure('w.q', retain_acked => '3 seconds')");
is( $node->safe_psql(
		'postgres',
		"SELECT retain_acked, partition_rows FROM delivery_outbox_tables WHERE outbox = 'w.q'::regclass"
	),
	'00:00:03|10',
	'retain_acked and partition_rows in delivery_outbox_tables');

# p0 all acked; p1 acked but for id 15, left delivered (open)
$node->safe_psql(
	'postgres', q{
SELECT count(*) FROM outbox_claim(20, outbox => 'w.q');
SELECT outbox_ack(ARRAY(SELECT g FROM generate_series(1, 20) g WHERE g <> 15)::bigint[],
                  outbox => 'w.q');
});
is(parts('postgres', 'w.q'), 'q_p0,q_p1,q_p2,q_p3,q_p4',
	'right after the acks (retain_acked 3 s) p0 is still there');
ok( $node->poll_query_until(
		'postgres', "SELECT to_regclass('w.q_p0') IS NULL"),
	'the worker drops p0 once its acks are older than retain_acked');
is( $node->safe_psql(
		'postgres', q{
SELECT clock_timestamp() - max(acked_at) >= interval '3 seconds' FROM w.q_p1}),
	't', '... not before (p1\'s acks, made with p0\'s, are 3 s old by now)');
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(format('%s:%s', delivery_state, count), ',' ORDER BY delivery_state)
  FROM (SELECT delivery_state, count(*) FROM w.q_p1 GROUP BY 1) s}),
	'acked:9,delivered:1',
	'p1, holding a delivered row, is kept, and its acked rows are not deleted');
is(parts('postgres', 'w.q'), 'q_p1,q_p2,q_p3,q_p4',
	'the other partitions are all kept');
ok( $node->poll_query_until(
		'postgres', q{
SELECT purged = 10 FROM delivery_outbox_activity WHERE outbox = 'w.q'::regclass}),
	'the outbox\'s purged counter counts the 10 rows of the dropped partition');

# p1 qualifies once 15 is a dead letter, but a transaction holds the
# outbox: the worker leaves p1 for later, and producers go on
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe('SELECT count(*) FROM w.q');
is( $node->safe_psql(
		'postgres',
		"SELECT outbox_reject(ARRAY[15]::bigint[], 'never', outbox => 'w.q')"),
	'1', 'id 15 rejected: p1 holds acked rows only');
$node->poll_query_until(
	'postgres', q{
SELECT clock_timestamp() > max(acked_at) + interval '3.5 seconds' FROM w.q_p1})
  or die 'p1\'s acks never grew old';
two_sweeps();
is(parts('postgres', 'w.q'), 'q_p1,q_p2,q_p3,q_p4',
	'while a transaction holds the outbox, the worker leaves p1 in place');
my $slow = 0;
my $failed = 0;
for my $i (1 .. 20)
{
	my $t = time;
	my ($ret) = $node->psql(
		'postgres', q{
SET statement_timeout = '2s';
SELECT outbox_enqueue('agent:late', 'work', '\x02', outbox => 'w.q')},
		on_error_stop => 1);
	$failed++ if $ret != 0;
	$slow++ if time - $t > 1;
	usleep(50_000);
}
is($failed, 0, 'producers enqueue meanwhile (20 enqueues, none failed)');
is($slow, 0, '... none held up by the waiting drop for a second');
# (the 20 rows, ids 36-55, made p5 and p6 meanwhile)
is(parts('postgres', 'w.q'), 'q_p1,q_p2,q_p3,q_p4,q_p5,q_p6',
	'... and p1 is still there');
$holder->query_safe('COMMIT');
$holder->quit;
ok( $node->poll_query_until(
		'postgres', "SELECT to_regclass('w.q_p1') IS NULL"),
	'once the transaction ended, the worker drops p1');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(id || ':' || dead_reason, ',') FROM w.q_dead"),
	'15:rejected', '... its dead letter stays in the dead-letter table');
is(parts('postgres', 'w.q'), 'q_p2,q_p3,q_p4,q_p5,q_p6',
	'p2-p4 (open rows), p5 (open rows, receiving ids) and p6 (ahead) are kept');

# retain_acked of an ordinary outbox: the worker's purge uses it
$node->safe_psql(
	'postgres', q{
SELECT outbox_create('w', 'plain');
SELECT outbox_enqueue('agent:p', 'work', '\x03', outbox => 'w.plain') FROM generate_series(1, 2);
SELECT count(*) FROM outbox_claim(10, outbox => 'w.plain');
SELECT outbox_ack(ARRAY[1, 2]::bigint[], outbox => 'w.plain');
SELECT outbox_configure('w.plain', retain_acked => '1 second');
});
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 0 FROM w.plain WHERE delivery_state = 'acked'"),
	'an ordinary outbox\'s retain_acked makes the worker purge its acked rows');
$node->safe_psql(
	'postgres', q{
SELECT outbox_configure('w.plain', retain_acked => '-1 second');
SELECT outbox_enqueue('agent:p', 'work', '\x04', outbox => 'w.plain');
SELECT count(*) FROM outbox_claim(10, outbox => 'w.plain');
SELECT outbox_ack(3, outbox => 'w.plain');
});
is( $node->safe_psql(
		'postgres',
		"SELECT retain_acked IS NULL FROM delivery_outbox_tables WHERE outbox = 'w.plain'::regclass"
	),
	't', 'a negative retain_acked resets it to NULL');
$node->poll_query_until(
	'postgres', q{
SELECT clock_timestamp() > max(acked_at) + interval '1.5 seconds' FROM w.plain})
  or die 'the ack never grew old';
two_sweeps();
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM w.plain WHERE delivery_state = 'acked'"),
	'1', '... and then the GUC (-1) applies: the acked row stays');

###########################################################################
# Part 3: pg_dump + pg_restore
###########################################################################

$node->safe_psql(
	'src', q{
CREATE SCHEMA d;
SELECT outbox_create('d', 'q', partition_rows => 3);
SELECT outbox_configure('d.q', retain_acked => '7 days', max_attempts => 5);
-- ids 1-3 acked and their partition p0 dropped by outbox_purge
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:old', 'agent:old', 'agent:old'],
                                          ARRAY['work', 'work', 'work'],
                                          ARRAY['\x01', '\x02', '\x03']::bytea[],
                                          outbox => 'd.q');
SELECT outbox_ack(array_agg(id), outbox => 'd.q')
  FROM outbox_claim(10, 'agent:old', outbox => 'd.q');
});
is($node->safe_psql('src', "SELECT outbox_purge('0 seconds', 'd.q')"),
	'3', 'src: outbox_purge drops p0 with its three acked rows');
$node->safe_psql(
	'src', q{
-- 4 pending with a dedup key, 5 delivered, 6 acked (p1)
SELECT outbox_enqueue('agent:pending', 'work', '\x04', 'tenant-1', dedup_key => 'k-4',
                      outbox => 'd.q');
SELECT outbox_enqueue('agent:delivered', 'work', '\x05', outbox => 'd.q');
SELECT count(*) FROM outbox_claim(1, 'agent:delivered', outbox => 'd.q');
SELECT outbox_enqueue('agent:acked', 'event', '\x06', outbox => 'd.q');
SELECT outbox_ack(id, outbox => 'd.q') FROM outbox_claim(1, 'agent:acked', outbox => 'd.q');
-- 7 a dead letter, 8 pending, 9 released with an error (p2)
SELECT outbox_enqueue('agent:dead', 'work', '\x07', outbox => 'd.q');
SELECT outbox_reject(array_agg(id), 'refused', outbox => 'd.q')
  FROM outbox_claim(1, 'agent:dead', outbox => 'd.q');
SELECT outbox_enqueue('agent:pending', 'work', '\x08', outbox => 'd.q');
SELECT outbox_enqueue('agent:released', 'work', '\x09', outbox => 'd.q');
SELECT outbox_release(array_agg(id), retry_after => '0', error => 'busy', outbox => 'd.q')
  FROM outbox_claim(1, 'agent:released', outbox => 'd.q');
-- 10 delivered, 11 acked (p3); the next id, 12, is in p3
SELECT outbox_enqueue('agent:delivered', 'work', '\x0a', outbox => 'd.q');
SELECT count(*) FROM outbox_claim(1, 'agent:delivered', outbox => 'd.q');
SELECT outbox_enqueue('agent:acked', 'work', '\x0b', outbox => 'd.q');
SELECT outbox_ack(id, outbox => 'd.q') FROM outbox_claim(1, 'agent:acked', outbox => 'd.q');
});

my $cols =
  'tableoid::regclass AS part, id, recipient, kind, tenant_id, payload, delivery_state, '
  . 'delivery_attempts, created_at, delivered_at, acked_at, not_before, expires_at, '
  . 'dedup_key, last_error';
my $rows_sql = "SELECT $cols FROM d.q ORDER BY id";
my $dead_sql = 'SELECT * FROM d.q_dead ORDER BY id';
my $seq_sql = q{
SELECT s.last_value, s.is_called
  FROM d.q_id_seq s};
my $seq_name = $node->safe_psql('src', "SELECT pg_get_serial_sequence('d.q', 'id')");
is($seq_name, 'd.q_id_seq', 'the identity sequence of d.q');
my $settings_sql = q{
SELECT outbox, origin, partition_rows, retain_acked, max_attempts, ordered, dead_table
  FROM delivery_outbox_tables WHERE outbox = 'd.q'::regclass};
my $triggers_sql = q{
SELECT c.relname, t.tgname, t.tgenabled
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'd'::regnamespace AND NOT t.tgisinternal
 ORDER BY 1, 2};
my $members_sql = q{
SELECT count(*) FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
 WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'e'
   AND c.relnamespace = 'd'::regnamespace};

my $rows_before = $node->safe_psql('src', $rows_sql);
is( $node->safe_psql(
		'src',
		"SELECT string_agg(format('%s:%s:%s', part, id, delivery_state), ',' ORDER BY id) FROM ($rows_sql) r"
	),
	'd.q_p1:4:pending,d.q_p1:5:delivered,d.q_p1:6:acked,'
	  . 'd.q_p2:8:pending,d.q_p2:9:pending,d.q_p3:10:delivered,d.q_p3:11:acked',
	'src: the rows to dump, each in its partition');
my $parts_before = parts_bounds('src', 'd.q');
is( $parts_before,
	"q_p1|FOR VALUES FROM ('4') TO ('7')|postgres\n"
	  . "q_p2|FOR VALUES FROM ('7') TO ('10')|postgres\n"
	  . "q_p3|FOR VALUES FROM ('10') TO ('13')|postgres\n"
	  . "q_p4|FOR VALUES FROM ('13') TO ('16')|postgres",
	'src: p0 dropped, p1-p3 holding rows, p4 made ahead');
my $dead_before = $node->safe_psql('src', $dead_sql);
is( $node->safe_psql(
		'src', q{SELECT string_agg(id || ':' || dead_reason, ',') FROM d.q_dead}),
	'7:rejected', 'src: one dead letter');
my $seq_before = $node->safe_psql('src', $seq_sql);
is($seq_before, '11|t', 'src: the sequence has drawn 11');
my $settings_before = $node->safe_psql('src', $settings_sql);
is( $settings_before,
	'd.q|created|3|7 days|5|f|d.q_dead',
	'src: partition_rows, retain_acked and the other settings');
my $triggers_before = $node->safe_psql('src', $triggers_sql);
is($node->safe_psql('src', $members_sql), '0',
	'src: no table of the outbox is an extension member');

my $dump = $node->basedir . '/partitions.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'src' ],
	'pg_dump of the database with a partitioned outbox');
$node->safe_psql('postgres', 'CREATE DATABASE dst');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', 'dst', $dump ],
	'pg_restore into a new database');

is($node->safe_psql('dst', $rows_sql), $rows_before,
	'restored: every row, every column, each in its partition');
is(parts_bounds('dst', 'd.q'), $parts_before,
	'restored: the same partitions with the same bounds');
is($node->safe_psql('dst', $dead_sql), $dead_before,
	'restored: the dead letters');
is($node->safe_psql('dst', $seq_sql), $seq_before,
	'restored: the sequence position');
is($node->safe_psql('dst', $settings_sql), $settings_before,
	'restored: partition_rows, retain_acked and the other settings');
is($node->safe_psql('dst', $triggers_sql), $triggers_before,
	'restored: the triggers of the outbox and of every partition');
is($node->safe_psql('dst', $members_sql), '0',
	'restored: no table of the outbox is an extension member');
is( $node->safe_psql(
		'dst', "SELECT relkind FROM pg_class WHERE oid = 'd.q'::regclass"),
	'p', 'restored: the outbox is partitioned');

# the restored outbox works
is( $node->safe_psql(
		'dst', "SELECT outbox_enqueue('agent:after', 'work', '\\x0c', outbox => 'd.q')"),
	'12', 'restored: the next enqueue takes id 12');
is( $node->safe_psql(
		'dst', "SELECT outbox_enqueue('agent:after', 'work', '\\x0d', outbox => 'd.q')"),
	'13', '... and 13, in p4');
is(parts('dst', 'd.q'), 'q_p1,q_p2,q_p3,q_p4,q_p5',
	'... and the enqueue made p5 ahead of the next id 14');
is( $node->safe_psql(
		'dst',
		"SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox_claim(10, 'agent:after', outbox => 'd.q')"
	),
	'12,13',
	'restored: the new rows are claimed');
is( $node->safe_psql(
		'dst', "SELECT outbox_ack(ARRAY[5, 12, 13]::bigint[], outbox => 'd.q')"),
	'3', 'restored: a restored and the new delivered rows are acked');
is( $node->safe_psql(
		'dst', q{
SELECT outbox_enqueue('agent:pending', 'work', '\x0e', dedup_key => 'k-4', outbox => 'd.q')}),
	'4', 'restored: the restored row\'s dedup key is still taken');
is( $node->safe_psql(
		'dst', "SELECT count(*) FROM d.q WHERE dedup_key = 'k-4'"),
	'1', '... and nothing was inserted');
my ($ret, $out, $err) = $node->psql('dst',
	"UPDATE d.q_p2 SET delivery_state = 'acked' WHERE id = 8");
like($err, qr/illegal delivery_state transition from "pending" to "acked"/,
	'restored: the state guard is in force on a partition');
is( $node->safe_psql(
		'dst',
		"SELECT string_agg(format('%s:%s', id, delivery_state), ',' ORDER BY id) FROM d.q"),
	'4:pending,5:acked,6:acked,8:pending,9:pending,10:delivered,11:acked,12:acked,13:acked',
	'restored: the rows after that work');

###########################################################################
# Part 5: whose rights the partition upkeep runs with
###########################################################################

# A partitioned outbox of a non-superuser whose CHECK calls an IMMUTABLE
# function of the owner with a constant (ATTACH PARTITION evaluates it
# while simplifying the new partition's constraints), with a BEFORE INSERT
# trigger and an expression index calling its functions too; each records
# current_user and its pid, and tries to make the owner a superuser.  The
# owner may execute the extension's row trigger functions, which attaching
# copies (without that, attaching as the owner is refused: partitions.sql).
# The test session never queries the outbox with a WHERE clause: the
# planner would simplify the partitions' CHECKs for constraint exclusion,
# running the function as the superuser querying.
$node->safe_psql(
	'postgres', q{
CREATE ROLE regress_towner;
CREATE SCHEMA tw AUTHORIZATION regress_towner;
GRANT EXECUTE ON FUNCTION outbox_create(name, name, text, bigint),
                          outbox_configure(regclass, text, integer, interval, interval, interval, boolean, interval),
                          outbox_state_guard(), outbox_inserted()
   TO regress_towner;
SET ROLE regress_towner;
SELECT outbox_create('tw', 'q', partition_rows => 3);
CREATE TABLE tw.spied (what text, who name, pid int);
CREATE FUNCTION tw.spy(what text) RETURNS boolean
LANGUAGE plpgsql AS $f$
BEGIN
    BEGIN
        EXECUTE format('ALTER ROLE %I SUPERUSER', 'regress_towner');
    EXCEPTION WHEN insufficient_privilege THEN
        NULL;
    END;
    INSERT INTO tw.spied VALUES (what, current_user, pg_catalog.pg_backend_pid());
    RETURN true;
END
$f$;
CREATE FUNCTION tw.ok(x int) RETURNS boolean
IMMUTABLE LANGUAGE plpgsql AS $f$ BEGIN RETURN tw.spy('check'); END $f$;
CREATE FUNCTION tw.idx(x bigint) RETURNS bigint
IMMUTABLE LANGUAGE plpgsql AS $f$ BEGIN PERFORM tw.spy('index'); RETURN x; END $f$;
CREATE FUNCTION tw.trg() RETURNS trigger
LANGUAGE plpgsql AS $f$ BEGIN PERFORM tw.spy('trigger'); RETURN NEW; END $f$;
ALTER TABLE tw.q ADD CONSTRAINT q_ok CHECK (tw.ok(0));
CREATE INDEX q_spy_idx ON tw.q ((tw.idx(id)));
CREATE TRIGGER q_spy BEFORE INSERT ON tw.q FOR EACH ROW EXECUTE FUNCTION tw.trg();
SELECT outbox_configure('tw.q', retain_acked => '0 seconds');
RESET ROLE;
TRUNCATE tw.spied;
});
my $sweeper = worker_pid($node);

# the worker's upkeep: the sequence moved by setval (which runs nothing of
# the table), the worker makes the partitions of ids 31-36
$node->safe_psql('postgres', "SELECT setval(pg_get_serial_sequence('tw.q', 'id'), 30)");
$node->poll_query_until(
	'postgres', q{
SELECT count(*) = 2 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'tw.q'::regclass AND c.relname IN ('q_p10', 'q_p11')})
  or die 'the worker did not make q_p10 and q_p11';
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(DISTINCT who || ':' || what, ',') FROM tw.spied WHERE pid = $sweeper"),
	'regress_towner:check',
	"the worker's ATTACH ran the owner's CHECK function as the owner");

# the maker: an enqueue whose id has no partition yet
$node->safe_psql('postgres', "SELECT setval(pg_get_serial_sequence('tw.q', 'id'), 60)");
my $client_pid = $node->safe_psql(
	'postgres', q{
SELECT outbox_enqueue('agent:t', 'work', '\x01', outbox => 'tw.q');
SELECT pg_backend_pid()});
like(parts('postgres', 'tw.q'), qr/q_p20,q_p21/,
	'the enqueue got the partitions of ids 61-66 made');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(DISTINCT who || ':' || what, ',' ORDER BY who || ':' || what) FROM tw.spied"),
	'regress_towner:check,regress_towner:index,regress_towner:trigger',
	'every function of the owner ran as the owner, never as a superuser');

# the retention drop: everything acked, the worker drops the partitions
# whose ids are all drawn (up to 60, all but q_p20 and q_p21)
$node->safe_psql(
	'postgres', q{
SELECT outbox_ack(array_agg(id), outbox => 'tw.q') FROM outbox_claim(10, outbox => 'tw.q')});
$node->poll_query_until('postgres', q{
SELECT string_agg(c.relname, ',' ORDER BY c.relname) = 'q_p20,q_p21'
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'tw.q'::regclass})
  or die 'the worker did not drop the drawn partitions';
pass('the worker dropped the partitions of the drawn ids as their owner');
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM tw.spied WHERE who <> 'regress_towner'"),
	'0', 'nothing of the owner ran as another role');
is( $node->safe_psql(
		'postgres', "SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_towner'"),
	'f', 'the owner did not become a superuser');

###########################################################################
# Part 6: a maker stopped by SIGTERM; a burst after a failing maker
###########################################################################

# (the sequence moves past the partitions only once the lock is held: the
# worker's upkeep, which takes it without waiting, cannot make the
# partition first and leave the maker nothing to do)
$node->safe_psql(
	'postgres', q{
CREATE SCHEMA km;
SELECT outbox_create('km', 'q', partition_rows => 1000);
});
my $log_offset = -s $node->logfile;
$holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; LOCK TABLE km.q IN SHARE UPDATE EXCLUSIVE MODE;');
$node->safe_psql('postgres',
	"SELECT setval(pg_get_serial_sequence('km.q', 'id'), 5000)");
my $producer = $node->background_psql('postgres');
$producer->query_until(qr/started/, q{
\echo started
SELECT outbox_enqueue('agent:k', 'work', '\x01', outbox => 'km.q') AS id;
});
# the maker waits for the holder's lock (2 s at most): terminate it there
ok( $node->poll_query_until(
		'postgres', q{
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE backend_type = 'delivery_outbox partition maker' AND wait_event_type = 'Lock'}),
	'the partition maker, waiting for a lock, is terminated')
  or diag($node->safe_psql('postgres',
	'SELECT pid, backend_type, wait_event_type, wait_event, left(query, 60) FROM pg_stat_activity'));
$holder->query_safe('COMMIT');
$producer->query_safe('SELECT 1 AS after');
is( $node->safe_psql(
		'postgres', "SELECT string_agg(id::text, ',') FROM km.q"),
	'5001', 'the producer made the partition itself, its row went in');
$producer->quit;
$holder->quit;
ok( $node->log_contains(
		qr/terminating background worker "delivery_outbox partition maker" due to administrator command/,
		$log_offset),
	'the maker exited on SIGTERM');
ok(!$node->log_contains(qr/PANIC|(?:server process|client backend|background worker) .* was terminated by signal/, $log_offset),
	'no PANIC, no crash');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server keeps running');

# A lasting failure: an event trigger refuses every CREATE TABLE.  The
# first enqueue that misses the partition ahead starts a maker, which
# fails; the next ones of the session start none for a while.
$node->safe_psql(
	'postgres', q{
CREATE FUNCTION regress_no_tables() RETURNS event_trigger LANGUAGE plpgsql AS
$f$ BEGIN RAISE EXCEPTION 'no new tables'; END $f$;
CREATE EVENT TRIGGER regress_no_tables ON ddl_command_start WHEN TAG IN ('CREATE TABLE')
  EXECUTE FUNCTION regress_no_tables();
SELECT setval(pg_get_serial_sequence('km.q', 'id'), 6100);
});
$log_offset = -s $node->logfile;
my $burst = $node->safe_psql(
	'postgres', q{
SELECT count(*) FROM generate_series(1, 20) i,
       LATERAL outbox_enqueue('agent:b', 'work', '\x01', outbox => 'km.q') e},
	on_error_die => 1);
is($burst, '20', 'a burst of 20 enqueues, their partition there, the one ahead not');
# each maker and the session warn once per failure (the sweeper too, at
# each sweep: its lines are left out); clients' lines carry the
# application_name, the makers' do not
my $log = slurp_file($node->logfile, $log_offset);
my $sweeper_now = worker_pid($node);
my @makers = grep { $_ ne $sweeper_now }
  $log =~ /\[(\d+)\] WARNING:  could not make partition \d+ of outbox km\.q: no new tables/g;
is(scalar(@makers), 1, 'one failing maker for the burst, not one per enqueue');
my @session = $log =~ /\[\d+\] 020_partitions\.pl WARNING:  could not make partition \d+ of outbox km\.q/g;
is(scalar(@session), 1, '... and the session tried the partition ahead once');
$node->safe_psql('postgres', 'DROP EVENT TRIGGER regress_no_tables');

$node->stop;
done_testing();
