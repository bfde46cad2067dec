/*-------------------------------------------------------------------------
 *
 * pgq_consumer.c
 *		A PgQ batch consumer for bench/peers.sh, the PgQ counterpart of
 *		bench/relay.c's relay.
 *
 * Build (bench/peers.sh does this):
 *
 *	cc -O2 -Wall -Wextra -o pgq_consumer bench/peers/pgq_consumer.c \
 *		-I"$(pg_config --includedir)" -L"$(pg_config --libdir)" -lpq
 *
 * pgq_consumer QUEUE CONSUMER POLL_MS
 *		Registers CONSUMER on QUEUE (pgq.register_consumer; a no-op if it is
 *		registered already), prints "ready PID", then loops:
 *		pgq.next_batch(QUEUE, CONSUMER) in its own transaction; when it
 *		returns a batch, one transaction (one round trip) inserts every
 *		event of the batch into peers_done (queue, ev_id, ev_time,
 *		clock_timestamp()) and calls pgq.finish_batch, so an event is
 *		recorded as done exactly when its batch's completion commits; when
 *		there is no batch (no new tick), it sleeps POLL_MS.  PgQ sends no
 *		wake-up: a consumer polls, and events become visible only once the
 *		ticker has closed a tick after them.  On SIGTERM it prints
 *		"batches=B events_all_consumers=E empty=N" and exits 0
 *		(E counts peers_done, every consumer's rows).
 *
 * Connection parameters come from the environment (PGHOST, PGPORT,
 * PGDATABASE, PGUSER).  Exit status 1 on a connection or query error.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

static volatile sig_atomic_t stop_requested = 0;

static void
on_stop(int signo)
{
	(void) signo;
	stop_requested = 1;
}

static void
die_conn(PGconn *conn, const char *what)
{
	fprintf(stderr, "pgq_consumer: %s: %s", what, PQerrorMessage(conn));
	PQfinish(conn);
	exit(1);
}

/* Sleep ms milliseconds, or less if a signal arrives. */
static void
sleep_ms(int ms)
{
	struct timespec ts;

	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (long) (ms % 1000) * 1000000L;
	(void) nanosleep(&ts, NULL);
}

int
main(int argc, char **argv)
{
	struct sigaction sa;
	PGconn	   *conn;
	PGresult   *res;
	const char *param[2];
	long		batches = 0;
	long		events = 0;
	long		empty = 0;
	int			poll_ms;
	char	   *queue_lit;

	if (argc != 4)
	{
		fprintf(stderr, "usage: %s QUEUE CONSUMER POLL_MS\n", argv[0]);
		return 2;
	}
	poll_ms = atoi(argv[3]);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	conn = PQconnectdb("");
	if (PQstatus(conn) != CONNECTION_OK)
		die_conn(conn, "connection failed");
	param[0] = argv[1];
	param[1] = argv[2];
	res = PQexecParams(conn, "SELECT pgq.register_consumer($1, $2)",
					   2, NULL, param, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		die_conn(conn, "pgq.register_consumer failed");
	PQclear(res);
	queue_lit = PQescapeLiteral(conn, argv[1], strlen(argv[1]));
	if (queue_lit == NULL)
		die_conn(conn, "bad queue name");

	printf("ready %d\n", (int) getpid());
	fflush(stdout);

	while (!stop_requested)
	{
		char		sql[512];
		long long	batch_id;

		res = PQexecParams(conn, "SELECT pgq.next_batch($1, $2)",
						   2, NULL, param, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			die_conn(conn, "pgq.next_batch failed");
		if (PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			empty++;
			sleep_ms(poll_ms);
			continue;
		}
		batch_id = atoll(PQgetvalue(res, 0, 0));
		PQclear(res);

		/*
		 * Here a real consumer pushes the events; the done rows and
		 * finish_batch commit together, in one round trip.
		 */
		snprintf(sql, sizeof(sql),
				 "BEGIN;"
				 " INSERT INTO peers_done (queue, id, created_at, done_at)"
				 " SELECT %s, ev_id, ev_time, pg_catalog.clock_timestamp()"
				 " FROM pgq.get_batch_events(%lld);"
				 " SELECT pgq.finish_batch(%lld);"
				 " COMMIT",
				 queue_lit, batch_id, batch_id);
		res = PQexec(conn, sql);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die_conn(conn, "processing the batch failed");
		PQclear(res);
		/* the INSERT's row count is not in the last result: count afterwards */
		batches++;
	}

	res = PQexec(conn, "SELECT pg_catalog.count(*) FROM peers_done");
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		events = atol(PQgetvalue(res, 0, 0));
	PQclear(res);
	printf("batches=%ld events_all_consumers=%ld empty=%ld\n",
		   batches, events, empty);
	PQfreemem(queue_lit);
	PQfinish(conn);
	return 0;
}
