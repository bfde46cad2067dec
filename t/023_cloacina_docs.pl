
# Copyright (c) 2026, delivery_outbox developers

# t/023_cloacina_docs.pl
#
# docs/coming-from-cloacina.md, followed literally.  On a cloacina-shaped
# database (a tenant schema owned by its owning role, migration 027/028's
# delivery_outbox with rows in every state, the data layer's role), every
# block of the page marked
#
#     <!-- test: role=ROLE db=DB -->        before a ```sql block
#     <!-- test: sh db=DB table=TABLE -->   before a ```sh block
#
# is run in page order, as written: an sql block through psql as ROLE in
# DB; an sh block with bash from the top of the tree (the server's PGHOST
# and PGPORT in the environment), stopped with SIGTERM once every row of
# TABLE is acked.  A ```text block right after a marked block is the
# output it must print: psql's (stdout and stderr, without the
# "psql:<stdin>:N: " prefix of its messages; trailing blank lines aside),
# or the sh block's stdout
# (compared as sorted lines: a relay's push order varies).  A marked block
# without one must succeed.  So the GRANTs the page lists are exactly what
# each role needs (the roles hold nothing else), and the five-minute path
# delivers.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

my $page = 'docs/coming-from-cloacina.md';
plan skip_all => "python3-psycopg is needed for the page's relay"
  unless system('/usr/bin/python3 -c "import psycopg" 2>/dev/null') == 0;

my $node = PostgreSQL::Test::Cluster->new('docs');
$node->init;
$node->start;

# The starting point the page assumes: what cloacina's migrations and data
# layer leave.  ids 1-3 pending, 4 delivered and never acked, 5-6 acked,
# 7 re-addressed by reassign_open_rows (pending, one attempt, no
# delivered_at).
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql(
	'app', q{
CREATE ROLE tenant_a_owner LOGIN;
CREATE ROLE cloacina_app LOGIN;
CREATE SCHEMA tenant_a AUTHORIZATION tenant_a_owner;
SET ROLE tenant_a_owner;
CREATE TABLE tenant_a.delivery_outbox (
    id                BIGSERIAL PRIMARY KEY,
    recipient         TEXT NOT NULL,
    kind              TEXT NOT NULL,
    tenant_id         TEXT,
    payload           BYTEA NOT NULL,
    delivery_state    TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    created_at        TIMESTAMP NOT NULL,
    delivered_at      TIMESTAMP,
    acked_at          TIMESTAMP
);
CREATE INDEX idx_delivery_outbox_recipient_open
    ON tenant_a.delivery_outbox (recipient, id) WHERE delivery_state <> 'acked';
CREATE INDEX idx_delivery_outbox_open_age
    ON tenant_a.delivery_outbox (delivery_state, created_at) WHERE delivery_state <> 'acked';
CREATE FUNCTION tenant_a.delivery_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('delivery_outbox', NEW.id::text);
    RETURN NEW;
END
$$;
CREATE TRIGGER delivery_outbox_notify_trg AFTER INSERT ON tenant_a.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION tenant_a.delivery_outbox_notify();
INSERT INTO tenant_a.delivery_outbox
    (recipient, kind, payload, delivery_state, delivery_attempts, created_at, delivered_at, acked_at)
VALUES
    ('agent:billing',  'invoice', '\x01', 'pending',   0, timezone('UTC', now()) - interval '2 hours', NULL, NULL),
    ('agent:billing',  'invoice', '\x02', 'pending',   0, timezone('UTC', now()) - interval '2 hours', NULL, NULL),
    ('agent:shipping', 'parcel',  '\x03', 'pending',   0, timezone('UTC', now()) - interval '2 hours', NULL, NULL),
    ('agent:shipping', 'parcel',  '\x04', 'delivered', 1, timezone('UTC', now()) - interval '2 hours',
                                          timezone('UTC', now()) - interval '1 hour', NULL),
    ('agent:billing',  'invoice', '\x05', 'acked',     1, timezone('UTC', now()) - interval '2 hours',
                                          timezone('UTC', now()) - interval '1 hour', timezone('UTC', now()) - interval '1 hour'),
    ('agent:billing',  'invoice', '\x06', 'acked',     1, timezone('UTC', now()) - interval '2 hours',
                                          timezone('UTC', now()) - interval '1 hour', timezone('UTC', now()) - interval '1 hour'),
    ('agent:audit',    'invoice', '\x07', 'pending',   1, timezone('UTC', now()) - interval '2 hours', NULL, NULL);
GRANT USAGE ON SCHEMA tenant_a TO cloacina_app;
GRANT SELECT, INSERT, UPDATE ON tenant_a.delivery_outbox TO cloacina_app;
GRANT USAGE ON SEQUENCE tenant_a.delivery_outbox_id_seq TO cloacina_app;
});

