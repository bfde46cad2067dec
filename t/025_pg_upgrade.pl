
# Copyright (c) 2026, delivery_outbox developers

# t/025_pg_upgrade.pl
#
# pg_upgrade of a PostgreSQL 15 cluster holding delivery_outbox to a newer
# major version (18), with the library preloaded and the worker serving
# database "app" on both sides.
#
# The old cluster (the 15 installation this suite runs with) holds an
# outbox of every kind: the default one, one made by outbox_create() in a
# schema of its own (with a channel of its own), cloacina's seed table
# taken over by outbox_attach(), a partitioned one (partition_rows 4,
# several partitions) and an ordered one (outbox_configure(..., ordered =>
# true)); each has non-default settings (max_attempts, backoff, ttl,
# retain_acked), rows in every state (pending with a dedup key, delivered,
# acked, released with an error, scheduled for later, batch-enqueued), an
# id gap and a dead letter (outbox_reject); a producer, a relay and a
# monitoring role are granted as in docs/reference.md "Roles and GRANTs",
# table by table, column grants included.  A fingerprint is taken: every
# row of every outbox and dead-letter table (all columns, the partition
# each row is in), the registry with its regclass values as OIDs,
# delivery_outbox_tables, the partitions and their bounds, the triggers and
# their enabled state, the indexes, the extension's members and version,
# the ACLs of the schemas, tables, sequences, columns and functions (with
# pg_init_privs), and every sequence's position.
#
# The old cluster is stopped, a new one made by the new initdb (the old
# cluster's encoding, locale and checksum setting, the same
# postgresql.conf settings, the library preloaded), and the new
# pg_upgrade runs, --check first ("Clusters are compatible"), then the
# upgrade itself in --copy mode, both with --old-options/--new-options
# "-c delivery_outbox.database=''" as docs/operations.md has it, so that no
# worker runs in the servers pg_upgrade starts (their log, kept by
# --retain, shows none); it asks for no ALTER EXTENSION UPDATE (no
# update_extensions.sql: the version is the same).  On the new cluster:
#
# - the fingerprint is identical (the ACLs compared without the MAINTAIN
#   privilege, new in 17, which every owner holds there and no other role
#   is given);
# - the worker starts ("delivery_outbox sweeper started" in the log);
# - the relay claims and acks on each outbox; the producer enqueues
#   (outbox_enqueue, the direct insert) and inserts (plain INSERT) into
#   each, the rows are notified on each outbox's channel, and a dedup key
#   taken before the upgrade is still taken; the monitoring role reads
#   outbox_stats of each;
# - the ordered outbox still hands out in order: nothing of a group whose
#   run is in flight, then the rest of the group in id order once it is
#   acked;
# - the partitioned outbox gets new partitions ahead, from outbox_enqueue
#   and from the worker's sweep after plain INSERTs.
#
# pg_dump -Fc of the old database, by the old pg_dump and by the new one,
# restored with the new pg_restore into databases of the new cluster: the
# old pg_dump's dump restores with --exit-on-error and gives the same
# fingerprint (but for the OIDs).  The new pg_dump's dump does too, unless
# it carries PostgreSQL 15.20's pg_attver attribute options that the new
# server refuses (below): then the test shows that the restore fails on
# them and loses the tables, as docs/operations.md warns.
#
# PostgreSQL 15.20 and 18.6: 15.20 keeps a version of every column of a
# user table in its attoptions (the reserved key pg_attver); 18.6's
# pg_dump dumps it and 18.6's server refuses it, so pg_upgrade fails at
# "Restoring database schemas" for any database with a table (with or
# without this extension).  Where the test finds all three (the key in the
# old cluster, in the new pg_dump's output, refused by the new server), it
# says so (a diag line) and drops the key from the old cluster's user
# columns by a catalog update before running pg_upgrade; this is a
# workaround for the test's own data (no composite-typed columns), not a
# procedure for real clusters.
#
# The new installation is found through OUTBOX_PG18_BINDIR, its bindir
# (scripts/pg18.sh builds one; its pg_config --bindir), which must hold
# pg_upgrade and the extension's files (make install
# PG_CONFIG=$OUTBOX_PG18_BINDIR/pg_config); without them the test is
# skipped.  To run it alone, from the top of the tree, with the extension
# installed into both installations:
#
#     make installcheck REGRESS= ISOLATION= PROVE_TESTS=t/025_pg_upgrade.pl \
#         OUTBOX_PG18_BINDIR=/path/to/pg18/bin
#
# (as a user initdb accepts: not root).

use strict;
use warnings;

use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest;

###########################################################################
# The new installation
###########################################################################

my $new_bindir = $ENV{OUTBOX_PG18_BINDIR};
plan skip_all =>
  'OUTBOX_PG18_BINDIR is not set (the bindir of a PostgreSQL 18 installation holding delivery_outbox)'
  unless defined $new_bindir && $new_bindir ne '';
plan skip_all => "OUTBOX_PG18_BINDIR=$new_bindir: no pg_upgrade or pg_config there"
  unless -x "$new_bindir/pg_upgrade" && -x "$new_bindir/pg_config";

