/*-------------------------------------------------------------------------
 *
 * relay.c
 *		A small libpq client for bench/run.sh: a notification counter for
 *		the enqueue workloads and a minimal relay for the latency run.
 *
 * Build (bench/run.sh does this):
 *
 *	cc -O2 -Wall -Wextra -o relay bench/relay.c \
 *		-I"$(pg_config --includedir)" -L"$(pg_config --libdir)" -lpq
 *
 * Connection parameters come from the environment (PGHOST, PGPORT,
 * PGDATABASE, PGUSER), as for psql.
 *
 * relay listen CHANNEL TABLE IDCOL yes|no
 *		TRUNCATEs TABLE, LISTENs on CHANNEL, prints "ready PID" on stdout, and
 *		counts the notifications it receives, keeping their number, the sum
 *		and the XOR of their payloads (row ids).  On SIGTERM or SIGUSR1 it
 *		reads the number, sum and XOR of IDCOL over TABLE; with "yes" it then
 *		keeps reading until it has as many notifications as rows, or none has
 *		arrived for IDLE_MS (at most FINISH_MS in all).  It prints
 *		"rows=N rows_sum=S rows_xor=X notifications=N sum=S xor=X senders=P"
 *		and exits 0, P being the number of distinct backends that sent the
 *		notifications (the producers in notify = commit mode, the background
 *		worker in deferred mode).  TABLE and IDCOL are trusted (run.sh's own).
 *
 * relay relay CHANNEL [ackclaim] [async] [coalesce]
 *		The relay loop of README.md: LISTEN first, then drain
 *		(outbox_claim(100) in one transaction, outbox_ack(ids) in the next,
 *		repeated while a full batch comes back), then wait on the socket with
 *		poll(); every wake-up drains again.  A 1 s poll timeout is the safety
 *		net.  On SIGTERM it prints
 *		"wakeups=W drains=D claimed=C acked=A" and exits 0.  The latency of
 *		each row is read afterwards from the table (acked_at - created_at,
 *		both written server-side with the wall clock).
 *
 *		With "ackclaim" a drain is a chain of single statements,
 *		outbox_ack_claim(previous ids, 100): each acks the batch claimed by
 *		the one before and claims the next in the same transaction (one
 *		round trip and one commit per batch instead of two); the chain ends
 *		with the call that acks the last batch and claims nothing.  With
 *		"async" the relay's session runs SET synchronous_commit = off first
 *		(a claim or ack lost in a crash only means a redelivery).  With
 *		"coalesce" the outbox_ack_claim chain runs across wake-ups, paced
 *		while busy: after a short batch the relay waits RELAY_COALESCE_MS
 *		(default 5) and then acks it and claims what arrived meanwhile in
 *		one call; an idle relay calls at once on a wake-up (see
 *		run_relay_coalesce).  RELAY_OUTBOX, when set, names the outbox the
 *		relay claims from and acks to (outbox => ...; default the
 *		extension's own).  Used by bench/peers.sh.
 *
 * Exit status 1 on a connection or query error (message on stderr).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

#define IDLE_MS		3000		/* listen: give up this long after the last
								 * one */
#define FINISH_MS	60000		/* listen: never wait longer than this */
#define CLAIM_BATCH	100
#define MAX_SENDERS	64			/* listen: distinct sending backends counted */

static volatile sig_atomic_t stop_requested = 0;

/* RELAY_OUTBOX: the outbox of a relay's calls, NULL for the default one */
static const char *relay_outbox = NULL;

static void
on_stop(int signo)
{
	(void) signo;
	stop_requested = 1;
}

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
die_conn(PGconn *conn, const char *what)
{
	fprintf(stderr, "relay: %s: %s", what, PQerrorMessage(conn));
	PQfinish(conn);
	exit(1);
}

static PGconn *
connect_and_listen(const char *channel)
{
	PGconn	   *conn = PQconnectdb("");
	PGresult   *res;
	char	   *ident;
	char		sql[512];

	if (PQstatus(conn) != CONNECTION_OK)
		die_conn(conn, "connection failed");
	ident = PQescapeIdentifier(conn, channel, strlen(channel));
	if (ident == NULL)
		die_conn(conn, "bad channel name");
	snprintf(sql, sizeof(sql), "LISTEN %s", ident);
	PQfreemem(ident);
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die_conn(conn, "LISTEN failed");
	PQclear(res);
	return conn;
}

