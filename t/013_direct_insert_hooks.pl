# Copyright (c) 2026, delivery_outbox developers

# t/013_direct_insert_hooks.pl
#
# outbox_enqueue's direct insert steps aside for modules that must see (or
# route) every statement: with pg_stat_statements preloaded (it hooks the
# parser and the executor), every enqueue runs its INSERT as a statement,
# which pg_stat_statements counts; the rows and wake-ups are as always.
# With delivery_outbox.direct_insert = off the same holds without any such
# module, and a server without pg_stat_statements still enqueues.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $node = outbox_node(
	'main',
	preload => [ 'pg_stat_statements', 'delivery_outbox' ],
	conf => "pg_stat_statements.track = all\n");
$node->safe_psql('postgres',
	'CREATE EXTENSION pg_stat_statements; CREATE EXTENSION delivery_outbox');

# the INSERT that outbox_enqueue's SQL path runs, as pg_stat_statements
# records it, and how often
my $inserts = q{
	SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
	 WHERE query LIKE 'INSERT INTO public.delivery_outbox (recipient, kind, payload, tenant_id%'};

$node->safe_psql('postgres', 'SELECT pg_stat_statements_reset()');
for my $i (1 .. 5)
{
	$node->safe_psql('postgres',
		"SELECT outbox_enqueue('agent:hooks', 'work', '\\x0$i')");
}
is($node->safe_psql('postgres', $inserts),
	'5', 'with pg_stat_statements loaded, it sees the INSERT of every enqueue');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM delivery_outbox
		  WHERE recipient = 'agent:hooks' AND delivery_state = 'pending'"),
	'5',
	'and every row is there, pending');

# a LISTENing relay hears each id once, from the producer's commit
my $relay = listener($node);
my $id = $node->safe_psql('postgres',
	"SELECT outbox_enqueue('agent:hooks', 'work', '\\x06')");
my $heard = $relay->query_safe('SELECT 1');
like($heard, qr/Asynchronous notification "delivery_outbox" with payload "$id" received/,
	'the wake-up carries the new id');
$relay->quit;

# without pg_stat_statements, direct_insert = off still enqueues (what the
# direct path does instead is covered by the regress suite, run both ways)
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'delivery_outbox'");
$node->restart;
is( $node->safe_psql(
		'postgres',
		"SET delivery_outbox.direct_insert = off;
		 SELECT outbox_enqueue('agent:plain', 'work', '\\x07') > 0;
		 SET delivery_outbox.direct_insert = on;
		 SELECT outbox_enqueue('agent:plain', 'work', '\\x08') > 0;
		 SELECT count(*) FROM delivery_outbox WHERE recipient = 'agent:plain'"),
	"t\nt\n2",
	'without the module, both paths enqueue');

$node->stop;
done_testing();
