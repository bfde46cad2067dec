/*-------------------------------------------------------------------------
 *
 * relay.c
 *		A delivery_outbox relay in C with libpq.
 *
 * Copy this file and replace deliver() with the code that pushes a row to
 * its recipient.  The loop around it is the one README's "relay loop"
 * describes:
 *
 *	 connect -> SET synchronous_commit = off -> LISTEN -> ack what was
 *	 pushed before a lost connection -> drain -> wait for a notification (or
 *	 a timeout) -> drain -> ...
 *
 *	 drain:  rows = outbox_ack_claim('{}', BATCH);
 *			 loop: deliver() each row;
 *				   outbox_release(failed ids, retry_after, error);
 *				   outbox_reject(refused ids, error);
 *				   rows = outbox_ack_claim(pushed ids, BATCH)
 *			 until a claim comes back empty (its call acked the last pushed
 *			 ids).
 *
 * - One round trip and one commit per batch: outbox_ack_claim acks the ids
 *	 pushed from the last batch and claims the next in one statement, so one
 *	 transaction (the relay never opens one itself).  '{}' acks nothing: the
 *	 first round of a drain.  Failed and refused rows are released or
 *	 rejected before the next round and never acked.  The statement is
 *	 prepared once per connection (behind PgBouncer in transaction mode,
 *	 that needs its max_prepared_statements).
 * - The relay's session runs with synchronous_commit = off
 *	 (RELAY_SYNCHRONOUS_COMMIT): its commits do not wait for their WAL to
 *	 reach disk, and at-least-once delivery survives losing the last of them
 *	 in a server crash.  A lost claim leaves its rows pending (or, reclaimed,
 *	 puts them back there); a lost ack, release or reject leaves its rows
 *	 delivered, and the sweep makes them pending again.  Either way the row
 *	 is pushed again: a duplicate, never a loss.  The rows themselves are
 *	 committed by the producers, with their own setting.
 * - LISTEN comes before the first drain, on every (re)connect: a row
 *	 committed before LISTEN is found by the drain, one committed after it is
 *	 notified.
 * - Notifications are wake-ups only (the payload is a row id); the relay
 *	 claims by state, so a notification missed while disconnected costs
 *	 nothing.
 * - Ack after the push, never before.  Ids pushed but not acked when the
 *	 connection broke are acked first thing after reconnecting (a late ack is
 *	 still proof of delivery).
 * - A failed push (deliver() returns PUSH_FAILED: the recipient is down, a
 *	 timeout, a 5xx-like answer) gives its row back with outbox_release(ids,
 *	 retry_after => RETRY_AFTER_MS, error => ...): no relay claims it before
 *	 then, and last_error keeps the reason.
 * - A refused push (PUSH_REFUSED: the recipient can never take this payload,
 *	 a 4xx-like answer) dead-letters its row at once with outbox_reject(ids,
 *	 error => ...): it moves to the dead-letter table <outbox>_dead
 *	 (dead_reason 'rejected'); outbox_redrive() puts it back.
 * - Before sleeping, the relay asks outbox_next_due() when the next row not
 *	 claimable yet (released with retry_after, backed off, scheduled) falls
 *	 due, and sleeps no longer: without the background worker nothing else
 *	 wakes it for such a row.
 * - Rows claimed by a relay that died stay 'delivered'; every SWEEP_EVERY
 *	 seconds the relay runs outbox_reclaim(RECLAIM_AFTER seconds) to put them
 *	 back to pending.  Several relays sweeping is harmless.
 * - Connection loss: reconnect with exponential backoff (BACKOFF_MIN_MS,
 *	 doubling up to BACKOFF_MAX_MS, with jitter).
 * - SIGTERM/SIGINT: finish the row being pushed, give the unpushed rows of
 *	 the batch back, ack what was pushed (outbox_ack), close, exit 0.
 *
 * Connection: the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER,
 * PGPASSWORD or ~/.pgpass, PGAPPNAME, PGOPTIONS ...), whole: libpq reads it.
 * Settings (environment), as in the Python, Node.js and Rust relays:
 *	 OUTBOX (the outbox table the relay works, e.g. tenant_a.delivery_outbox,
 *	 resolved by the session's search_path; unset: the extension's own)
 *	 OUTBOX_CHANNEL (delivery_outbox)  BATCH (100)  WAIT_MS (5000)
 *	 SWEEP_EVERY (30 s, 0 = never)	   RECLAIM_AFTER (60 s)
 *	 RETRY_AFTER_MS (1000: retry_after of a failed push; 0 = none, the
 *	 outbox's backoff_base decides)	   BACKOFF_MIN_MS (100) BACKOFF_MAX_MS (30000)
 *	 RELAY_SYNCHRONOUS_COMMIT (off: synchronous_commit of the relay's
 *	 session, set on every (re)connect; on makes each round wait for its WAL
 *	 flush)
 *	 test hooks: FAIL_EVERY (every Nth push fails; 0 = never),
 *	 FAIL_ONCE_PAYLOAD (the first push of a row with exactly this payload
 *	 fails), REFUSE_PAYLOAD (the recipient refuses a row with exactly this
 *	 payload), PUSH_DELAY_MS (each push takes this long)
 *
 * Each successful push prints "recipient id" on stdout; the log goes to
 * stderr (each connection's line names the session's synchronous_commit, as
 * the server reports it; the last line counts the rounds of
 * outbox_ack_claim).
 *
 * Build and run:  make -C examples/c && PGDATABASE=shop examples/c/relay
 *
 * IDENTIFICATION
 *		examples/c/relay.c
 *
 *-------------------------------------------------------------------------
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

/* the name of the round's prepared statement (outbox_ack_claim) */
#define ROUND_STATEMENT "delivery_outbox_round"

