//! A delivery_outbox relay in Rust with tokio-postgres.
//!
//! Copy this file and replace `deliver()` with the code that pushes a row
//! to its recipient.  The loop is the one of README's "relay loop", as in
//! the C, Python and Node.js relays:
//!
//!   connect -> SET synchronous_commit = off -> LISTEN -> ack what was
//!   pushed before a lost connection -> drain -> wait for a notification
//!   (or a timeout) -> drain -> ...
//!
//!   drain: rows = outbox_ack_claim('{}', BATCH);
//!          loop: deliver() each row;
//!                outbox_release(failed ids, retry_after, error);
//!                outbox_reject(refused ids, error);
//!                rows = outbox_ack_claim(pushed ids, BATCH)
//!          until a claim comes back empty (its call acked the last pushed
//!          ids).
//!
//! - One round trip and one commit per batch: outbox_ack_claim acks the ids
//!   pushed from the last batch and claims the next in one statement, so
//!   one transaction (each statement of the relay is its own).  '{}' acks
//!   nothing: the first round of a drain.  Failed and refused rows are
//!   released or rejected before the next round and never acked.
//! - The relay's session runs with synchronous_commit = off
//!   (RELAY_SYNCHRONOUS_COMMIT): its commits do not wait for their WAL to
//!   reach disk, and at-least-once delivery survives losing the last of
//!   them in a server crash.  A lost claim leaves its rows pending (or,
//!   reclaimed, puts them back there); a lost ack, release or reject leaves
//!   its rows delivered, and the sweep makes them pending again.  Either way
//!   the row is pushed again: a duplicate, never a loss.  The rows
//!   themselves are committed by the producers, with their own setting.
//! - LISTEN comes before the first drain, on every (re)connect: a row
//!   committed before LISTEN is found by the drain, one after it notified.
//! - Notifications are wake-ups only (the payload is a row id); the relay
//!   claims by state, so one missed while disconnected costs nothing.
//! - Ack after the push, never before; ids pushed but not acked when the
//!   connection broke are acked first thing after reconnecting.
//! - A failed push (`Push::Failed`: the recipient is down, a timeout, a
//!   5xx-like answer) gives its row back with outbox_release(ids,
//!   retry_after => RETRY_AFTER_MS, error => ...): no relay claims it
//!   before then, and last_error keeps the reason.
//! - A refused push (`Push::Refused`: the recipient can never take this
//!   payload, a 4xx-like answer) dead-letters its row at once with
//!   outbox_reject(ids, error => ...): it moves to the dead-letter table
//!   <outbox>_dead (dead_reason 'rejected'); outbox_redrive() puts it back.
//! - Before sleeping, the relay asks outbox_next_due() when the next row
//!   not claimable yet (released with retry_after, backed off, scheduled)
//!   falls due, and sleeps no longer: without the background worker
//!   nothing else wakes it for such a row.
//! - Every SWEEP_EVERY seconds, outbox_reclaim(RECLAIM_AFTER seconds) puts
//!   rows claimed by a relay that died back to pending.
//! - Connection loss: reconnect with exponential backoff (BACKOFF_MIN_MS,
//!   doubling up to BACKOFF_MAX_MS, with jitter).
//! - SIGTERM/SIGINT: finish the row being pushed, give the unpushed rows of
//!   the batch back, ack what was pushed (outbox_ack), exit 0.
//!
//! Which outbox: OUTBOX names the table (tenant_a.delivery_outbox, or
//! delivery_outbox resolved by the session's search_path, e.g.
//! PGOPTIONS='-c search_path=tenant_a,outbox,public'); every call passes it
//! as outbox => ...  Unset, the relay works the extension's own table.
//!
//! OUTBOX='*' serves many tenants from one process and one connection:
//! every outbox listed in delivery_outbox_tables other than the extension's
//! own (created or attached) that the relay's role may work (USAGE on its
//! schema, UPDATE and SELECT on the table).  It LISTENs on each outbox's
//! channel (OUTBOX_CHANNEL is then not used), drains every outbox on start
//! and on every reconnect, and on a notification the outboxes of that
//! channel, one batch per outbox in turn, so that one tenant's backlog
//! does not hold up the others.  The list is read again on every reconnect
//! and whenever a wait ends without a notification, so an outbox attached
//! later is picked up within WAIT_MS.  Needs SELECT on
//! delivery_outbox_tables besides the relay GRANTs.
//!
//! Connection: the libpq environment (see lib.rs: PGOPTIONS included).
//! Settings (environment): OUTBOX (the outbox table, or '*'; default the
//! extension's), OUTBOX_CHANNEL (delivery_outbox), BATCH (100), WAIT_MS (5000),
//! SWEEP_EVERY (30 s, 0 = never), RECLAIM_AFTER (60 s), RETRY_AFTER_MS
//! (1000: retry_after of a failed push; 0 = none, the outbox's backoff_base
//! decides), BACKOFF_MIN_MS (100), BACKOFF_MAX_MS (30000),
//! RELAY_SYNCHRONOUS_COMMIT (off: synchronous_commit of the relay's
//! session, set on every (re)connect; on makes each round wait for its WAL
//! flush); test hooks:
//! FAIL_EVERY (every Nth push fails; 0 = never), FAIL_ONCE_PAYLOAD (the
//! first push of a row with exactly this payload fails), REFUSE_PAYLOAD
//! (the recipient refuses a row with exactly this payload), PUSH_DELAY_MS.
//!
//! Each successful push prints "recipient id" on stdout; the log goes to
//! stderr (each connection's line names the session's synchronous_commit,
//! as the server reports it; the last line counts the rounds of
//! outbox_ack_claim).

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delivery_outbox_examples::{config, setting};
use futures_util::{stream, StreamExt};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, Notify};
use tokio_postgres::{AsyncMessage, Client, NoTls, Statement};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// An outbox served: its name (None: the extension's own) and channel.
type Outboxes = BTreeMap<Option<String>, String>;

