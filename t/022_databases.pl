
# Copyright (c) 2026, delivery_outbox developers

# t/022_databases.pl
#
# Databases come and go (issue 22): with the library preloaded and the
# databases "app" and "other" served (server-wide notify = deferred,
# sweep_interval = 200ms, reclaim_after = 1s), the commands that need a
# database to themselves succeed while the worker serves it, instead of
# failing with 55006 "is being accessed by other users" after 5 s:
#
# - a database named in delivery_outbox.database that is missing at server
#   start: its worker exits with FATAL "database ... does not exist" and is
#   retried every 5 s; once the database is created, it is served;
# - DROP DATABASE and DROP DATABASE ... WITH (FORCE), with the extension
#   created there and without: the worker leaves ("leaves database ... for
#   a command that needs it"), is restarted 5 s later by the postmaster,
#   waits while no database of its name exists ("waits for database"), and
#   serves a database created under that name at once;
# - the deferred wake-ups handed over for a dropped database are not sent
#   into the database recreated under its name, even with the same outbox
#   OID (both copied from one template);
# - ALTER DATABASE ... RENAME in a transaction block holds the worker off
#   until the transaction ends (here: ROLLBACK, and app is served again);
# - ALTER DATABASE ... RENAME, with and without the extension: the worker
#   does not follow the database to its new name (nobody serves it, and its
#   deferred wake-ups go out from the producers, as in any database without
#   a worker); it serves the name again after RENAME back or CREATE
#   DATABASE;
# - CREATE DATABASE ... TEMPLATE app and ALTER DATABASE app SET TABLESPACE,
#   with and without the extension: the worker comes back to app and
#   sweeps it; nobody serves the copy;
# - a command on a database nobody serves leaves the workers alone;
# - meanwhile a producer in "other" commits a row every 10 ms in deferred
#   mode: it never fails, its worker is never restarted, and a relay there
#   hears every row once, from that worker.
#
# Timings are printed (diag), never asserted: the machine is shared.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $node = outbox_node(
	'main',
	preload => 1,
	conf => q{
delivery_outbox.database = 'app, other'
delivery_outbox.notify = deferred
delivery_outbox.sweep_interval = '200ms'
delivery_outbox.reclaim_after = 1
},
	databases => [ 'tpl', 'other' ],
	extension => [ 'tpl', 'other' ]);

# Run $sql in database postgres, which must succeed; print how long it took.
sub timed
{
	my ($sql, $what) = @_;
	my $start = time;
	$node->safe_psql('postgres', $sql);
	diag(sprintf('%s: %.2f s', $what, time - $start));
	return;
}

# How many sweepers are connected to $db now.
sub sweepers_in
{
	my ($db) = @_;
	return $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM pg_stat_activity
 WHERE backend_type = 'delivery_outbox sweeper' AND datname = '$db'});
}

# A row of app delivered now comes back to pending (reclaim_after = 1 s)
# without any client call: the worker sweeps app.
sub sweeps_app
{
	my ($what) = @_;
	my $id = $node->safe_psql(
		'app', q{
SET delivery_outbox.notify = off;
SELECT outbox_enqueue('sweep:probe', 'work', '\x00');
SELECT count(*) FROM outbox_claim(1, 'sweep:probe');});
	($id) = split /\n/, $id;
	ok( $node->poll_query_until(
			'app', qq{
SELECT delivery_state = 'pending' FROM delivery_outbox WHERE id = $id}),
		"$what: the worker sweeps app (a delivered row is reclaimed)");
	$node->safe_psql('app',
		q{DELETE FROM delivery_outbox WHERE recipient = 'sweep:probe'});
	return;
}

my $waits = qr/LOG:\s+delivery_outbox sweeper waits for database "app"/;
my $leaves =
  qr/LOG:\s+delivery_outbox sweeper leaves database "app" for a command that needs it/;
my $started = qr/LOG:\s+delivery_outbox sweeper started for database "app"/;