/*
 * The relay's statements, prepared once per connection (as a driver's
 * statement cache does): PQexecParams would parse, analyze and plan the
 * call afresh each time, about a sixth of the relay's backend.
 */
static const char *const relay_statements[][2] = {
	{"claim", "SELECT coalesce(pg_catalog.array_agg(id ORDER BY id), '{}')::text,"
	" pg_catalog.count(*) FROM outbox_claim(100, outbox => $1::regclass)"},
	{"ack", "SELECT outbox_ack($1::bigint[], outbox => $2::regclass)"},
	{"ackclaim", "SELECT coalesce(pg_catalog.array_agg(id ORDER BY id), '{}')::text,"
	" pg_catalog.count(*)"
	" FROM outbox_ack_claim($1::bigint[], 100, outbox => $2::regclass)"},
};

static void
prepare_statements(PGconn *conn)
{
	size_t		i;

	for (i = 0; i < sizeof(relay_statements) / sizeof(relay_statements[0]); i++)
	{
		PGresult   *res = PQprepare(conn, relay_statements[i][0],
									relay_statements[i][1], 0, NULL);

		/* outbox_ack_claim is 1.3's: without it, "ackclaim" stays unprepared */
		if (PQresultStatus(res) != PGRES_COMMAND_OK &&
			strcmp(relay_statements[i][0], "ackclaim") != 0)
			die_conn(conn, relay_statements[i][1]);
		PQclear(res);
	}
}

/* Wait until the socket is readable, a signal arrives, or timeout_ms pass. */
static void
wait_socket(PGconn *conn, int timeout_ms)
{
	struct pollfd pfd;

	pfd.fd = PQsocket(conn);
	pfd.events = POLLIN;
	pfd.revents = 0;
	if (poll(&pfd, 1, timeout_ms) < 0 && errno != EINTR)
	{
		perror("relay: poll");
		exit(1);
	}
}

static void
exec_command(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die_conn(conn, sql);
	PQclear(res);
}

static int
run_listen(const char *channel, const char *table, const char *idcol,
		   int wait_for_all)
{
	PGconn	   *conn;
	long		count = 0;
	uint64_t	sum = 0;
	uint64_t	xor = 0;
	long		expected = -1;
	int			pids[MAX_SENDERS];
	int			npids = 0;
	int64_t		last_ms;
	int64_t		stop_ms = 0;
	char		sql[512];
	char		rows[3][32] = {"0", "0", "0"};

	conn = connect_and_listen(channel);
	snprintf(sql, sizeof(sql), "TRUNCATE %s", table);
	exec_command(conn, sql);
	last_ms = now_ms();

	printf("ready %d\n", (int) getpid());
	fflush(stdout);

	for (;;)
	{
		PGnotify   *n;
		int64_t		t;

		if (!PQconsumeInput(conn))
			die_conn(conn, "reading notifications failed");
		while ((n = PQnotifies(conn)) != NULL)
		{
			uint64_t	id = strtoull(n->extra, NULL, 10);
			int			i;

			count++;
			sum += id;
			xor ^= id;
			for (i = 0; i < npids && pids[i] != n->be_pid; i++)
				;
			if (i == npids && npids < MAX_SENDERS)
				pids[npids++] = n->be_pid;
			PQfreemem(n);
			last_ms = now_ms();
		}

		t = now_ms();
		if (stop_requested && expected < 0)
		{
			PGresult   *res;
			int			i;

			snprintf(sql, sizeof(sql),
					 "SELECT pg_catalog.count(*), coalesce(pg_catalog.sum(%s), 0),"
					 " coalesce(pg_catalog.bit_xor(%s), 0) FROM %s",
					 idcol, idcol, table);
			res = PQexec(conn, sql);
			if (PQresultStatus(res) != PGRES_TUPLES_OK)
				die_conn(conn, "counting the rows failed");
			for (i = 0; i < 3; i++)
				snprintf(rows[i], sizeof(rows[i]), "%s", PQgetvalue(res, 0, i));
			expected = wait_for_all ? atol(rows[0]) : 0;
			PQclear(res);
			stop_ms = t = now_ms();
			if (last_ms < stop_ms)
				last_ms = stop_ms;
			continue;			/* read what came in during the query */
		}
		if (expected >= 0 &&
			(count >= expected || t - last_ms >= IDLE_MS ||
			 t - stop_ms >= FINISH_MS))
			break;

		wait_socket(conn, expected >= 0 ? 100 : 1000);
	}

	printf("rows=%s rows_sum=%s rows_xor=%s notifications=%ld sum=%" PRIu64
		   " xor=%" PRIu64 " senders=%d\n",
		   rows[0], rows[1], rows[2], count, sum, xor, npids);
	PQfinish(conn);
	return 0;
}