/// Ids pushed but not acked yet, per outbox.
type Unacked = BTreeMap<Option<String>, Vec<i64>>;

/// Every outbox the role may work, for OUTBOX='*': created or attached (not
/// the extension's own), its schema and table granted.  (A role that may
/// not work a table gets 42501 from the functions: leaving it out here keeps
/// one tenant's missing GRANT from stopping the others.)
const ALL_OUTBOXES: &str = "
    SELECT format('%I.%I', n.nspname, c.relname), t.channel
      FROM delivery_outbox_tables t
      JOIN pg_catalog.pg_class c ON c.oid = t.outbox
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE t.origin <> 'default'
       AND pg_catalog.has_schema_privilege(n.oid, 'USAGE')
       AND pg_catalog.has_table_privilege(t.outbox, 'UPDATE, SELECT')
     ORDER BY 1";

struct Settings {
    outbox: Option<String>,
    all: bool,
    channel: String,
    batch: i32,
    wait: Duration,
    sweep_every: Duration,
    reclaim_after: f64,
    retry_after_ms: i32,
    backoff_min_ms: u64,
    backoff_max_ms: u64,
    fail_every: u64,
    push_delay: Duration,
    fail_once_payload: Vec<u8>,
    refuse_payload: Vec<u8>,
    synchronous_commit: String,
}

#[derive(Default)]
struct Stats {
    pushes: u64,
    pushed: u64,
    /// rows outbox_ack acked, plus the ids given to outbox_ack_claim, which
    /// does not count them
    acked: u64,
    /// outbox_ack_claim calls
    rounds: u64,
    released: u64,
    failed: u64,
    rejected: u64,
    connects: u64,
    reclaimed: u64,
}

/// The stop request of SIGTERM/SIGINT.
struct Stop {
    requested: AtomicBool,
    notify: Notify,
}