# Asking the new pg_config for its directories, not guessing lib/postgresql.
my ($new_pkglibdir, $new_sharedir, $new_version) = map {
	my ($out) = run_command([ "$new_bindir/pg_config", $_ ]);
	chomp $out;
	$out;
} ('--pkglibdir', '--sharedir', '--version');
plan skip_all =>
  "OUTBOX_PG18_BINDIR=$new_bindir: the extension is not installed there "
  . "(no $new_pkglibdir/delivery_outbox.so or $new_sharedir/extension/delivery_outbox.control; "
  . "make install PG_CONFIG=$new_bindir/pg_config)"
  unless -f "$new_pkglibdir/delivery_outbox.so"
  && -f "$new_sharedir/extension/delivery_outbox.control";

my ($old_bindir) = run_command([ 'pg_config', '--bindir' ]);
chomp $old_bindir;
my ($old_version) = run_command([ 'pg_config', '--version' ]);
chomp $old_version;
note "upgrading from $old_version ($old_bindir) to $new_version ($new_bindir)";

my $conf = q{
delivery_outbox.database = 'app'
delivery_outbox.sweep_interval = '200ms'
delivery_outbox.reclaim_after = -1
delivery_outbox.retain_acked = -1
timezone = 'UTC'
};

###########################################################################
# The old cluster and its outboxes
###########################################################################

my $old = outbox_node(
	'old',
	preload => 1,
	conf => $conf,
	databases => ['app'],
	extension => ['app']);
wait_for_worker($old, 'app');

$old->safe_psql(
	'app', q{
-- cloacina's migrations 027 and 028, as sql/outboxes_seed.sql has them
CREATE SCHEMA seed;
CREATE TABLE seed.delivery_outbox (
    id BIGSERIAL PRIMARY KEY,
    recipient TEXT NOT NULL,
    kind TEXT NOT NULL,
    tenant_id TEXT NULL,
    payload BYTEA NOT NULL,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMP NOT NULL,
    delivered_at TIMESTAMP NULL,
    acked_at TIMESTAMP NULL
);
CREATE INDEX idx_delivery_outbox_recipient_open
    ON seed.delivery_outbox (recipient, id) WHERE delivery_state <> 'acked';
CREATE INDEX idx_delivery_outbox_open_age
    ON seed.delivery_outbox (delivery_state, created_at) WHERE delivery_state <> 'acked';
CREATE FUNCTION seed.delivery_outbox_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('delivery_outbox', NEW.id::text);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER delivery_outbox_notify_trg
    AFTER INSERT ON seed.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION seed.delivery_outbox_notify();
-- a row the seed wrote before the takeover
INSERT INTO seed.delivery_outbox (recipient, kind, payload, created_at)
VALUES ('agent:seed', 'work', '\x5eed', now() AT TIME ZONE 'UTC');
SELECT outbox_attach('seed.delivery_outbox', channel => 'seed_chan');

CREATE SCHEMA tenant_a;
SELECT outbox_create('tenant_a', channel => 'tenant_a_chan');
CREATE SCHEMA part;
SELECT outbox_create('part', 'events', partition_rows => 4);
CREATE SCHEMA ord;
SELECT outbox_create('ord', 'runs');
SELECT outbox_configure('ord.runs', ordered => true);
});

# Outbox => [its dead-letter table, its channel].
my %outboxes = (
	'delivery_outbox' => [ 'delivery_outbox_dead', 'delivery_outbox' ],
	'tenant_a.delivery_outbox' =>
	  [ 'tenant_a.delivery_outbox_dead', 'tenant_a_chan' ],
	'seed.delivery_outbox' => [ 'seed.delivery_outbox_dead', 'seed_chan' ],
	'part.events' => [ 'part.events_dead', 'delivery_outbox' ],
	'ord.runs' => [ 'ord.runs_dead', 'delivery_outbox' ]);
my @outboxes = sort keys %outboxes;
my @schemas = qw(public tenant_a seed part ord);

