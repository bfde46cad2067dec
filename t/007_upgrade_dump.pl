
# Copyright (c) 2026, delivery_outbox developers

# t/007_upgrade_dump.pl
#
# Installing 1.0 and running ALTER EXTENSION ... UPDATE gives the same
# database, as pg_dump sees it, as a fresh CREATE EXTENSION of the default
# version; in the default schema and in a schema of its own.  (For every
# catalog property, version by version, see sql/upgrade.sql.)
#
# Two dumps per pair of databases:
# - pg_dump -s, compared as is: what a user's dump holds (for an extension,
#   the CREATE EXTENSION and anything outside it);
# - pg_dump -s --binary-upgrade, what pg_upgrade would carry over: every
#   member object in full, the initial privileges recorded for them
#   (pg_init_privs) and the configuration tables.  The OIDs, relfilenodes,
#   LSNs and relfrozenxids it pins for pg_upgrade differ between any two
#   databases, so those numbers are blanked, and nothing else is touched.
# Each comparison is line by line, in dump order; on a difference the diff
# is printed.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

my $node = outbox_node('main');

my $tempdir = PostgreSQL::Test::Utils::tempdir;

# pg_dump 15.14 and later print a random \restrict key unless given one.
my ($help) = run_command([ 'pg_dump', '--help' ]);
my @restrict = $help =~ /--restrict-key/ ? ('--restrict-key=outboxtest') : ();

my $default_version = $node->safe_psql('postgres',
	q{SELECT default_version FROM pg_available_extensions
	  WHERE name = 'delivery_outbox'});
note "default version: $default_version";

sub dump_schema
{
	my ($db, @opts) = @_;
	my $file = "$tempdir/$db" . (@opts ? '_bu' : '') . '.sql';
	$node->command_ok(
		[ 'pg_dump', '-s', @restrict, @opts, '-f', $file, '-d', $db ],
		join(' ', 'pg_dump -s', @opts, $db));
	my $text = slurp_file($file);
	if (@opts)
	{
		$text =~ s/(binary_upgrade_set_next_\w+\()[^)]*\)/$1...)/g;
		$text =~ s/relfrozenxid = '\d+', relminmxid = '\d+'/relfrozenxid = '...', relminmxid = '...'/g;
		$text =~ s/WHERE oid = '\d+'/WHERE oid = '...'/g;
		$text =~ s/(binary_upgrade_create_empty_extension\('[^']*', '[^']*', \w+, '[^']*', )'\{[0-9,]*\}'/$1'{...}'/g;
	}
	return $text;
}

sub compare
{
	my ($a, $b, $what) = @_;
	if ($a eq $b)
	{
		pass($what);
		return;
	}
	fail($what);
	my @a = split /\n/, $a;
	my @b = split /\n/, $b;
	my %in_b;
	$in_b{$_}++ for @b;
	my %in_a;
	$in_a{$_}++ for @a;
	diag "only in the first:\n" . join("\n", grep { !$in_b{$_} } @a);
	diag "only in the second:\n" . join("\n", grep { !$in_a{$_} } @b);
}

foreach my $schema ('', 'outbox')
{
	my $suffix = $schema ? "_$schema" : '';
	my $fresh = "fresh$suffix";
	my $updated = "updated$suffix";
	my $with_schema = $schema ? " SCHEMA $schema" : '';

	$node->safe_psql('postgres', "CREATE DATABASE $fresh");
	$node->safe_psql('postgres', "CREATE DATABASE $updated");
	foreach my $db ($fresh, $updated)
	{
		$node->safe_psql($db, "CREATE SCHEMA $schema") if $schema;
	}
	$node->safe_psql($fresh, "CREATE EXTENSION delivery_outbox$with_schema");
	$node->safe_psql($updated,
		"CREATE EXTENSION delivery_outbox$with_schema VERSION '1.0'");
	is( $node->safe_psql(
			$updated,
			q{SELECT extversion FROM pg_extension WHERE extname = 'delivery_outbox'}
		),
		'1.0',
		"$updated: 1.0 installed");
	$node->safe_psql($updated, 'ALTER EXTENSION delivery_outbox UPDATE');
	foreach my $db ($fresh, $updated)
	{
		is( $node->safe_psql(
				$db,
				q{SELECT extversion FROM pg_extension WHERE extname = 'delivery_outbox'}
			),
			$default_version,
			"$db: at the default version");
	}

	my $fresh_dump = dump_schema($fresh);
	like($fresh_dump, qr/CREATE EXTENSION IF NOT EXISTS delivery_outbox/,
		"$fresh: the dump creates the extension");
	compare($fresh_dump, dump_schema($updated),
		"pg_dump -s$with_schema: 1.0 + UPDATE is identical to a fresh install");

	my $fresh_bu = dump_schema($fresh, '--binary-upgrade');
	like(
		$fresh_bu,
		qr/ALTER EXTENSION delivery_outbox ADD FUNCTION .*outbox_claim\(/,
		"$fresh: the binary-upgrade dump lists the member objects");
	like($fresh_bu, qr/binary_upgrade_set_record_init_privs/,
		"$fresh: ... and their initial privileges");
	compare($fresh_bu, dump_schema($updated, '--binary-upgrade'),
		"pg_dump -s --binary-upgrade$with_schema: 1.0 + UPDATE is identical to a fresh install"
	);
}

$node->stop;

done_testing();