impl Stop {
    fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

fn log(message: &str) {
    eprintln!("relay: {}", message);
}

/// One claimed row, as `deliver()` sees it.
struct Row {
    id: i64,
    recipient: String,
    payload: Vec<u8>,
    delivery_attempts: i32,
}

/// Why a push did not go through.
enum Push {
    /// Not this time: the row is released and retried later.
    Failed(String),
    /// Never: the recipient refuses the row for good; it is dead-lettered.
    Refused(String),
}

/// Push one row to its recipient: here, print it (and the test hooks).
/// Recipients dedupe by id: delivery is at-least-once.
async fn deliver(s: &Settings, stats: &mut Stats, row: &Row) -> std::result::Result<(), Push> {
    stats.pushes += 1;
    if !s.push_delay.is_zero() {
        tokio::time::sleep(s.push_delay).await;
    }
    if !s.refuse_payload.is_empty() && row.payload == s.refuse_payload {
        return Err(Push::Refused(format!(
            "{} refused the payload (REFUSE_PAYLOAD)",
            row.recipient
        )));
    }
    if !s.fail_once_payload.is_empty()
        && row.payload == s.fail_once_payload
        && row.delivery_attempts == 1
    {
        return Err(Push::Failed(format!(
            "injected failure (FAIL_ONCE_PAYLOAD, attempt {})",
            row.delivery_attempts
        )));
    }
    if s.fail_every > 0 && stats.pushes % s.fail_every == 0 {
        return Err(Push::Failed(format!(
            "injected failure (push {})",
            stats.pushes
        )));
    }
    println!("{} {}", row.recipient, row.id);
    let _ = std::io::stdout().flush();
    Ok(())
}

/// Ack every pushed id, outbox by outbox; an outbox's ids are forgotten
/// once its ack went through.
async fn ack(client: &Client, stats: &mut Stats, unacked: &mut Unacked) -> Result<()> {
    while let Some((outbox, ids)) = unacked.iter().next() {
        let n: i32 = client
            .query_one(
                "SELECT outbox_ack($1::bigint[], outbox => $2::text::regclass)",
                &[ids, outbox],
            )
            .await?
            .get(0);
        stats.acked += n as u64;
        let outbox = outbox.clone();
        unacked.remove(&outbox);
    }
    Ok(())
}

/// Give claimed rows back at once (not pushed: shutting down).
async fn release(
    client: &Client,
    outbox: &Option<String>,
    stats: &mut Stats,
    ids: &[i64],
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let n: i32 = client
        .query_one(
            "SELECT outbox_release($1::bigint[], outbox => $2::text::regclass)",
            &[&ids, outbox],
        )
        .await?
        .get(0);
    stats.released += n as u64;
    Ok(())
}

/// A row whose push failed: released with retry_after and its error
/// (outbox_release), or, refused, dead-lettered (outbox_reject).  One call
/// per row: each keeps its own error in last_error.
async fn settle(
    client: &Client,
    s: &Settings,
    outbox: &Option<String>,
    stats: &mut Stats,
    id: i64,
    push: &Push,
) -> Result<()> {
    match push {
        Push::Failed(error) => {
            let n: i32 = client
                .query_one(
                    "SELECT outbox_release(ARRAY[$1::bigint],
                                           retry_after => NULLIF($2::integer, 0) * interval '1 ms',
                                           error => $3::text, outbox => $4::text::regclass)",
                    &[&id, &s.retry_after_ms, error, outbox],
                )
                .await?
                .get(0);
            stats.released += n as u64;
        }
        Push::Refused(error) => {
            let n: i32 = client
                .query_one(
                    "SELECT outbox_reject(ARRAY[$1::bigint], error => $2::text,
                                          outbox => $3::text::regclass)",
                    &[&id, error, outbox],
                )
                .await?
                .get(0);
            stats.rejected += n as u64;
        }
    }
    Ok(())
}

/// How long until the earliest row, in any outbox served, that is pending
/// but not claimable yet falls due (zero if due already), or None when
/// there is none.
async fn until_next_due(client: &Client, outboxes: &Outboxes) -> Result<Option<Duration>> {
    let names: Vec<Option<String>> = outboxes.keys().cloned().collect();
    let ms: Option<f64> = client
        .query_one(
            "SELECT ceil(EXTRACT(epoch FROM min(outbox_next_due(outbox => o::regclass))
                                            - clock_timestamp()) * 1000)::float8
               FROM unnest($1::text[]) o",
            &[&names],
        )
        .await?
        .get(0);
    Ok(ms.map(|ms| Duration::from_millis(ms.max(0.0) as u64)))
}