/* One claimed row, as deliver() sees it. */
typedef struct OutboxRow
{
	long long	id;
	const char *recipient;
	const char *kind;
	const char *tenant_id;		/* NULL for global rows */
	const unsigned char *payload;
	size_t		payload_len;
	int			delivery_attempts;	/* 1 on the first push */
} OutboxRow;

/* What became of a push. */
typedef enum PushResult
{
	PUSH_OK,					/* pushed: ack it */
	PUSH_FAILED,				/* not this time: release, retry later */
	PUSH_REFUSED				/* never: dead-letter it */
} PushResult;

/* A growable list of row ids. */
typedef struct IdList
{
	long long  *ids;
	int			n;
	int			cap;
} IdList;

/* settings */
static const char *outbox;		/* NULL: the extension's own outbox */
static const char *channel;
static int	batch_size;
static int	wait_ms;
static int	sweep_every;
static int	reclaim_after;
static int	retry_after_ms;
static int	backoff_min_ms;
static int	backoff_max_ms;
static int	fail_every;
static int	push_delay_ms;
static const char *fail_once_payload;
static const char *refuse_payload;
static const char *synchronous_commit;

/* state */
static volatile sig_atomic_t stopping = 0;
static int	wake_pipe[2] = {-1, -1};
static IdList unacked;			/* pushed, ack not yet confirmed */
static double next_sweep = 0;
static char synchronous_commit_shown[32];	/* as the server reports it */

/*
 * acked: rows outbox_ack acked, plus the ids given to outbox_ack_claim,
 * which does not count them; rounds: its calls
 */
static long cnt_pushed, cnt_acked, cnt_released, cnt_failed, cnt_rejected,
			cnt_connects, cnt_reclaimed, cnt_rounds;

