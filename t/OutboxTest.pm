
# Copyright (c) 2026, delivery_outbox developers

# t/OutboxTest.pm
#
# Helpers shared by the TAP tests in t/: a node set up with the extension
# (and, if asked, the library preloaded), relays played by background psql
# sessions that LISTEN, the notifications they heard, the rows and states of
# the outbox as text, the "skipping wake-ups" log lines, and the sweeper
# worker's pid and sweeps.  None of them asserts anything; the tests do.
#
# PGXS runs prove from the top of the tree with -I for PostgreSQL::Test and
# the tree itself, not t/, so a test loads this module with
#
#     use FindBin;
#     use lib $FindBin::RealBin;
#     use OutboxTest;

package OutboxTest;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(
  outbox_node
  listener
  heard
  heard_payloads
  wait_heard
  skip_lines
  rows_of
  states_of
  worker_pid
  wait_for_worker
  wait_for_sweep
);

# The backend type and application name of the sweeper worker.
my $sweeper = 'delivery_outbox sweeper';

=pod

=over

=item outbox_node($name, %opts)

A new node, initialized and started.  Options:

  init       hash ref of options for init (e.g. { allows_streaming => 1 })
  preload    true: shared_preload_libraries = 'delivery_outbox'; or an
             array ref of the libraries to preload, in order
  conf       more lines for postgresql.conf
  databases  array ref of databases to create
  extension  array ref of databases to CREATE EXTENSION delivery_outbox in

Without preload or conf the node starts, then the databases are created.
With them and no databases, postgresql.conf is written before the first
start.  With both, the databases are created first and the node is then
restarted with the new configuration, so that a worker never starts for a
database that does not exist yet.  The extension comes last.

=cut