# Rows in every state, one recipient per state so that a per-recipient
# claim picks exactly its rows; settings that are not the defaults.
for my $o (@outboxes)
{
	$old->safe_psql(
		'app', qq{
SELECT outbox_configure('$o', max_attempts => 5, backoff_base => '2 s',
                        backoff_max => '1 min', ttl => '1 day',
                        retain_acked => '1 day');
SELECT outbox_enqueue('agent:pending', 'work', '\\x00ff00', 'tenant-1',
                      dedup_key => 'k-pending', outbox => '$o');
SELECT outbox_enqueue('agent:delivered', 'work', '\\x02',
                      expires_at => now() + interval '1 day',
                      dedup_key => 'k-delivered', outbox => '$o');
SELECT count(*) FROM outbox_claim(1, 'agent:delivered', outbox => '$o');
SELECT outbox_enqueue('agent:acked', 'execution_event', '\\x03',
                      dedup_key => 'k-acked', outbox => '$o');
SELECT outbox_ack(id, outbox => '$o') FROM outbox_claim(1, 'agent:acked', outbox => '$o');
SELECT outbox_enqueue('agent:released', 'work', '\\x04', outbox => '$o');
SELECT outbox_release(array_agg(id), retry_after => '0', error => 'busy', outbox => '$o')
  FROM outbox_claim(1, 'agent:released', outbox => '$o');
BEGIN;
SELECT outbox_enqueue('agent:gap', 'work', '\\x05', outbox => '$o');
ROLLBACK;
SELECT outbox_enqueue('agent:scheduled', 'work', '\\x06',
                      not_before => now() + interval '1 hour',
                      dedup_key => 'k-scheduled', outbox => '$o');
SELECT outbox_enqueue('agent:rejected', 'work', '\\x07', 'tenant-2',
                      dedup_key => 'k-rejected', outbox => '$o');
SELECT outbox_reject(array_agg(id), error => 'refused', outbox => '$o')
  FROM outbox_claim(1, 'agent:rejected', outbox => '$o');
SELECT count(*) FROM outbox_enqueue_batch(
    ARRAY['agent:batch', 'agent:batch'], ARRAY['work', 'work'],
    ARRAY['\\x08', '\\x09']::bytea[], outbox => '$o');
});
}

# The ordered outbox's group "agent:ordered": a run of one in flight
# (delivered), two rows behind it.
$old->safe_psql(
	'app', q{
SELECT outbox_enqueue('agent:ordered', 'work', '\x0a', outbox => 'ord.runs');
SELECT outbox_enqueue('agent:ordered', 'work', '\x0b', outbox => 'ord.runs');
SELECT outbox_enqueue('agent:ordered', 'work', '\x0c', outbox => 'ord.runs');
SELECT count(*) FROM outbox_claim(1, 'agent:ordered', outbox => 'ord.runs');
});
is( $old->safe_psql(
		'app', q{
SELECT string_agg(delivery_state, ',' ORDER BY id) FROM ord.runs
 WHERE recipient = 'agent:ordered'}),
	'delivered,pending,pending',
	'old: the ordered group has its head in flight and two rows behind it');

# The roles of docs/reference.md "Roles and GRANTs": the functions granted
# to group roles, each outbox's table to the login roles.
my $schema_list = join(', ', @schemas);
my $grants = qq{
CREATE ROLE outbox_producer NOLOGIN;
CREATE ROLE outbox_relay NOLOGIN;
CREATE ROLE outbox_monitor NOLOGIN;
CREATE ROLE producer LOGIN IN ROLE outbox_producer;
CREATE ROLE relay LOGIN IN ROLE outbox_relay;
CREATE ROLE monitor LOGIN IN ROLE outbox_monitor;
GRANT USAGE ON SCHEMA $schema_list TO outbox_producer, outbox_relay, outbox_monitor;
GRANT EXECUTE ON FUNCTION
    outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass),
    outbox_enqueue_batch(text[], text[], bytea[], text[], timestamptz[], timestamptz[], text[], regclass)
  TO outbox_producer;
GRANT EXECUTE ON FUNCTION
    outbox_claim(integer, text, text, regclass),
    outbox_ack(bigint, text, regclass),
    outbox_ack(bigint[], text, regclass),
    outbox_release(bigint[], interval, text, regclass),
    outbox_reject(bigint[], text, regclass),
    outbox_next_due(text, regclass),
    outbox_reclaim(interval, integer, regclass),
    outbox_reclaim_recipient(text, text, regclass),
    outbox_replay(text, bigint, integer, text, regclass),
    outbox_horizon(regclass),
    outbox_wait(interval, text, regclass)
  TO outbox_relay;
GRANT EXECUTE ON FUNCTION outbox_stats(regclass), outbox_activity() TO outbox_monitor;
GRANT SELECT ON delivery_outbox_activity, delivery_outbox_tables TO outbox_monitor;
GRANT INSERT ON delivery_outbox TO outbox_producer;
GRANT USAGE ON SEQUENCE delivery_outbox_id_seq TO outbox_producer;
GRANT USAGE ON SEQUENCE seed.delivery_outbox_id_seq TO producer;
};
for my $o (@outboxes)
{
	$grants .= qq{
GRANT SELECT (id, recipient, kind, tenant_id, delivery_state, delivery_attempts,
              created_at, delivered_at, acked_at, not_before, expires_at)
  ON $o TO monitor;
};
	next if $o eq 'delivery_outbox';
	$grants .= qq{
GRANT INSERT ON $o TO producer;
GRANT UPDATE, SELECT ON $o TO relay;
GRANT SELECT ON $outboxes{$o}[0] TO monitor;
};
}
$old->safe_psql('app', $grants);

# Let a sweep pass, so that the worker has made what it makes (the
# partitions ahead) before the fingerprint.
wait_for_sweep($old, after => $old->safe_psql('app', 'SELECT clock_timestamp()'));

###########################################################################
# The fingerprint
###########################################################################