#
# "app" does not exist yet: its worker fails to connect and is retried
# every 5 s (bgw_restart_time); "other" is served meanwhile.
#
my $missing = qr/FATAL:\s+database "app" does not exist/;
my $start = time;
$node->wait_for_log($missing);
my $fatals = 0;
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while ($fatals < 2 && time < $deadline)
{
	$fatals = () = slurp_file($node->logfile) =~ /$missing/g;
	usleep(100_000) if $fatals < 2;
}
cmp_ok($fatals, '>=', 2,
	'a database missing at server start: its worker exits with FATAL and is retried'
);
diag(sprintf('two FATAL connection attempts within %.2f s', time - $start));
my $other_pid = wait_for_worker($node, 'other');

# app is a copy of tpl: the outbox table has the same OID in every copy.
timed('CREATE DATABASE app TEMPLATE tpl', 'CREATE DATABASE app TEMPLATE tpl');
my $app_pid = wait_for_worker($node, 'app');
pass('once created, the missing database is served');
my $relid = $node->safe_psql('app', q{SELECT 'delivery_outbox'::regclass::oid});
is($node->safe_psql('tpl', q{SELECT 'delivery_outbox'::regclass::oid}),
	$relid, 'the outbox of app has the OID of the one in tpl');

#
# The producer in "other": a row every 10 ms, each in its own transaction,
# in deferred mode, until producer_stop has a row.
#
$node->safe_psql('other',
	'CREATE TABLE producer_stop (x int); CREATE TABLE relay_stop (x int)');
# The relay of "other" must read its socket all along: a backend whose
# client does not read its notifications blocks sending them ("notify
# interrupt") and cannot absorb the ProcSignalBarrier that DROP DATABASE
# and SET TABLESPACE wait for, in any database.  So it is a psql running a
# script of short statements (psql prints what it heard after each), to a
# file, until relay_stop has a row.
my $relay_script = "$PostgreSQL::Test::Utils::tmp_check/022_relay.sql";
my $relay_file = "$PostgreSQL::Test::Utils::tmp_check/022_relay.out";
open my $fh, '>', $relay_script or die "$relay_script: $!";
print $fh "LISTEN delivery_outbox;\n";
print $fh "SELECT pg_sleep(0.05), EXISTS (SELECT 1 FROM relay_stop) AS stop \\gset\n"
  . "\\if :stop\n\\q\n\\endif\n"
  for 1 .. 4000;
close $fh;
my $relay = IPC::Run::start(
	[
		'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
		'-d', $node->connstr('other'), '-f', $relay_script
	],
	'<', \undef, '>', $relay_file, '2>&1');

$node->poll_query_until('other',
	q{SELECT count(*) > 0 FROM pg_stat_activity
	  WHERE datname = 'other' AND query LIKE 'SELECT pg_sleep(0.05)%'})
  or die 'the relay of other does not listen';

my ($producer_out, $producer_err) = ('', '');
my $producer = IPC::Run::start(
	[
		'psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
		'-d', $node->connstr('other'), '-c', q{
DO $$
BEGIN
	LOOP
		PERFORM outbox_enqueue('producer', 'work', '\x01');
		COMMIT;
		EXIT WHEN EXISTS (SELECT 1 FROM producer_stop);
		PERFORM pg_sleep(0.01);
	END LOOP;
END
$$}
	],
	'<', \undef, '>', \$producer_out, '2>', \$producer_err);

# What the relay of "other" heard so far, as "id@pid".
sub other_heard
{
	my $out = -e $relay_file ? slurp_file($relay_file) : '';
	my @got;
	while ($out =~
		/^Asynchronous notification "delivery_outbox" with payload "([^"]*)" received from server process with PID (\d+)\.$/mg
	  )
	{
		push @got, "$1\@$2";
	}
	return @got;
}
$node->poll_query_until('other',
	q{SELECT count(*) > 10 FROM delivery_outbox WHERE recipient = 'producer'})
  or die 'the producer does not commit';