sub outbox_node
{
	my ($name, %opts) = @_;
	my $conf = $opts{conf} // '';
	if ($opts{preload})
	{
		my @libraries =
		  ref $opts{preload} ? @{ $opts{preload} } : ('delivery_outbox');
		$conf =
		  "shared_preload_libraries = '" . join(', ', @libraries) . "'\n"
		  . $conf;
	}
	my @databases = @{ $opts{databases} // [] };

	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opts{init} // {} });
	if ($conf ne '' && !@databases)
	{
		$node->append_conf('postgresql.conf', $conf);
		$node->start;
	}
	else
	{
		$node->start;
		$node->safe_psql('postgres',
			join('; ', map { "CREATE DATABASE $_" } @databases))
		  if @databases;
		if ($conf ne '')
		{
			$node->append_conf('postgresql.conf', $conf);
			$node->restart;
		}
	}
	$node->safe_psql($_, 'CREATE EXTENSION delivery_outbox')
	  for @{ $opts{extension} // [] };
	return $node;
}

=item listener($node, $db)

A relay: a background psql session in $db (default postgres) that LISTENs
on the default channel, delivery_outbox.

=cut

sub listener
{
	my ($node, $db) = @_;
	my $session = $node->background_psql($db // 'postgres');
	$session->query_safe('LISTEN delivery_outbox');
	return $session;
}

=item heard($session)

The notifications on channel delivery_outbox that $session received since
the last call, in arrival order, as "payload@pid" strings (the pid of the
process that sent it).  psql prints the notifications it holds after each
statement it runs, so running one collects what has arrived.

=item heard_payloads($session)

The same, payloads only, comma-separated.

=cut

sub heard
{
	my ($session) = @_;
	my $out = $session->query_safe('SELECT 1');
	my @got;
	while ($out =~
		/^Asynchronous notification "delivery_outbox" with payload "([^"]*)" received from server process with PID (\d+)\.$/mg
	  )
	{
		push @got, "$1\@$2";
	}
	return @got;
}

sub heard_payloads
{
	return join(',', map { s/\@\d+$//r } heard(@_));
}

=item wait_heard($session, $n, $interval_us)

Poll $session every $interval_us microseconds (default 50 ms) until it has
heard $n notifications, or the default timeout has passed; returns all it
heard, as heard() does.

=cut

sub wait_heard
{
	my ($session, $n, $interval_us) = @_;
	$interval_us //= 50_000;
	my @got;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (@got < $n && time < $deadline)
	{
		push @got, heard($session);
		usleep($interval_us) if @got < $n;
	}
	return @got;
}

=item skip_lines($node, $offset, $pid)

How many "skipping wake-ups" lines the server log holds after $offset; of
backend $pid only, if given (log_line_prefix has the pid in brackets).

=cut

sub skip_lines
{
	my ($node, $offset, $pid) = @_;
	my $re =
	  defined $pid ? qr/\[$pid\].*skipping wake-ups/ : qr/skipping wake-ups/;
	return scalar grep { /$re/ } split /\n/,
	  slurp_file($node->logfile, $offset);
}

=item rows_of($node, %opts)

The full text of the outbox rows (every column, timestamps included), one
line per row in id order.  Options: where (an SQL condition), db (default
postgres), table (default delivery_outbox).

=cut

sub rows_of
{
	my ($node, %opts) = @_;
	my $table = $opts{table} // 'delivery_outbox';
	my $where = defined $opts{where} ? " WHERE $opts{where}" : '';
	return $node->safe_psql($opts{db} // 'postgres',
		"SELECT o::text FROM $table o$where ORDER BY id");
}

=item states_of($node, $where, %opts)

"state:attempts" of the rows matching $where, comma-separated in id order.
Options: sep (instead of ":"), table (default delivery_outbox).

=cut

sub states_of
{
	my ($node, $where, %opts) = @_;
	my $sep = $opts{sep} // ':';
	my $table = $opts{table} // 'delivery_outbox';
	return $node->safe_psql(
		'postgres', qq{
SELECT string_agg(delivery_state || '$sep' || delivery_attempts, ',' ORDER BY id)
  FROM $table WHERE $where});
}

# The pids of the workers serving $db.
sub _worker_sql
{
	my ($db) = @_;
	return qq{
SELECT pid FROM pg_stat_activity
 WHERE backend_type = '$sweeper' AND datname = '$db'};
}

=item worker_pid($node, $db)

The pid of the sweeper worker serving $db (default postgres), now; empty if
there is none.

=item wait_for_worker($node, $db, $old_pid)

Poll until exactly one worker other than $old_pid (default: any) serves $db
(default postgres); its pid.  Dies at the timeout.

=cut

sub worker_pid
{
	my ($node, $db) = @_;
	return $node->safe_psql('postgres', _worker_sql($db // 'postgres'));
}

sub wait_for_worker
{
	my ($node, $db, $old_pid) = @_;
	$db //= 'postgres';
	$old_pid //= 0;
	$node->poll_query_until('postgres',
		'SELECT count(*) = 1 FROM (' . _worker_sql($db) . ") w WHERE pid <> $old_pid")
	  or die "no delivery_outbox worker for $db"
	  . ($old_pid ? " other than $old_pid" : '');
	return worker_pid($node, $db);
}

=item wait_for_sweep($node, %opts)

Poll until the worker is idle after a sweep (pg_stat_activity shows the
query "delivery_outbox: sweep", or "delivery_outbox: partitions" after the
partition upkeep that ends a sweep of a database with a partitioned
outbox).  Options: after (a timestamptz text: the
sweep ended after it), pid (that worker; default every worker).  Returns
what poll_query_until returns.

=back

=cut

sub wait_for_sweep
{
	my ($node, %opts) = @_;
	my $after =
	  defined $opts{after}
	  ? "\n       AND state_change > '$opts{after}'::timestamptz"
	  : '';
	my $which =
	  defined $opts{pid}
	  ? "pid = $opts{pid}"
	  : "backend_type = '$sweeper'";
	return $node->poll_query_until(
		'postgres', qq{
SELECT state = 'idle'
       AND query IN ('delivery_outbox: sweep', 'delivery_outbox: partitions')$after
  FROM pg_stat_activity WHERE $which});
}

1;