# The database as text, part by part: name => text.
sub fingerprint
{
	my ($node, $db) = @_;
	my %fp;
	my $q = sub {
		return $node->safe_psql($db // 'app', "SET TimeZone = 'UTC';\n" . shift);
	};
	my $in_schemas = "(" . join(', ', map { "'$_'" } @schemas) . ")";

	for my $o (@outboxes)
	{
		$fp{"rows of $o"} =
		  $q->("SELECT tableoid::regclass, o::text FROM $o o ORDER BY id");
		my $dead = $outboxes{$o}[0];
		$fp{"dead letters of $dead"} =
		  $q->("SELECT d::text FROM $dead d ORDER BY id");
	}
	$fp{'delivery_outbox_tables'} = $q->(
		'SELECT t::text FROM delivery_outbox_tables t ORDER BY outbox::text');
	$fp{'registry, with OIDs'} = $q->(q{
SELECT outbox::oid, dead::oid, r::text FROM delivery_outbox_registry r
 ORDER BY outbox::text});
	$fp{'partitions'} = $q->(q{
SELECT i.inhparent::regclass, c.oid::regclass, pg_get_expr(c.relpartbound, c.oid),
       pg_get_userbyid(c.relowner)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'part.events'::regclass
 ORDER BY c.oid::regclass::text});
	$fp{'triggers'} = $q->(qq{
SELECT t.tgrelid::regclass::text, t.tgname, t.tgenabled, t.tgfoid::regprocedure,
       encode(t.tgargs, 'escape')
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE NOT t.tgisinternal AND n.nspname IN $in_schemas
 ORDER BY 1, 2});
	$fp{'event triggers'} = $q->(q{
SELECT evtname, evtevent, evtenabled, evtfoid::regprocedure, evttags
  FROM pg_event_trigger ORDER BY 1});
	$fp{'indexes'} = $q->(qq{
SELECT i.indrelid::regclass::text, pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname IN $in_schemas
 ORDER BY 1, 2});
	$fp{'extension'} = $q->(q{
SELECT e.extname, e.extversion, n.nspname, e.extrelocatable,
       (SELECT string_agg(c::regclass::text, ',' ORDER BY c::regclass::text)
          FROM unnest(e.extconfig) c),
       e.extcondition
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'delivery_outbox'});
	# The members, but for the row types of the member tables and views
	# (and their array types): PostgreSQL 17 and later make those members
	# too, as a fresh CREATE EXTENSION there does; 15 leaves them to the
	# relation.
	$fp{'extension members'} = $q->(q{
SELECT pg_describe_object(d.classid, d.objid, d.objsubid)
  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND e.extname = 'delivery_outbox'
   AND NOT EXISTS (SELECT FROM pg_type t
                    LEFT JOIN pg_type elem ON elem.oid = t.typelem
                   WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                     AND (t.typrelid <> 0 OR elem.typrelid <> 0))
 ORDER BY 1});

	# An ACL as its items, without MAINTAIN (PostgreSQL 17 and later give
	# it to every owner: acldefault and the owner's item have it there).
	my $items = sub {
		my ($acl) = @_;
		return qq{(SELECT coalesce(string_agg(
                   format('%s>%s:%s%s', a.grantor::regrole,
                          CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,
                          a.privilege_type, CASE WHEN a.is_grantable THEN '*' END),
                   ' ' ORDER BY a.grantor, a.grantee, a.privilege_type), '-')
          FROM aclexplode($acl) a WHERE a.privilege_type <> 'MAINTAIN')};
	};
	$fp{'schema ACLs'} = $q->(
		"SELECT nspname, pg_get_userbyid(nspowner), "
		  . $items->("coalesce(nspacl, acldefault('n', nspowner))")
		  . " FROM pg_namespace WHERE nspname IN $in_schemas ORDER BY 1");
	$fp{'table ACLs'} = $q->(
		"SELECT c.oid::regclass::text, c.relkind, pg_get_userbyid(c.relowner), "
		  . $items->(
			"coalesce(c.relacl, acldefault((CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END)::\"char\", c.relowner))"
		  )
		  . qq{
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname IN $in_schemas AND c.relkind IN ('r', 'p', 'v', 'S')
 ORDER BY 1});
	$fp{'column ACLs'} = $q->(
		"SELECT a.attrelid::regclass::text, a.attname, " . $items->('a.attacl') . qq{
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname IN $in_schemas AND a.attacl IS NOT NULL
 ORDER BY 1, 2});
	$fp{'function ACLs'} = $q->(
		"SELECT p.oid::regprocedure::text, pg_get_userbyid(p.proowner), p.prosecdef, p.proconfig, "
		  . $items->("coalesce(p.proacl, acldefault('f', p.proowner))")
		  . qq{
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname IN $in_schemas
 ORDER BY 1});
	# The initial privileges of the members, but for those that are the
	# object's default ACL: 15 records the owner-only ACL that REVOKE ALL
	# FROM PUBLIC leaves on a table, pg_upgrade's dump has nothing to say
	# about it (it is the default) and records nothing; both mean the same.
	$fp{'initial privileges'} = $q->(
		"SELECT obj, objsubid, privtype, items FROM (
SELECT CASE i.classoid WHEN 'pg_proc'::regclass THEN i.objoid::regprocedure::text
                       ELSE i.objoid::regclass::text END AS obj,
       i.objsubid, i.privtype, "
		  . $items->('i.initprivs')
		  . " AS items, "
		  . $items->(q{acldefault((CASE WHEN i.classoid = 'pg_proc'::regclass THEN 'f'
                                   WHEN i.objsubid <> 0 THEN 'c'
                                   WHEN c.relkind = 'S' THEN 's'
                                   ELSE 'r' END)::"char",
                             coalesce(c.relowner, p.proowner))})
		  . q{ AS default_items
  FROM pg_init_privs i
  LEFT JOIN pg_class c ON i.classoid = 'pg_class'::regclass AND c.oid = i.objoid
  LEFT JOIN pg_proc p ON i.classoid = 'pg_proc'::regclass AND p.oid = i.objoid
 WHERE i.classoid IN ('pg_proc'::regclass, 'pg_class'::regclass)
   AND EXISTS (SELECT FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
                WHERE d.classid = i.classoid AND d.objid = i.objoid
                  AND d.deptype = 'e' AND e.extname = 'delivery_outbox')) x
 WHERE items <> default_items
 ORDER BY 1, 2});
	$fp{'sequences'} = $q->(qq{
SELECT schemaname, sequencename, last_value, increment_by, cache_size
  FROM pg_sequences WHERE schemaname IN $in_schemas ORDER BY 1, 2});
	return \%fp;
}