#
# DROP DATABASE, the extension there, the worker connected.
#
my $offset = -s $node->logfile;
timed('DROP DATABASE app', 'DROP DATABASE app (extension, worker connected)');
pass('DROP DATABASE succeeds while the worker serves the database');
$node->wait_for_log($leaves, $offset);
pass('the worker logged that it leaves the database');
is(sweepers_in('app'), '0', 'no sweeper left');

$node->safe_psql('postgres', 'CREATE DATABASE app TEMPLATE tpl');
$app_pid = wait_for_worker($node, 'app', $app_pid);
pass('a database recreated under its name, with the extension, is served again');
$node->wait_for_log($started, $offset);
pass('the worker logged that it started for app');
sweeps_app('recreated');

#
# The deferred wake-ups of a dropped database.  The worker is terminated
# (restarted 5 s later); meanwhile rows enqueued in app in deferred mode
# hand their ids over to its ring, and app is dropped (no worker to wait
# for) and created again from tpl: the same outbox OID, and ids 1.. again.
# The ids of the dropped rows were 11 to 13: the new app's relay hears
# only its own row 1.
#
$node->safe_psql('postgres',
	"SELECT pg_terminate_backend($app_pid)");
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $app_pid")
  or die 'the worker did not exit';
$node->safe_psql(
	'app', q{
SELECT setval('delivery_outbox_id_seq', 10);
SELECT count(*) FROM (SELECT outbox_enqueue('stale', 'work', '\x00')
                        FROM generate_series(1, 3)) s;});
my $no_worker = sweepers_in('app');
timed('DROP DATABASE app', 'DROP DATABASE app (extension, worker restarting)');
$node->safe_psql('postgres', 'CREATE DATABASE app TEMPLATE tpl');
my $app_relay = listener($node, 'app');
$app_pid = wait_for_worker($node, 'app', $app_pid);
my $sentinel = $node->safe_psql('app',
	q{SELECT outbox_enqueue('sentinel', 'work', '\x00')});