/*
 * One drain: claim up to CLAIM_BATCH rows (one transaction), ack them (the
 * next).  Returns the number claimed.
 */
static int
drain_once(PGconn *conn, long *claimed, long *acked)
{
	PGresult   *res;
	int			nrows;
	const char *param[2];

	param[0] = relay_outbox;
	res = PQexecPrepared(conn, "claim", 1, param, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		die_conn(conn, "outbox_claim failed");
	nrows = atoi(PQgetvalue(res, 0, 1));
	if (nrows == 0)
	{
		PQclear(res);
		return 0;
	}
	*claimed += nrows;

	/* here a real relay pushes the rows to their recipients */
	param[0] = PQgetvalue(res, 0, 0);
	param[1] = relay_outbox;
	{
		PGresult   *ack = PQexecPrepared(conn, "ack", 2, param, NULL, NULL, 0);

		if (PQresultStatus(ack) != PGRES_TUPLES_OK)
			die_conn(conn, "outbox_ack failed");
		*acked += atol(PQgetvalue(ack, 0, 0));
		PQclear(ack);
	}
	PQclear(res);
	return nrows;
}

/*
 * One outbox_ack_claim call: ack *ids (the batch the previous call claimed,
 * *previous rows; none when NULL) and claim up to 100 rows, whose ids
 * replace *ids (NULL when none came back).  Returns the number claimed.
 */
static int
ackclaim_call(PGconn *conn, char **ids, long *claimed, long *acked,
			  int *previous)
{
	PGresult   *res;
	const char *param[2];
	int			nrows;

	param[0] = *ids != NULL ? *ids : "{}";
	param[1] = relay_outbox;
	res = PQexecPrepared(conn, "ackclaim", 2, param, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		die_conn(conn, "outbox_ack_claim failed");
	*acked += *previous;
	nrows = atoi(PQgetvalue(res, 0, 1));
	*claimed += nrows;
	free(*ids);
	*ids = NULL;
	if (nrows > 0)
	{
		/* here a real relay pushes the rows to their recipients */
		*ids = strdup(PQgetvalue(res, 0, 0));
		if (*ids == NULL)
		{
			fprintf(stderr, "relay: out of memory\n");
			exit(1);
		}
	}
	*previous = nrows;
	PQclear(res);
	return nrows;
}

/*
 * One drain with outbox_ack_claim: ack what the previous call claimed and
 * claim the next batch, one statement (one transaction) per batch, until a
 * call claims nothing; so nothing claimed stays unacked when it returns.
 */
static void
drain_ackclaim(PGconn *conn, long *claimed, long *acked)
{
	char	   *ids = NULL;
	int			previous = 0;

	while (ackclaim_call(conn, &ids, claimed, acked, &previous) > 0)
		;
}

/*
 * The "coalesce" loop: outbox_ack_claim chained across wake-ups, its calls
 * paced while the relay is busy.  Every relay is woken by every row's
 * notification, so under a stream each call would claim a row or two:
 * the round trip and the statement's fixed cost then dominate.  Instead,
 * after a call that claimed a short batch (or came back empty while
 * wake-ups were queued, rows the other relays took), the relay waits
 * coalesce_ms, reading the notifications that arrive, then acks the batch
 * it holds and claims everything that arrived meanwhile, in one call.  A
 * full batch is followed at once; an idle relay (nothing held, nothing
 * queued) waits for the next wake-up and calls at once, so a lone row is
 * not delayed.  A row's ack waits at most coalesce_ms longer; the chain
 * ends with nothing unacked only on a call that claims nothing.
 */
static int	coalesce_ms = 5;

/* Read the notifications libpq has; returns how many. */
static long
take_notifies(PGconn *conn)
{
	PGnotify   *n;
	long		count = 0;

	if (!PQconsumeInput(conn))
		die_conn(conn, "reading notifications failed");
	while ((n = PQnotifies(conn)) != NULL)
	{
		count++;
		PQfreemem(n);
	}
	return count;
}

static int
run_relay_coalesce(PGconn *conn)
{
	long		wakeups = 0;
	long		calls = 0;
	long		claimed = 0;
	long		acked = 0;
	char	   *ids = NULL;
	int			previous = 0;
	const char *env = getenv("RELAY_COALESCE_MS");

	if (env != NULL && atoi(env) >= 0)
		coalesce_ms = atoi(env);
	printf("ready %d\n", (int) getpid());
	fflush(stdout);

	for (;;)
	{
		int			nrows;
		long		queued;

		calls++;
		nrows = ackclaim_call(conn, &ids, &claimed, &acked, &previous);
		if (nrows >= 100)
			continue;			/* a full batch: more is waiting */
		queued = take_notifies(conn);
		wakeups += queued;
		if (stop_requested)
		{
			if (ids == NULL)
				break;
			continue;			/* ack what is held (and claim on) */
		}
		if (ids != NULL || queued > 0)
		{
			/* busy: let the next batch gather */
			int64_t		until = now_ms() + coalesce_ms;

			while (!stop_requested && now_ms() < until)
			{
				wait_socket(conn, (int) (until - now_ms()));
				wakeups += take_notifies(conn);
			}
			continue;
		}
		/* idle: the next wake-up, or the 1 s safety net */
		wait_socket(conn, 1000);
		wakeups += take_notifies(conn);
		if (stop_requested)
			break;
	}

	printf("wakeups=%ld drains=%ld claimed=%ld acked=%ld\n",
		   wakeups, calls, claimed, acked);
	PQfinish(conn);
	return 0;
}

static int
run_relay(const char *channel, int ackclaim, int async, int coalesce)
{
	PGconn	   *conn = connect_and_listen(channel);
	long		wakeups = 0;
	long		drains = 0;
	long		claimed = 0;
	long		acked = 0;
	int			need_drain = 1; /* LISTEN first, then drain */

	prepare_statements(conn);
	if (async)
		exec_command(conn, "SET synchronous_commit = off");
	if (coalesce)
		return run_relay_coalesce(conn);

	printf("ready %d\n", (int) getpid());
	fflush(stdout);

	while (!stop_requested)
	{
		PGnotify   *n;

		if (need_drain)
		{
			drains++;
			if (ackclaim)
				drain_ackclaim(conn, &claimed, &acked);
			else
				while (drain_once(conn, &claimed, &acked) == CLAIM_BATCH)
					;
			need_drain = 0;
		}

		/* wake-ups that arrived while we were draining are in libpq already */
		if (!PQconsumeInput(conn))
			die_conn(conn, "reading notifications failed");
		while ((n = PQnotifies(conn)) != NULL)
		{
			wakeups++;
			need_drain = 1;
			PQfreemem(n);
		}
		if (need_drain)
			continue;

		wait_socket(conn, 1000);
		if (!stop_requested)
			need_drain = 1;		/* a wake-up, or the timeout safety net */
		if (!PQconsumeInput(conn))
			die_conn(conn, "reading notifications failed");
		while ((n = PQnotifies(conn)) != NULL)
		{
			wakeups++;
			PQfreemem(n);
		}
	}

	printf("wakeups=%ld drains=%ld claimed=%ld acked=%ld\n",
		   wakeups, drains, claimed, acked);
	PQfinish(conn);
	return 0;
}

int
main(int argc, char **argv)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;			/* no SA_RESTART: poll() must return EINTR */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	relay_outbox = getenv("RELAY_OUTBOX");

	if (argc == 6 && strcmp(argv[1], "listen") == 0)
		return run_listen(argv[2], argv[3], argv[4],
						  strcmp(argv[5], "yes") == 0);
	if (argc >= 3 && argc <= 6 && strcmp(argv[1], "relay") == 0)
	{
		int			ackclaim = 0;
		int			async = 0;
		int			coalesce = 0;
		int			i;

		for (i = 3; i < argc; i++)
		{
			if (strcmp(argv[i], "ackclaim") == 0)
				ackclaim = 1;
			else if (strcmp(argv[i], "async") == 0)
				async = 1;
			else if (strcmp(argv[i], "coalesce") == 0)
				coalesce = 1;
			else
				break;
		}
		if (i == argc)
			return run_relay(argv[2], ackclaim, async, coalesce);
	}

	fprintf(stderr,
			"usage: %s listen CHANNEL TABLE IDCOL yes|no\n"
			"       %s relay CHANNEL [ackclaim] [async] [coalesce]\n", argv[0], argv[0]);
	return 2;
}