my $before = fingerprint($old);

# What the fingerprint must hold, so that "identical" means something.
like($before->{'rows of part.events'}, qr/^part\.events_p2\|/m,
	'old: the partitioned outbox has rows in a third partition');
like($before->{'dead letters of ord.runs_dead'}, qr/refused.*rejected/,
	'old: the dead letters are there');
like($before->{'table ACLs'}, qr/^tenant_a\.delivery_outbox\|r\|postgres\|.*postgres>relay:UPDATE/m,
	'old: the relay is granted on the outbox tables');
like($before->{'column ACLs'}, qr/^delivery_outbox\|acked_at\|postgres>monitor:SELECT$/m,
	'old: the monitor has column grants');
like($before->{'function ACLs'},
	qr/^outbox_claim\(integer,text,text,regclass\)\|postgres\|t\|.*postgres>outbox_relay:EXECUTE/m,
	'old: EXECUTE on the functions is granted');
for my $o (@outboxes)
{
	like($before->{"rows of $o"}, qr/,pending,.*,delivered,.*,acked,/s,
		"old: $o holds pending, delivered and acked rows");
}

# Dumps of app by the old and by the new pg_dump, restored into the new
# cluster at the end.
my $tempdir = PostgreSQL::Test::Utils::tempdir;
for my $which ([ 'old', $old_bindir ], [ 'new', $new_bindir ])
{
	my ($name, $bindir) = @$which;
	command_ok(
		[
			"$bindir/pg_dump", '-Fc', '-f', "$tempdir/app_$name.dump",
			'-d', $old->connstr('app')
		],
		"old: pg_dump -Fc of app by the $name pg_dump");
}

# PostgreSQL 15.20 keeps a version of every column of a user table in its
# attoptions (the reserved key pg_attver); 18.6 has no such key: its
# pg_dump dumps the key as ALTER TABLE ... ALTER COLUMN ... SET
# (pg_attver=...) and its server refuses that (unrecognized parameter), so
# pg_upgrade fails at "Restoring database schemas" for any database with a
# table, with or without this extension.  Where both hold, the test drops
# the key from the old cluster's user columns (a catalog update: none of
# these tables has a composite-typed column, whose stored values the
# version describes), says so, and goes on; docs/operations.md has the
# story for real clusters.
my $attver_sql = q{
SELECT count(*) FROM pg_catalog.pg_attribute
 WHERE attrelid >= 16384 AND attoptions::text LIKE '%pg_attver=%'};
my %attver_in = map { $_ => $old->safe_psql($_, $attver_sql) } qw(template1 postgres app);
my ($new_dump) = run_command([
	"$new_bindir/pg_dump", '-s', '-t', 'seed.delivery_outbox',
	'-d', $old->connstr('app') ]);