static void
logmsg(const char *fmt,...)
{
	va_list		ap;

	fputs("relay: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* The first line of a libpq error message, for a one-line log entry. */
static const char *
first_line(const char *msg)
{
	static char line[512];
	size_t		len = strcspn(msg, "\n");

	if (len >= sizeof(line))
		len = sizeof(line) - 1;
	memcpy(line, msg, len);
	line[len] = '\0';
	return line;
}

static int
env_int(const char *name, int dflt)
{
	const char *v = getenv(name);

	return (v && *v) ? atoi(v) : dflt;
}

static double
now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sleep up to ms milliseconds; a signal ends it early. */
static void
sleep_ms(int ms)
{
	struct pollfd pfd = {.fd = wake_pipe[0],.events = POLLIN};
	char		buf[64];

	if (stopping || ms <= 0)
		return;
	if (poll(&pfd, 1, ms) > 0)
	{
		while (read(wake_pipe[0], buf, sizeof(buf)) > 0)
			;
	}
}

static void
on_signal(int signo)
{
	int			save_errno = errno;

	(void) signo;
	stopping = 1;
	/* wake up poll(); the pipe is non-blocking, a full pipe is fine */
	if (write(wake_pipe[1], "x", 1) < 0)
	{
		/* nothing to do */
	}
	errno = save_errno;
}

static void
idlist_add(IdList *l, long long id)
{
	if (l->n == l->cap)
	{
		l->cap = l->cap ? l->cap * 2 : 64;
		l->ids = realloc(l->ids, l->cap * sizeof(long long));
		if (l->ids == NULL)
		{
			logmsg("out of memory");
			exit(1);
		}
	}
	l->ids[l->n++] = id;
}

/* The ids as a PostgreSQL array literal, "{1,2,3}"; malloc'd. */
static char *
idlist_literal(const IdList *l)
{
	size_t		size = 3 + (size_t) l->n * 21;
	char	   *s = malloc(size);
	size_t		len = 0;

	if (s == NULL)
	{
		logmsg("out of memory");
		exit(1);
	}
	s[len++] = '{';
	for (int i = 0; i < l->n; i++)
		len += snprintf(s + len, size - len, "%s%lld", i ? "," : "", l->ids[i]);
	s[len++] = '}';
	s[len] = '\0';
	return s;
}

/* ---- the push: replace this ------------------------------------------- */

/* Does the row's payload equal the text s? */
static int
payload_is(const OutboxRow *row, const char *s)
{
	size_t		len = strlen(s);

	return len > 0 && row->payload_len == len && memcmp(row->payload, s, len) == 0;
}

/*
 * Push one claimed row to row->recipient.  Return PUSH_OK, PUSH_FAILED (the
 * row is released, retried later) or PUSH_REFUSED (the recipient refuses it
 * for good: it is dead-lettered), with the reason in error.  Recipients
 * dedupe by id: delivery is at-least-once.
 */
static PushResult
deliver(const OutboxRow *row, char *error, size_t errlen)
{
	static long pushes = 0;

	pushes++;
	if (push_delay_ms > 0)
	{
		struct timespec ts = {push_delay_ms / 1000, (push_delay_ms % 1000) * 1000000L};

		nanosleep(&ts, NULL);
	}
	if (payload_is(row, refuse_payload))
	{
		snprintf(error, errlen, "%s refused the payload (REFUSE_PAYLOAD)", row->recipient);
		return PUSH_REFUSED;
	}
	if (payload_is(row, fail_once_payload) && row->delivery_attempts == 1)
	{
		snprintf(error, errlen, "injected failure (FAIL_ONCE_PAYLOAD, attempt %d)",
				 row->delivery_attempts);
		return PUSH_FAILED;
	}
	if (fail_every > 0 && pushes % fail_every == 0)
	{
		snprintf(error, errlen, "injected failure (push %ld)", pushes);
		return PUSH_FAILED;
	}
	printf("%s %lld\n", row->recipient, row->id);
	fflush(stdout);
	return PUSH_OK;
}

/* ---- the relay loop ----------------------------------------------------- */

/*
 * Run a statement with nparams text parameters that returns one integer (or
 * NULL).  Returns 0 and sets *out (*isnull, if given), or -1 (the
 * connection is then treated as lost).
 */
static int
exec_value(PGconn *conn, const char *sql, int nparams, const char *const *params,
		   long *out, int *isnull)
{
	PGresult   *res;
	int			rc = -1;

	res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
	{
		if (isnull)
			*isnull = PQgetisnull(res, 0, 0);
		*out = atol(PQgetvalue(res, 0, 0));
		rc = 0;
	}
	else
		logmsg("connection lost: %s", first_line(PQerrorMessage(conn)));
	PQclear(res);
	return rc;
}

/*
 * exec_value for a count, with one parameter ($1) and the outbox ($2, NULL
 * for the extension's own: every call names it as outbox => $2::regclass)
 */
static int
exec_count(PGconn *conn, const char *sql, const char *param, long *out)
{
	const char *params[2] = {param, outbox};

	return exec_value(conn, sql, 2, params, out, NULL);
}

static int
ack_pushed(PGconn *conn)
{
	char	   *lit;
	long		n;
	int			rc;

	if (unacked.n == 0)
		return 0;
	lit = idlist_literal(&unacked);
	rc = exec_count(conn, "SELECT outbox_ack($1::bigint[], outbox => $2::regclass)", lit, &n);
	free(lit);
	if (rc == 0)
	{
		cnt_acked += n;
		unacked.n = 0;
	}
	return rc;
}

/* Server notices and asynchronous errors go to the log, one line each. */
static void
log_notice(void *arg, const char *message)
{
	(void) arg;
	logmsg("server: %s", first_line(message));
}

static PGconn *
relay_connect(void)
{
	/* Everything else comes from the PG* environment. */
	const char *const keys[] = {"fallback_application_name", NULL};
	const char *const vals[] = {"delivery_outbox-relay-c", NULL};
	PGconn	   *conn = PQconnectdbParams(keys, vals, 0);
	PGresult   *res;
	char	   *ident,
			   *sql;

	if (PQstatus(conn) != CONNECTION_OK)
	{
		logmsg("connection lost: %s", first_line(PQerrorMessage(conn)));
		PQfinish(conn);
		return NULL;
	}
	PQsetNoticeProcessor(conn, log_notice, NULL);
	ident = PQescapeIdentifier(conn, channel, strlen(channel));
	sql = malloc(strlen(ident) + 8);
	if (ident == NULL || sql == NULL)
	{
		logmsg("out of memory");
		exit(1);
	}
	sprintf(sql, "LISTEN %s", ident);

	/*
	 * Safe for at-least-once delivery (see the header): a claim or an ack
	 * lost in a crash only means the row is pushed again.  Set on every
	 * connection: a reconnect is a new session.
	 */
	res = PQexecParams(conn,
					   "SELECT pg_catalog.set_config('synchronous_commit', $1, false)",
					   1, NULL, &synchronous_commit, NULL, NULL, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
	{
		snprintf(synchronous_commit_shown, sizeof(synchronous_commit_shown), "%s",
				 PQgetvalue(res, 0, 0));
		PQclear(res);
		res = PQexec(conn, sql);
	}
	free(sql);
	PQfreemem(ident);

	/*
	 * The round's statement, prepared once per connection: parsed and
	 * planned here, not at every batch (a sixth of the server's time per
	 * round when sent as text each time).  A reconnect prepares it again.
	 */
	if (PQresultStatus(res) == PGRES_COMMAND_OK)
	{
		PQclear(res);
		res = PQprepare(conn, ROUND_STATEMENT,
						"SELECT id, recipient, kind, tenant_id, payload,"
						"       delivery_attempts"
						"  FROM outbox_ack_claim($1::bigint[], $2::integer,"
						"                        outbox => $3::regclass)",
						3, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK &&
			PQstatus(conn) == CONNECTION_OK)
		{
			/* not the connection: no outbox_ack_claim (extension 1.2?) */
			logmsg("cannot prepare the round (outbox_ack_claim): %s",
				   first_line(PQerrorMessage(conn)));
			PQclear(res);
			PQfinish(conn);
			return NULL;
		}
	}
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		logmsg("connection lost: %s", first_line(PQerrorMessage(conn)));
		PQclear(res);
		PQfinish(conn);
		return NULL;
	}
	PQclear(res);
	return conn;
}

/*
 * Give one row back after a failed push, with retry_after and the error
 * (outbox_release), or dead-letter it after a refusal (outbox_reject).
 */
static int
settle_failed(PGconn *conn, long long id, PushResult result, const char *error)
{
	char		id_text[24];
	char		retry_text[16];
	long		n;

	snprintf(id_text, sizeof(id_text), "%lld", id);
	snprintf(retry_text, sizeof(retry_text), "%d", retry_after_ms);
	if (result == PUSH_REFUSED)
	{
		const char *params[3] = {id_text, error, outbox};

		if (exec_value(conn,
					   "SELECT outbox_reject(ARRAY[$1::bigint], error => $2,"
					   " outbox => $3::regclass)",
					   3, params, &n, NULL) != 0)
			return -1;
		cnt_rejected += n;
	}
	else
	{
		const char *params[4] = {id_text, retry_text, error, outbox};

		if (exec_value(conn,
					   "SELECT outbox_release(ARRAY[$1::bigint],"
					   " retry_after => NULLIF($2::integer, 0) * interval '1 ms',"
					   " error => $3, outbox => $4::regclass)",
					   4, params, &n, NULL) != 0)
			return -1;
		cnt_released += n;
	}
	return 0;
}

/*
 * Rounds until nothing is claimable: ack the ids pushed from the last batch
 * and claim the next in one statement (outbox_ack_claim); push; release
 * failures, reject refusals.  The ids pushed now are acked by the next
 * round; when stopping, by outbox_ack.
 */
static int
drain(PGconn *conn)
{
	char		batch_text[16];

	snprintf(batch_text, sizeof(batch_text), "%d", batch_size);
	while (!stopping)
	{
		PGresult   *res;
		IdList		give_back = {0};	/* claimed, never pushed */
		char	   *acking = idlist_literal(&unacked);	/* "{}" at first */
		const char *params[3] = {acking, batch_text, outbox};
		int			nrows;
		int			rc = 0;

		res = PQexecPrepared(conn, ROUND_STATEMENT, 3, params, NULL, NULL, 0);
		free(acking);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			logmsg("connection lost: %s", first_line(PQerrorMessage(conn)));
			PQclear(res);
			return -1;
		}
		/* committed (the statement is its own transaction): those are acked */
		cnt_rounds++;
		cnt_acked += unacked.n;
		unacked.n = 0;
		nrows = PQntuples(res);
		if (nrows == 0)
		{
			PQclear(res);
			return 0;
		}
		for (int i = 0; i < nrows; i++)
		{
			OutboxRow	row;
			unsigned char *payload;
			size_t		len;
			PushResult	result;
			char		error[256];

			row.id = atoll(PQgetvalue(res, i, 0));
			if (stopping)
			{
				/* shutting down: not pushed, give it back */
				idlist_add(&give_back, row.id);
				continue;
			}
			row.recipient = PQgetvalue(res, i, 1);
			row.kind = PQgetvalue(res, i, 2);
			row.tenant_id = PQgetisnull(res, i, 3) ? NULL : PQgetvalue(res, i, 3);
			payload = PQunescapeBytea((const unsigned char *) PQgetvalue(res, i, 4), &len);
			row.payload = payload;
			row.payload_len = len;
			row.delivery_attempts = atoi(PQgetvalue(res, i, 5));
			result = deliver(&row, error, sizeof(error));
			PQfreemem(payload);
			if (result == PUSH_OK)
			{
				cnt_pushed++;
				idlist_add(&unacked, row.id);
				continue;
			}
			logmsg("push %s: id %lld to %s: %s",
				   result == PUSH_REFUSED ? "refused" : "failed",
				   row.id, row.recipient, error);
			if (result == PUSH_FAILED)
				cnt_failed++;
			/* one call per row: each keeps its own error in last_error */
			if (rc == 0)
				rc = settle_failed(conn, row.id, result, error);
		}
		PQclear(res);

		if (give_back.n > 0 && rc == 0)
		{
			/* back at once, for another relay */
			char	   *lit = idlist_literal(&give_back);
			long		n;

			rc = exec_count(conn, "SELECT outbox_release($1::bigint[], outbox => $2::regclass)", lit, &n);
			free(lit);
			if (rc == 0)
				cnt_released += n;
		}
		free(give_back.ids);
		if (rc != 0)
			return -1;
	}
	/* stopping: the last round's pushed ids have no next round */
	return ack_pushed(conn);
}

static int
sweep(PGconn *conn)
{
	char		secs[16];
	long		n;

	if (sweep_every <= 0 || now_sec() < next_sweep)
		return 0;
	next_sweep = now_sec() + sweep_every;
	snprintf(secs, sizeof(secs), "%d", reclaim_after);
	if (exec_count(conn,
				   "SELECT outbox_reclaim(make_interval(secs => $1::float8),"
				   " outbox => $2::regclass)",
				   secs, &n) != 0)
		return -1;
	if (n > 0)
	{
		cnt_reclaimed += n;
		logmsg("sweep: %ld rows delivered more than %d s ago and never acked are pending again",
			   n, reclaim_after);
	}
	return 0;
}

/*
 * Sleep until a notification, a signal, the next sweep, the next row
 * falling due or WAIT_MS.  Returns -1 when the connection is gone.
 * Notifications that arrived during a query are already queued in libpq:
 * then do not sleep at all.
 */
static int
wait_for_work(PGconn *conn)
{
	struct pollfd pfd[2];
	PGnotify   *n;
	int			woken = 0;
	int			timeout = wait_ms;
	long		due_ms;
	int			no_due;
	char		buf[64];

	/*
	 * Milliseconds until the earliest row that is pending but not claimable
	 * yet falls due; NULL when there is none.
	 */
	if (exec_value(conn,
				   "SELECT LEAST(ceil(EXTRACT(epoch FROM outbox_next_due(outbox => $1::regclass)"
				   "                           - clock_timestamp()) * 1000), 2147483647)::integer",
				   1, &outbox, &due_ms, &no_due) != 0)
		return -1;
	if (!no_due && due_ms < timeout)
		timeout = due_ms < 0 ? 0 : (int) due_ms;

	while ((n = PQnotifies(conn)) != NULL)
	{
		PQfreemem(n);
		woken = 1;
	}
	if (woken)
		return 0;
	if (sweep_every > 0)
	{
		int			until_sweep = (int) ((next_sweep - now_sec()) * 1000);

		if (until_sweep < timeout)
			timeout = until_sweep < 0 ? 0 : until_sweep;
	}
	pfd[0].fd = PQsocket(conn);
	pfd[0].events = POLLIN;
	pfd[1].fd = wake_pipe[0];
	pfd[1].events = POLLIN;
	if (poll(pfd, 2, timeout) < 0)
		return errno == EINTR ? 0 : -1;
	if (pfd[1].revents & POLLIN)
		while (read(wake_pipe[0], buf, sizeof(buf)) > 0)
			;
	if (pfd[0].revents)
	{
		/* The payloads (row ids) are not needed: we drain by state. */
		if (!PQconsumeInput(conn))
		{
			logmsg("connection lost: %s", first_line(PQerrorMessage(conn)));
			return -1;
		}
		while ((n = PQnotifies(conn)) != NULL)
			PQfreemem(n);
	}
	if (PQstatus(conn) != CONNECTION_OK)
	{
		logmsg("connection lost");
		return -1;
	}
	return 0;
}

static int
serve(PGconn *conn)
{
	if (unacked.n > 0)
	{
		int			n = unacked.n;

		if (ack_pushed(conn) != 0)
			return -1;
		logmsg("acked %d rows pushed before the connection was lost", n);
	}
	if (drain(conn) != 0)
		return -1;
	while (!stopping)
	{
		if (wait_for_work(conn) != 0 || sweep(conn) != 0 || drain(conn) != 0)
			return -1;
	}
	return 0;
}

int
main(void)
{
	struct sigaction sa;
	int			backoff;

	outbox = getenv("OUTBOX");
	if (outbox != NULL && *outbox == '\0')
		outbox = NULL;
	channel = getenv("OUTBOX_CHANNEL");
	if (channel == NULL || *channel == '\0')
		channel = "delivery_outbox";
	batch_size = env_int("BATCH", 100);
	wait_ms = env_int("WAIT_MS", 5000);
	sweep_every = env_int("SWEEP_EVERY", 30);
	reclaim_after = env_int("RECLAIM_AFTER", 60);
	retry_after_ms = env_int("RETRY_AFTER_MS", 1000);
	backoff_min_ms = env_int("BACKOFF_MIN_MS", 100);
	backoff_max_ms = env_int("BACKOFF_MAX_MS", 30000);
	fail_every = env_int("FAIL_EVERY", 0);
	push_delay_ms = env_int("PUSH_DELAY_MS", 0);
	fail_once_payload = getenv("FAIL_ONCE_PAYLOAD") ? getenv("FAIL_ONCE_PAYLOAD") : "";
	refuse_payload = getenv("REFUSE_PAYLOAD") ? getenv("REFUSE_PAYLOAD") : "";
	synchronous_commit = getenv("RELAY_SYNCHRONOUS_COMMIT");
	if (synchronous_commit == NULL || *synchronous_commit == '\0')
		synchronous_commit = "off";

	if (pipe(wake_pipe) != 0)
	{
		perror("pipe");
		return 1;
	}
	for (int i = 0; i < 2; i++)
		fcntl(wake_pipe[i], F_SETFL, fcntl(wake_pipe[i], F_GETFL) | O_NONBLOCK);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	srand((unsigned) time(NULL) ^ (unsigned) getpid());

	backoff = backoff_min_ms;
	while (!stopping)
	{
		PGconn	   *conn = relay_connect();

		if (conn != NULL)
		{
			cnt_connects++;
			logmsg("connected (backend pid %d, synchronous_commit %s), listening on %s, outbox %s",
				   PQbackendPID(conn), synchronous_commit_shown, channel,
				   outbox ? outbox : "(the extension's own)");
			backoff = backoff_min_ms;
			serve(conn);
			PQfinish(conn);
		}
		if (!stopping)
		{
			int			delay = backoff / 2 + rand() % (backoff / 2 + 1);

			logmsg("reconnecting in %d ms", delay);
			sleep_ms(delay);
			backoff = backoff * 2 > backoff_max_ms ? backoff_max_ms : backoff * 2;
		}
	}
	if (unacked.n > 0)
		logmsg("%d pushed rows could not be acked; the sweep (outbox_reclaim) will redeliver them",
			   unacked.n);
	logmsg("stopped: pushed %ld, acked %ld, released %ld, failed %ld, rejected %ld, connects %ld, reclaimed %ld, rounds %ld",
		   cnt_pushed, cnt_acked, cnt_released, cnt_failed, cnt_rejected,
		   cnt_connects, cnt_reclaimed, cnt_rounds);
	free(unacked.ids);
	return 0;
}