# The marked blocks, in page order.
open my $fh, '<', $page or die "$page: $!";
my $text = do { local $/; <$fh> };
close $fh;

# a fenced block's body, its indentation (that of the opening fence) removed
sub body
{
	my ($indent, $body) = @_;
	$body =~ s/^\Q$indent\E//mg;
	return $body;
}

my @blocks;
while ($text =~
	m{<!--\s*test:\s*([^>]*?)\s*-->\s*\n([ \t]*)```(sql|sh)\n(.*?)\n[ \t]*```[ \t]*\n((?:[ \t]*\n)*([ \t]*)```text\n(.*?)\n[ \t]*```[ \t]*\n)?}gs
  )
{
	my ($attrs, $indent, $lang, $body, $has_expect, $eindent, $expect) =
	  ($1, $2, $3, $4, $5, $6, $7);
	my %a = map { /^([^=]+)=(.*)$/ ? ($1 => $2) : ($_ => 1) } split ' ', $attrs;
	my $line = 1 + (() = substr($text, 0, $-[0]) =~ /\n/g);
	push @blocks,
	  {
		attrs => \%a,
		lang => $lang,
		body => body($indent, $body) . "\n",
		expect => defined $has_expect ? body($eindent, $expect) . "\n" : undef,
		line => $line,
	  };
}
cmp_ok(scalar @blocks, '>=', 10, "$page: marked blocks found");

my $host = $node->host;
my $port = $node->port;

foreach my $b (@blocks)
{
	my $where = "$page line $b->{line}";
	if ($b->{lang} eq 'sql')
	{
		my ($role, $db) = @{ $b->{attrs} }{qw(role db)};
		my $out = '';
		my $ok = IPC::Run::run(
			[
				'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-h', $host,
				'-p', $port, '-U', $role, '-d', $db, '-f', '-'
			],
			'<', \$b->{body}, '>&', \$out);
		$out =~ s/^psql:<stdin>:\d+: //mg;
		$out =~ s/[ \t]+$//mg;
		$out =~ s/\s*\z/\n/;		# psql's blank line after a result
		ok($ok, "$where: the block runs as $role in $db")
		  or diag($out);
		if (defined $b->{expect})
		{
			(my $want = $b->{expect}) =~ s/[ \t]+$//mg;
			$want =~ s/\s*\z/\n/;
			is($out, $want, "$where: it prints what the page shows");
		}
		else
		{
			note("$where printed:\n$out");
		}
	}
	else
	{
		my ($db, $table) = @{ $b->{attrs} }{qw(db table)};
		my ($out, $err) = ('', '');
		local $ENV{PGHOST} = $host;
		local $ENV{PGPORT} = $port;
		my $h = IPC::Run::start([ 'bash', '-c', $b->{body} ],
			'<', \undef, '>', \$out, '2>', \$err);
		my $done = 0;
		foreach (1 .. 600)
		{
			$done = $node->safe_psql($db,
				"SELECT bool_and(delivery_state = 'acked') FROM $table") eq 't';
			last if $done || !$h->pumpable;
			usleep(100_000);
		}
		ok($done, "$where: the command acks every row of $table")
		  or diag($err);
		$h->signal('TERM');
		$h->finish;
		ok($h->result == 0, "$where: it stops cleanly on SIGTERM")
		  or diag($err);
		note("$where printed:\n$out");
		if (defined $b->{expect})
		{
			my $got = join "\n", sort split /\n/, $out;
			my $want = join "\n", sort split /\n/, $b->{expect};
			is($got, $want, "$where: it prints what the page shows (sorted)");
		}
	}
}

$node->stop;
done_testing();