/// The outboxes to serve: the one of OUTBOX, or for OUTBOX='*' every one
/// the role may work (logging those that came or went).
async fn outboxes(client: &Client, s: &Settings, before: &Outboxes) -> Result<Outboxes> {
    if !s.all {
        return Ok(BTreeMap::from([(s.outbox.clone(), s.channel.clone())]));
    }
    let mut found = Outboxes::new();
    for row in client.query(ALL_OUTBOXES, &[]).await? {
        found.insert(Some(row.get(0)), row.get(1));
    }
    for (name, channel) in &found {
        if !before.contains_key(name) {
            log(&format!(
                "serving {} (channel {})",
                name.as_deref().unwrap_or(""),
                channel
            ));
        }
    }
    for name in before.keys() {
        if !found.contains_key(name) {
            log(&format!(
                "no longer serving {}",
                name.as_deref().unwrap_or("")
            ));
        }
    }
    Ok(found)
}

/// LISTEN on the channels of outboxes not in `listening`; adds them there.
async fn listen(
    client: &Client,
    outboxes: &Outboxes,
    listening: &mut BTreeSet<String>,
) -> Result<()> {
    for channel in outboxes.values() {
        if listening.insert(channel.clone()) {
            client
                .batch_execute(&format!("LISTEN \"{}\"", channel.replace('"', "\"\"")))
                .await?;
        }
    }
    Ok(())
}

/// One batch from each outbox (of the channels notified; all if None) in
/// turn until nothing is claimable in any of them, or a stop is requested.
/// An outbox whose channel is notified meanwhile gets another turn.
async fn drain(
    client: &Client,
    round: &Statement,
    s: &Settings,
    outboxes: &Outboxes,
    channels: Option<&BTreeSet<String>>,
    wakeups: &mut mpsc::UnboundedReceiver<String>,
    stats: &mut Stats,
    unacked: &mut Unacked,
    stop: &Stop,
) -> Result<()> {
    let mut todo: Vec<Option<String>> = outboxes
        .iter()
        .filter(|(_, c)| channels.map_or(true, |chs| chs.contains(*c)))
        .map(|(o, _)| o.clone())
        .collect();
    while !todo.is_empty() && !stop.requested() {
        let mut next = Vec::new();
        for outbox in &todo {
            if drain_batch(client, round, s, outbox, stats, unacked, stop).await? {
                next.push(outbox.clone());
            }
        }
        while let Ok(channel) = wakeups.try_recv() {
            for (o, c) in outboxes {
                if *c == channel && !next.contains(o) {
                    next.push(o.clone());
                }
            }
        }
        todo = next;
    }
    // An outbox leaves todo once its round claimed nothing, and that round
    // acked its pushed ids: left here only when stopping.
    ack(client, stats, unacked).await
}