is($sentinel, '1', 'the recreated database starts its ids again');
my @got = wait_heard($app_relay, 1);
usleep(500_000);
push @got, heard($app_relay);
is(join(',', map { s/\@\d+$//r } @got),
	'1', 'no wake-up of the dropped database is sent in the recreated one')
  or diag("worker in app before the drop: $no_worker");
like($got[0], qr/\@$app_pid$/, 'and the row is woken by the new worker');
$app_relay->quit;

#
# DROP DATABASE ... WITH (FORCE), the extension there, a session connected
# (FORCE ends it); the worker leaves by itself, waits for a database of
# its name, and serves the one created (without the extension) at once.
#
my $bystander = $node->background_psql('app', on_error_stop => 0);
$bystander->query_safe('SELECT 1');
$offset = -s $node->logfile;
timed('DROP DATABASE app WITH (FORCE)',
	'DROP DATABASE app WITH (FORCE) (extension, worker connected)');
pass('DROP DATABASE WITH (FORCE) succeeds');
$node->wait_for_log($leaves, $offset);
pass('the worker left by itself');
$node->wait_for_log($waits, $offset);
pass('restarted, it waits for a database of its name');
usleep(1_000_000);
is(sweepers_in('app'), '0', 'and does not connect meanwhile');

# A command on the name while its worker waits, not connected: nothing to
# leave.
timed('DROP DATABASE IF EXISTS app',
	'DROP DATABASE IF EXISTS app (gone, its worker waiting)');
pass('DROP DATABASE IF EXISTS of the gone database succeeds');
$bystander->quit;

$offset = -s $node->logfile;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$app_pid = wait_for_worker($node, 'app', $app_pid);
pass('CREATE DATABASE app: served again');
$node->wait_for_log(
	qr/LOG:\s+delivery_outbox sweeper: extension "delivery_outbox" is not installed in database "app", waiting/,
	$offset);
pass('the worker waits for the extension in the new database');

#
# Without the extension: DROP DATABASE ... WITH (FORCE), then DROP DATABASE.
#
timed('DROP DATABASE app WITH (FORCE)',
	'DROP DATABASE app WITH (FORCE) (no extension)');
pass('DROP DATABASE WITH (FORCE) succeeds without the extension');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$app_pid = wait_for_worker($node, 'app', $app_pid);

timed('DROP DATABASE app', 'DROP DATABASE app (no extension)');
pass('DROP DATABASE succeeds without the extension');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$app_pid = wait_for_worker($node, 'app', $app_pid);

#
# ALTER DATABASE ... RENAME in a transaction block holds the worker off
# until the transaction ends: restarted, it waits without connecting; the
# rollback lets it connect to app again at once.
#
my $renamer = $node->background_psql('postgres');
$offset = -s $node->logfile;
$renamer->query_safe('BEGIN');
$renamer->query_safe('ALTER DATABASE app RENAME TO app2');
$node->wait_for_log(
	qr/$waits\n.*DETAIL:\s+A command needs the database to itself\./,
	$offset);
pass('in a transaction block, RENAME holds the restarted worker off');
is(sweepers_in('app'), '0', 'which does not connect');
$renamer->query_safe('ROLLBACK');
$renamer->quit;
$app_pid = wait_for_worker($node, 'app', $app_pid);
pass('after the rollback it serves app again');

#
# ALTER DATABASE app RENAME TO app2, without the extension: nobody serves
# app2; CREATE DATABASE app is served; a command on app2 (served by nobody)
# leaves the worker alone.
#
$offset = -s $node->logfile;
timed('ALTER DATABASE app RENAME TO app2',
	'ALTER DATABASE app RENAME TO app2 (no extension)');
pass('ALTER DATABASE RENAME succeeds');
$node->wait_for_log($waits, $offset);
pass('the worker waits for a database named app');
usleep(1_000_000);
is(sweepers_in('app2'), '0', 'nobody serves the renamed database');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$app_pid = wait_for_worker($node, 'app', $app_pid);
pass('CREATE DATABASE app after the rename: served');
timed('DROP DATABASE app2', 'DROP DATABASE app2 (not served)');
is(worker_pid($node, 'app'), $app_pid,
	'a command on a database nobody serves leaves the worker alone');

#
# CREATE DATABASE ... TEMPLATE app and ALTER DATABASE app SET TABLESPACE,
# without the extension.
#
timed('CREATE DATABASE copy2 TEMPLATE app',
	'CREATE DATABASE copy2 TEMPLATE app (no extension)');
pass('CREATE DATABASE TEMPLATE succeeds');
$app_pid = wait_for_worker($node, 'app', $app_pid);
pass('the worker comes back to app');
is(sweepers_in('copy2'), '0', 'nobody serves the copy');

my $ts_dir = $node->basedir . '/ts';
mkdir $ts_dir or die "mkdir $ts_dir: $!";
$node->safe_psql('postgres', "CREATE TABLESPACE ts LOCATION '$ts_dir'");
timed('ALTER DATABASE app SET TABLESPACE ts',
	'ALTER DATABASE app SET TABLESPACE ts (no extension)');
is( $node->safe_psql(
		'postgres', q{
SELECT spcname FROM pg_database d JOIN pg_tablespace t ON t.oid = d.dattablespace
 WHERE datname = 'app'}),
	'ts',
	'ALTER DATABASE SET TABLESPACE succeeds');
$app_pid = wait_for_worker($node, 'app', $app_pid);
pass('the worker comes back to app');

#
# The same with the extension: SET TABLESPACE, TEMPLATE.
#
$node->safe_psql('app', 'CREATE EXTENSION delivery_outbox');
sweeps_app('extension created');
timed('ALTER DATABASE app SET TABLESPACE pg_default',
	'ALTER DATABASE app SET TABLESPACE pg_default (extension)');
is( $node->safe_psql(
		'postgres', q{
SELECT spcname FROM pg_database d JOIN pg_tablespace t ON t.oid = d.dattablespace
 WHERE datname = 'app'}),
	'pg_default',
	'ALTER DATABASE SET TABLESPACE succeeds with the extension');
$app_pid = wait_for_worker($node, 'app', $app_pid);
sweeps_app('after SET TABLESPACE');

$node->safe_psql('app',
	q{SET delivery_outbox.notify = off;
	  SELECT outbox_enqueue('copied', 'work', '\x00')});
timed('CREATE DATABASE copy TEMPLATE app',
	'CREATE DATABASE copy TEMPLATE app (extension)');
is($node->safe_psql('copy',
		q{SELECT count(*) FROM delivery_outbox WHERE recipient = 'copied'}),
	'1', 'CREATE DATABASE TEMPLATE succeeds with the extension, rows copied');
$app_pid = wait_for_worker($node, 'app', $app_pid);
sweeps_app('after CREATE DATABASE TEMPLATE');
is(sweepers_in('copy'), '0', 'nobody serves the copy');

#
# ALTER DATABASE app RENAME TO app2 with the extension: app2 is not served,
# so its producers' deferred wake-ups go out from the producers themselves
# (as in any database without a worker); RENAME back: served again.
#
$offset = -s $node->logfile;
timed('ALTER DATABASE app RENAME TO app2',
	'ALTER DATABASE app RENAME TO app2 (extension)');
pass('ALTER DATABASE RENAME succeeds with the extension');
$node->wait_for_log($waits, $offset);
pass('the worker waits for a database named app');
my $app2_relay = listener($node, 'app2');
my $producer2 = $node->background_psql('app2');
my $producer2_pid = $producer2->query_safe('SELECT pg_backend_pid()');
my $renamed_id = $producer2->query_safe(
	q{SELECT outbox_enqueue('renamed', 'work', '\x00')});
$deadline = time + 10;
@got = ();
while (!@got && time < $deadline)
{
	push @got, heard($app2_relay);
	usleep(50_000) unless @got;
}
is(join(',', @got), "$renamed_id\@$producer2_pid",
	'in the renamed database a deferred wake-up is sent by the producer');
is(sweepers_in('app2'), '0', 'nobody serves the renamed database');
$producer2->quit;
$app2_relay->quit;
timed('ALTER DATABASE app2 RENAME TO app',
	'ALTER DATABASE app2 RENAME TO app (not served)');
$app_pid = wait_for_worker($node, 'app', $app_pid);
pass('renamed back, it is served again');
sweeps_app('renamed back');

#
# The producer in "other" never failed, its worker never left, and its
# relay heard every row once, from that worker.
#
$node->safe_psql('other', 'INSERT INTO producer_stop VALUES (1)');
$producer->finish;
is($producer->result(0), 0, 'the producer in other never failed')
  or diag($producer_err);
my $rows = $node->safe_psql('other',
	q{SELECT string_agg(id::text, ',' ORDER BY id) FROM delivery_outbox
	  WHERE recipient = 'producer'});
my @rows = split /,/, $rows;
my @other_heard;
$deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while ((@other_heard = other_heard()) < @rows && time < $deadline)
{
	usleep(100_000);
}
$node->safe_psql('other', 'INSERT INTO relay_stop VALUES (1)');
$relay->finish;
my %heard_ids;
$heard_ids{ s/\@\d+$//r }++ for @other_heard;
is(join(',', grep { !$heard_ids{$_} } @rows),
	'', 'every row of the producer in other was woken');
is(join(',', grep { $heard_ids{$_} > 1 } sort { $a <=> $b } keys %heard_ids),
	'', 'once');
is(scalar(@other_heard), scalar(@rows), 'and nothing else');
is(scalar(grep { !/\@$other_pid$/ } @other_heard),
	0, 'always by the worker of other');
is(worker_pid($node, 'other'), $other_pid,
	'the worker of other was never restarted');
diag(scalar(@rows) . ' rows enqueued in other');

$node->stop;
done_testing();
