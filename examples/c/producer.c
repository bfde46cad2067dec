/*-------------------------------------------------------------------------
 *
 * producer.c
 *		A delivery_outbox producer in C with libpq: the outbox row is written
 *		in the same transaction as the business change that caused it.
 *
 * Creates the business table "orders" if it is missing, then runs two
 * transactions:
 *
 *	 1. INSERT an order, outbox_enqueue() its "order_created" message, COMMIT:
 *		both rows exist, and relays are woken (at commit, with the row id);
 *	 2. the same, then ROLLBACK (the payment was declined): neither row exists
 *		and no relay is woken.
 *
 * and prints one line per transaction:
 *	 committed order=<order id> outbox=<outbox id>
 *	 rolled_back order=<order id> outbox=<outbox id>
 *
 * Connection: the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER,
 * PGOPTIONS ...).  RECIPIENT (default "service:billing") addresses the
 * messages; OUTBOX names the outbox table they go to (e.g.
 * tenant_a.delivery_outbox, resolved by the search_path; unset: the
 * extension's own).
 *
 * Build and run:  make -C examples/c && PGDATABASE=shop examples/c/producer
 *
 * IDENTIFICATION
 *		examples/c/producer.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

static PGconn *conn;
static const char *outbox;		/* NULL: the extension's own outbox */

static void
fail(const char *what)
{
	fprintf(stderr, "producer: %s: %s", what, PQerrorMessage(conn));
	PQfinish(conn);
	exit(1);
}

/* Run a statement that returns nothing. */
static void
exec_command(const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		fail(sql);
	PQclear(res);
}

/*
 * One order and its outbox message, in the caller's transaction.  Returns
 * the two new ids.
 */
static void
place_order(const char *recipient, const char *customer, int amount_cents,
			long long *order_id, long long *outbox_id)
{
	char		amount[16];
	char		payload[256];
	const char *oparams[2] = {customer, amount};
	const char *eparams[4];
	int			elengths[4] = {0, 0, 0, 0};
	int			eformats[4] = {0, 0, 1, 0}; /* the payload goes as binary bytea */
	PGresult   *res;

	snprintf(amount, sizeof(amount), "%d", amount_cents);
	res = PQexecParams(conn,
					   "INSERT INTO orders (customer, amount_cents)"
					   " VALUES ($1, $2) RETURNING id",
					   2, NULL, oparams, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		fail("INSERT INTO orders");
	*order_id = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);

	/* The message: opaque bytes to the outbox; JSON here. */
	snprintf(payload, sizeof(payload),
			 "{\"order_id\": %lld, \"customer\": \"%s\", \"amount_cents\": %d}",
			 *order_id, customer, amount_cents);
	eparams[0] = recipient;
	eparams[1] = "order_created";
	eparams[2] = payload;
	elengths[2] = (int) strlen(payload);
	eparams[3] = outbox;
	res = PQexecParams(conn,
					   "SELECT outbox_enqueue($1, $2, $3::bytea,"
					   " outbox => $4::regclass)",
					   4, NULL, eparams, elengths, eformats, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		fail("outbox_enqueue");
	*outbox_id = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
}

int
main(void)
{
	const char *recipient = getenv("RECIPIENT");
	long long	order_id,
				outbox_id;

	if (recipient == NULL || *recipient == '\0')
		recipient = "service:billing";
	outbox = getenv("OUTBOX");
	if (outbox != NULL && *outbox == '\0')
		outbox = NULL;
	conn = PQconnectdb("fallback_application_name=delivery_outbox-producer-c");
	if (PQstatus(conn) != CONNECTION_OK)
		fail("connect");

	exec_command("CREATE TABLE IF NOT EXISTS orders ("
				 " id bigserial PRIMARY KEY,"
				 " customer text NOT NULL,"
				 " amount_cents integer NOT NULL,"
				 " created_at timestamptz NOT NULL DEFAULT now())");

	/* 1. Both rows commit together; relays are woken at COMMIT. */
	exec_command("BEGIN");
	place_order(recipient, "alice", 4200, &order_id, &outbox_id);
	exec_command("COMMIT");
	printf("committed order=%lld outbox=%lld\n", order_id, outbox_id);

	/* 2. Something fails after both writes: neither row survives. */
	exec_command("BEGIN");
	place_order(recipient, "bob", 990000, &order_id, &outbox_id);
	/* ... the payment is declined ... */
	exec_command("ROLLBACK");
	printf("rolled_back order=%lld outbox=%lld\n", order_id, outbox_id);

	PQfinish(conn);
	return 0;
}