/// One round of an outbox: ack the ids pushed from its last batch and
/// claim the next, in one statement; push; release failures, reject
/// refusals.  The ids pushed now are acked by the next round.  True if
/// rows were claimed.
async fn drain_batch(
    client: &Client,
    round: &Statement,
    s: &Settings,
    outbox: &Option<String>,
    stats: &mut Stats,
    unacked: &mut Unacked,
    stop: &Stop,
) -> Result<bool> {
    let ids = unacked.get(outbox).cloned().unwrap_or_default();
    let rows = client.query(round, &[&ids, &s.batch, outbox]).await?;
    // committed (each statement is its own transaction): those are acked
    stats.rounds += 1;
    stats.acked += ids.len() as u64;
    unacked.remove(outbox);
    if rows.is_empty() {
        return Ok(false);
    }
    let mut unpushed = Vec::new();
    for row in &rows {
        let row = Row {
            id: row.get(0),
            recipient: row.get(1),
            payload: row.get(2),
            delivery_attempts: row.get(3),
        };
        if stop.requested() {
            unpushed.push(row.id);
            continue;
        }
        match deliver(s, stats, &row).await {
            Ok(()) => {
                stats.pushed += 1;
                unacked.entry(outbox.clone()).or_default().push(row.id);
            }
            Err(push) => {
                let (what, error) = match &push {
                    Push::Failed(e) => {
                        stats.failed += 1;
                        ("failed", e)
                    }
                    Push::Refused(e) => ("refused", e),
                };
                log(&format!(
                    "push {}: id {} to {}: {}",
                    what, row.id, row.recipient, error
                ));
                settle(client, s, outbox, stats, row.id, &push).await?;
            }
        }
    }
    release(client, outbox, stats, &unpushed).await?;
    Ok(true)
}