my $new_dumps_attver = $new_dump =~ /SET \(pg_attver=/;
note "old cluster: user columns with pg_attver: "
  . join(', ', map { "$_ $attver_in{$_}" } sort keys %attver_in)
  . "; the new pg_dump dumps the key: " . ($new_dumps_attver ? 'yes' : 'no');

my $old_settings = $old->safe_psql(
	'app', q{
SELECT pg_encoding_to_char(encoding), datcollate, datctype, datlocprovider
  FROM pg_database WHERE datname = 'template1'});
my ($encoding, $collate, $ctype, $provider) = split /\|/, $old_settings;
my $checksums = $old->safe_psql('app', 'SHOW data_checksums');
$old->stop;

###########################################################################
# The new cluster and pg_upgrade
###########################################################################

my $new = PostgreSQL::Test::Cluster->new('new',
	install_path => dirname($new_bindir));
# 18's initdb turns data checksums on by default; pg_upgrade wants the old
# cluster's setting.
my ($initdb_help) = run_command([ "$new_bindir/initdb", '--help' ]);
my @checksums =
	$checksums eq 'on' ? ('--data-checksums')
  : $initdb_help =~ /--no-data-checksums/ ? ('--no-data-checksums')
  :                                         ();
$new->init(
	extra => [
		"--encoding=$encoding", "--lc-collate=$collate",
		"--lc-ctype=$ctype",    @checksums,
		$provider eq 'i' ? () : ('--locale-provider=libc')
	]);
$new->append_conf('postgresql.conf',
	"shared_preload_libraries = 'delivery_outbox'\n" . $conf);

# Whether the new server takes pg_attver (in a transaction rolled back:
# the new cluster stays empty for pg_upgrade).
$new->start;
my ($probe_ret, $probe_out, $probe_err) = $new->psql(
	'postgres', q{
BEGIN;
CREATE TABLE attver_probe (a int);
ALTER TABLE attver_probe ALTER COLUMN a SET (pg_attver = 1);
ROLLBACK;}, on_error_stop => 1);
$new->stop;
my $new_refuses_attver =
  $probe_ret != 0 && $probe_err =~ /unrecognized parameter "pg_attver"/;
if ($new_dumps_attver && $new_refuses_attver && grep { $_ > 0 } values %attver_in)
{
	diag "$old_version marks every user column with attoptions pg_attver, "
	  . "${new_version}'s pg_dump dumps it and its server refuses it: pg_upgrade "
	  . "would fail for any table; dropping the key from the old cluster's user columns";
	$old->start;
	for my $db (grep { $attver_in{$_} > 0 } sort keys %attver_in)
	{
		$old->safe_psql(
			$db, q{
UPDATE pg_catalog.pg_attribute
   SET attoptions = (SELECT pg_catalog.array_agg(o) FROM pg_catalog.unnest(attoptions) o
                      WHERE o NOT LIKE 'pg_attver=%')
 WHERE attrelid >= 16384 AND attoptions::text LIKE '%pg_attver=%'});
		is($old->safe_psql($db, $attver_sql), '0',
			"old: $db: pg_attver dropped from the user columns");
	}
	$old->stop;
}

# pg_upgrade writes update_extensions.sql (and, before 15, its logs) into
# the directory it runs in.
my $rundir = PostgreSQL::Test::Utils::tempdir;
chdir $rundir or die "chdir $rundir: $!";

my @upgrade = (
	"$new_bindir/pg_upgrade", '--no-sync',
	'--old-bindir', $old_bindir,
	'--new-bindir', $new_bindir,
	'--old-datadir', $old->data_dir,
	'--new-datadir', $new->data_dir,
	'--old-port', $old->port,
	'--new-port', $new->port,
	'--socketdir', $new->host,
	'--copy',
	# no worker in the servers pg_upgrade starts (docs/operations.md)
	'--old-options', "-c delivery_outbox.database=''",
	'--new-options', "-c delivery_outbox.database=''",
	# keep its logs, to look at below
	'--retain');

my ($ok, $stdout, $stderr);
{
	local %ENV = (%ENV, PGHOST => $new->host);
	$ok = IPC::Run::run([ @upgrade, '--check' ], '>', \$stdout, '2>', \$stderr);
	ok($ok, 'pg_upgrade --check');
	like($stdout, qr/Clusters are compatible/, '... finds the clusters compatible')
	  or diag "stdout:\n$stdout\nstderr:\n$stderr";

	$ok = IPC::Run::run(\@upgrade, '>', \$stdout, '2>', \$stderr);
	ok($ok, 'pg_upgrade');
	like($stdout, qr/Upgrade Complete/, '... completes')
	  or diag "stdout:\n$stdout\nstderr:\n$stderr";
}
ok(!-e "$rundir/update_extensions.sql",
	'pg_upgrade asks for no ALTER EXTENSION UPDATE');
unlike($stdout, qr/update_extensions\.sql/, '... and says none');
if (!$ok)
{
	# the logs of a failed run stay in the new data directory
	for my $log (glob($new->data_dir . '/pg_upgrade_output.d/*/log/*.log'))
	{
		diag "$log:\n" . slurp_file($log);
	}
	BAIL_OUT('pg_upgrade failed');
}
chdir $FindBin::RealBin . '/..';
my @server_logs =
  glob($new->data_dir . '/pg_upgrade_output.d/*/log/pg_upgrade_server.log');
# (one of the --check run, one of the upgrade)
is(scalar @server_logs, 2, 'pg_upgrade kept its server logs');
my $server_log = join('', map { slurp_file($_) } @server_logs);
like($server_log, qr/ -b .*delivery_outbox\.database=''/,
	'... of servers started for the upgrade, with no database to serve');
unlike($server_log, qr/delivery_outbox sweeper started/,
	'no worker ran in the servers pg_upgrade started');

$new->start;
is($new->safe_psql('app', 'SHOW server_version_num') >= 180000 ? 1 : 0,
	1, 'the new cluster runs PostgreSQL 18 or later');

###########################################################################
# The same database
###########################################################################

my $after = fingerprint($new);
for my $part (sort keys %$before)
{
	next if ok($after->{$part} eq $before->{$part},
		"after pg_upgrade: $part identical");
	# the lines that differ, not two pages of text
	my %new_lines = map { $_ => 1 } split /\n/, $after->{$part};
	my %old_lines = map { $_ => 1 } split /\n/, $before->{$part};
	diag "only before:\n"
	  . join("\n", grep { !$new_lines{$_} } split /\n/, $before->{$part});
	diag "only after:\n"
	  . join("\n", grep { !$old_lines{$_} } split /\n/, $after->{$part});
}
is( $new->safe_psql(
		'app', q{
SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
       aclexplode(c.relacl) a
 WHERE a.privilege_type = 'MAINTAIN' AND a.grantee <> c.relowner
   AND n.nspname IN ('public', 'tenant_a', 'seed', 'part', 'ord')}),
	'0',
	'after pg_upgrade: MAINTAIN is the owners\' only');

###########################################################################
# The worker, relays, producers and the monitor on the new cluster
###########################################################################

my $worker = wait_for_worker($new, 'app');
ok($worker, 'the worker serves app on the new cluster');
like(slurp_file($new->logfile),
	qr/delivery_outbox sweeper started for database "app"/,
	'... and logs that it started');

# $sql as $role, in app; its output.
sub as_role
{
	my ($node, $role, $sql) = @_;
	return $node->safe_psql('app', "SET ROLE $role;\n$sql");
}

my %listeners;
for my $channel (sort { $a cmp $b } map { $_->[1] } values %outboxes)
{
	next if $listeners{$channel};
	$listeners{$channel} = $new->background_psql('app');
	$listeners{$channel}->query_safe(qq{LISTEN "$channel"});
}

# The ids notified on $channel since the last call, comma-separated.
sub notified
{
	my ($channel, $n) = @_;
	my $session = $listeners{$channel};
	my @got;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (@got < $n && time < $deadline)
	{
		my $out = $session->query_safe('SELECT 1');
		push @got, $1
		  while $out =~ /^Asynchronous notification "\Q$channel\E" with payload "(\d+)"/mg;
		select(undef, undef, undef, 0.05) if @got < $n;
	}
	return join(',', sort { $a <=> $b } @got);
}
notified($_, 0) for keys %listeners;

for my $o (@outboxes)
{
	my $channel = $outboxes{$o}[1];

	# the relay: the pending row, and the released one, claimed and acked
	my $claimed = as_role(
		$new, 'relay', qq{
SELECT string_agg(id::text || ':' || delivery_attempts, ',' ORDER BY id)
  FROM outbox_claim(10, 'agent:pending', outbox => '$o')});
	my ($pending_id) =
	  $new->safe_psql('app', "SELECT id FROM $o WHERE recipient = 'agent:pending'");
	is($claimed, "$pending_id:1", "$o: the relay claims the pending row");
	my ($released_id) =
	  $new->safe_psql('app', "SELECT id FROM $o WHERE recipient = 'agent:released'");
	is( as_role(
			$new, 'relay', qq{
SELECT outbox_ack($pending_id, outbox => '$o');
SELECT string_agg(id::text, ',') FROM outbox_claim(10, 'agent:released', outbox => '$o')}
		),
		"t\n$released_id",
		"$o: ... acks it, and claims the released row");
	is( as_role(
			$new, 'relay',
			"SELECT outbox_ack(ARRAY[$released_id], outbox => '$o')"),
		'1',
		"$o: ... and acks that");
	is( $new->safe_psql(
			'app', qq{
SELECT string_agg(delivery_state, ',' ORDER BY id) FROM $o
 WHERE recipient IN ('agent:pending', 'agent:released')}),
		'acked,acked',
		"$o: both are acked");

	# the producer: a taken dedup key, outbox_enqueue, a plain INSERT
	my $taken = $new->safe_psql('app',
		"SELECT id FROM $o WHERE dedup_key = 'k-scheduled'");
	is( as_role(
			$new, 'producer', qq{
SELECT outbox_enqueue('agent:scheduled', 'work', '\\xff',
                      dedup_key => 'k-scheduled', outbox => '$o')}),
		$taken,
		"$o: a dedup key taken before the upgrade is still taken");
	my $created_at =
	  $o eq 'seed.delivery_outbox' ? "now() AT TIME ZONE 'UTC'" : 'now()';
	# (no RETURNING: the producer may not read the table)
	as_role(
		$new, 'producer', qq{
SELECT outbox_enqueue('agent:new', 'work', '\\x10', outbox => '$o');
INSERT INTO $o (recipient, kind, payload, created_at)
VALUES ('agent:new', 'work', '\\x11', $created_at)});
	my @ids = split /\n/,
	  $new->safe_psql('app',
		"SELECT id FROM $o WHERE recipient = 'agent:new' ORDER BY id");
	is(scalar @ids, 2, "$o: the producer enqueues and inserts");
	is(notified($channel, 2), join(',', @ids),
		"$o: ... and both rows are notified on $channel");
	is( as_role(
			$new, 'relay', qq{
SELECT string_agg(id::text, ',' ORDER BY id)
  FROM outbox_claim(10, 'agent:new', outbox => '$o')}),
		join(',', @ids),
		"$o: the relay claims them");
	is( as_role(
			$new, 'monitor', qq{
SELECT pending + delivered > 0 FROM outbox_stats('$o')}),
		't',
		"$o: the monitor reads outbox_stats");
}

# The ordered group: nothing while its head is in flight; after the ack,
# the two rows behind it, in id order.
my @ordered = split /\n/,
  $new->safe_psql('app',
	"SELECT id FROM ord.runs WHERE recipient = 'agent:ordered' ORDER BY id");
is( as_role(
		$new, 'relay', q{
SELECT count(*) FROM outbox_claim(10, 'agent:ordered', outbox => 'ord.runs')}),
	'0',
	'ord.runs: nothing of the ordered group while its run is in flight');
is( as_role(
		$new, 'relay', qq{
SELECT outbox_ack($ordered[0], outbox => 'ord.runs');
SELECT string_agg(id::text, ',') FROM outbox_claim(10, 'agent:ordered', outbox => 'ord.runs')}
	),
	"t\n$ordered[1],$ordered[2]",
	'ord.runs: after its ack, the rest of the group in id order');

# The partitioned outbox: outbox_enqueue makes the partitions its rows need
# and the ones ahead; after plain INSERTs, the worker's sweep does.
sub last_partition
{
	return $new->safe_psql(
		'app', q{
SELECT max(substring(c.relname FROM '\d+$')::int)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'part.events'::regclass});
}

# The partition number of the sequence's next value.
sub next_partition
{
	return $new->safe_psql(
		'app', q{
SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END / 4
  FROM part.events_id_seq});
}
my $last = last_partition();
is($last, next_partition() + 1,
	'part.events: the partition after the next id\'s exists after the upgrade');
as_role(
	$new, 'producer', q{
SELECT count(*) FROM outbox_enqueue_batch(
    array_fill('agent:more'::text, ARRAY[5]), array_fill('work'::text, ARRAY[5]),
    array_fill('\x12'::bytea, ARRAY[5]), outbox => 'part.events')});
cmp_ok(last_partition(), '>', $last,
	'part.events: outbox_enqueue makes new partitions');
is(last_partition(), next_partition() + 1, '... up to the one ahead');
$last = last_partition();
as_role(
	$new, 'producer', q{
INSERT INTO part.events (recipient, kind, payload)
SELECT 'agent:plain', 'work', '\x13' FROM generate_series(1, 4)});
wait_for_sweep($new, after => $new->safe_psql('app', 'SELECT clock_timestamp()'));
cmp_ok(last_partition(), '>', $last,
	'part.events: after plain INSERTs the worker makes new partitions');
is(last_partition(), next_partition() + 1, '... up to the one ahead');

###########################################################################
# pg_dump + pg_restore across the majors, into the new cluster
###########################################################################

# What a restore must bring back: all but the OIDs (a restore makes new
# ones).
my @restored_parts = grep { $_ ne 'registry, with OIDs' } sort keys %$before;

# The old pg_dump's dump restores into the new server as it is.
$new->safe_psql('postgres', 'CREATE DATABASE restored_old');
command_ok(
	[
		"$new_bindir/pg_restore", '--exit-on-error', '-d',
		$new->connstr('restored_old'), "$tempdir/app_old.dump"
	],
	'the old pg_dump\'s dump restores into the new server');
my $restored = fingerprint($new, 'restored_old');
for my $part (@restored_parts)
{
	is($restored->{$part}, $before->{$part},
		"restored from the old pg_dump's dump: $part identical");
}

# The new pg_dump's dump: as it is, where the new pg_dump does not dump
# pg_attver; else its CREATE TABLE entries (which hold the ALTER COLUMN
# ... SET (pg_attver=...) lines) fail and those tables are lost, which is
# PostgreSQL's and what docs/operations.md warns of.
$new->safe_psql('postgres', 'CREATE DATABASE restored_new');
my ($restore_ok, $restore_out, $restore_err);
$restore_ok = IPC::Run::run(
	[
		"$new_bindir/pg_restore", '-d', $new->connstr('restored_new'),
		"$tempdir/app_new.dump"
	],
	'>', \$restore_out, '2>', \$restore_err);
if ($new_dumps_attver && $new_refuses_attver)
{
	ok(!$restore_ok && $restore_err =~ /unrecognized parameter "pg_attver"/,
		'the new pg_dump\'s dump fails to restore on pg_attver');
	is( $new->safe_psql(
			'restored_new', q{SELECT to_regclass('tenant_a.delivery_outbox') IS NULL}),
		't',
		'... and loses the tables');
}
else
{
	ok($restore_ok, 'the new pg_dump\'s dump restores into the new server')
	  or diag $restore_err;
	$restored = fingerprint($new, 'restored_new');
	for my $part (@restored_parts)
	{
		is($restored->{$part}, $before->{$part},
			"restored from the new pg_dump's dump: $part identical");
	}
}

$_->quit for values %listeners;
$new->stop;

done_testing();