/// One connection's life: Ok when a stop was requested, Err when the
/// connection was lost.
async fn session(
    s: &Settings,
    stats: &mut Stats,
    unacked: &mut Unacked,
    served: &mut Outboxes,
    stop: &Stop,
    backoff_ms: &mut u64,
) -> Result<()> {
    let (client, mut connection) = config("delivery_outbox-relay-rust").connect(NoTls).await?;
    // The connection runs in its own task and forwards the channels of
    // notifications; the channel closes when the connection ends.
    let (tx, mut wakeups) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = tx.send(n.channel().to_string());
                }
                Ok(_) => {}
                Err(e) => {
                    log(&format!("connection: {}", e));
                    break;
                }
            }
        }
    });
    // Safe for at-least-once delivery (see the header): a claim or an ack
    // lost in a crash only means the row is pushed again.  Set on every
    // connection: a reconnect is a new session.
    let synchronous_commit: String = client
        .query_one(
            "SELECT pg_catalog.set_config('synchronous_commit', $1, false)",
            &[&s.synchronous_commit],
        )
        .await?
        .get(0);
    // The round's statement, prepared once per connection: parsed and
    // planned here, not at every batch (a query given as text is prepared
    // again at each call).
    let round = client
        .prepare(
            "SELECT id, recipient, payload, delivery_attempts
               FROM outbox_ack_claim($1::bigint[], $2::integer,
                                     outbox => $3::text::regclass)",
        )
        .await?;
    let mut listening = BTreeSet::new();
    *served = outboxes(&client, s, served).await?;
    listen(&client, served, &mut listening).await?;
    stats.connects += 1;
    *backoff_ms = s.backoff_min_ms;
    log(&format!(
        "connected (synchronous_commit {}), listening on {}, outbox {}{}",
        synchronous_commit,
        listening.iter().cloned().collect::<Vec<_>>().join(", "),
        s.outbox.as_deref().unwrap_or("(the extension's own)"),
        if s.all {
            format!(": {} outboxes", served.len())
        } else {
            String::new()
        }
    ));

    // pushed before the connection broke: a late ack still counts
    ack(&client, stats, unacked).await?;

    let mut last_sweep = Instant::now();
    // None: drain every outbox (start, reconnect, a wait without a
    // notification); else those of the channels notified
    let mut channels: Option<BTreeSet<String>> = None;
    loop {
        drain(
            &client,
            &round,
            s,
            served,
            channels.as_ref(),
            &mut wakeups,
            stats,
            unacked,
            stop,
        )
        .await?;
        if stop.requested() {
            return Ok(());
        }
        if !s.sweep_every.is_zero() && last_sweep.elapsed() >= s.sweep_every {
            last_sweep = Instant::now();
            let mut reclaimed = 0;
            for outbox in served.keys() {
                let n: i32 = client
                    .query_one(
                        "SELECT outbox_reclaim(pg_catalog.make_interval(secs => $1::float8),
                                               outbox => $2::text::regclass)",
                        &[&s.reclaim_after, outbox],
                    )
                    .await?
                    .get(0);
                if n > 0 {
                    log(&format!(
                        "reclaimed {} rows of {}",
                        n,
                        outbox.as_deref().unwrap_or("(the extension's own)")
                    ));
                }
                reclaimed += n as u64;
            }
            if reclaimed > 0 {
                stats.reclaimed += reclaimed;
                channels = None;
                continue;
            }
        }
        let mut wait = match until_next_due(&client, served).await? {
            Some(due) => due.min(s.wait),
            None => s.wait,
        };
        // no longer than until the next sweep
        if !s.sweep_every.is_zero() {
            wait = wait.min(s.sweep_every.saturating_sub(last_sweep.elapsed()));
        }
        tokio::select! {
            wakeup = wakeups.recv() => {
                let first = match wakeup {
                    Some(channel) => channel,
                    None => return Err("connection closed".into()),
                };
                let mut notified = BTreeSet::from([first]);
                while let Ok(channel) = wakeups.try_recv() {
                    notified.insert(channel);
                }
                channels = Some(notified);
            }
            _ = tokio::time::sleep(wait) => {
                // no notification: look for outboxes attached meanwhile
                if s.all {
                    *served = outboxes(&client, s, served).await?;
                    listen(&client, served, &mut listening).await?;
                }
                channels = None;
            }
            _ = stop.notify.notified() => return Ok(()),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let s = Settings {
        outbox: std::env::var("OUTBOX").ok().filter(|o| !o.is_empty()),
        all: std::env::var("OUTBOX").as_deref() == Ok("*"),
        channel: setting("OUTBOX_CHANNEL", "delivery_outbox".to_string()),
        batch: setting("BATCH", 100),
        wait: Duration::from_millis(setting("WAIT_MS", 5000)),
        sweep_every: Duration::from_secs(setting("SWEEP_EVERY", 30)),
        reclaim_after: setting("RECLAIM_AFTER", 60.0),
        retry_after_ms: setting("RETRY_AFTER_MS", 1000),
        backoff_min_ms: setting("BACKOFF_MIN_MS", 100),
        backoff_max_ms: setting("BACKOFF_MAX_MS", 30000),
        fail_every: setting("FAIL_EVERY", 0),
        push_delay: Duration::from_millis(setting("PUSH_DELAY_MS", 0)),
        fail_once_payload: setting("FAIL_ONCE_PAYLOAD", String::new()).into_bytes(),
        refuse_payload: setting("REFUSE_PAYLOAD", String::new()).into_bytes(),
        synchronous_commit: std::env::var("RELAY_SYNCHRONOUS_COMMIT")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "off".to_string()),
    };
    let stop = Arc::new(Stop {
        requested: AtomicBool::new(false),
        notify: Notify::new(),
    });
    {
        let stop = stop.clone();
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            stop.requested.store(true, Ordering::SeqCst);
            stop.notify.notify_waiters();
            stop.notify.notify_one();
        });
    }

    let mut stats = Stats::default();
    let mut unacked = Unacked::new();
    let mut served = Outboxes::new();
    let mut backoff_ms = s.backoff_min_ms;
    while !stop.requested() {
        match session(
            &s,
            &mut stats,
            &mut unacked,
            &mut served,
            &stop,
            &mut backoff_ms,
        )
        .await
        {
            Ok(()) => break,
            Err(e) => log(&format!("connection lost: {}", e)),
        }
        if stop.requested() {
            break;
        }
        // exponential backoff, with up to half of it as jitter
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(0);
        let delay = backoff_ms / 2 + nanos % (backoff_ms / 2 + 1);
        log(&format!("reconnecting in {} ms", delay));
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
            _ = stop.notify.notified() => break,
        }
        backoff_ms = (backoff_ms * 2).min(s.backoff_max_ms);
    }
    log(&format!(
        "stopped: pushed {}, acked {}, released {}, failed {}, rejected {}, connects {}, reclaimed {}, rounds {}",
        stats.pushed,
        stats.acked,
        stats.released,
        stats.failed,
        stats.rejected,
        stats.connects,
        stats.reclaimed,
        stats.rounds
    ));
}
