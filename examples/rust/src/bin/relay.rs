//! A delivery_outbox relay in Rust with tokio-postgres.
//!
//! Copy this file and replace `deliver()` with the code that pushes a row
//! to its recipient.  The loop is the one of README's "relay loop", as in
//! the C, Python and Node.js relays:
//!
//!   connect -> LISTEN -> ack what was pushed before a lost connection ->
//!   drain -> wait for a notification (or a timeout) -> drain -> ...
//!
//!   drain: rows = outbox_claim(BATCH); deliver() each row;
//!          outbox_release(failed ids, retry_after, error);
//!          outbox_reject(refused ids, error); outbox_ack(pushed ids);
//!          until a claim comes back empty.
//!
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
//!   the batch back, ack what was pushed, exit 0.
//!
//! Connection: the libpq environment (see lib.rs).  Settings
//! (environment): OUTBOX (the outbox table; default the extension's),
//! OUTBOX_CHANNEL (delivery_outbox), BATCH (100), WAIT_MS (5000),
//! SWEEP_EVERY (30 s, 0 = never), RECLAIM_AFTER (60 s), RETRY_AFTER_MS
//! (1000: retry_after of a failed push; 0 = none, the outbox's backoff_base
//! decides), BACKOFF_MIN_MS (100), BACKOFF_MAX_MS (30000); test hooks:
//! FAIL_EVERY (every Nth push fails; 0 = never), FAIL_ONCE_PAYLOAD (the
//! first push of a row with exactly this payload fails), REFUSE_PAYLOAD
//! (the recipient refuses a row with exactly this payload), PUSH_DELAY_MS.
//!
//! Each successful push prints "recipient id" on stdout; the log goes to
//! stderr.

use std::error::Error;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delivery_outbox_examples::{config, setting};
use futures_util::{stream, StreamExt};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, Notify};
use tokio_postgres::{AsyncMessage, Client, NoTls};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

struct Settings {
    outbox: Option<String>,
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
}

#[derive(Default)]
struct Stats {
    pushes: u64,
    pushed: u64,
    acked: u64,
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

async fn ack(client: &Client, s: &Settings, stats: &mut Stats, ids: &[i64]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let n: i32 = client
        .query_one(
            "SELECT outbox_ack($1::bigint[], outbox => $2::text::regclass)",
            &[&ids, &s.outbox],
        )
        .await?
        .get(0);
    stats.acked += n as u64;
    Ok(())
}

/// Give claimed rows back at once (not pushed: shutting down).
async fn release(client: &Client, s: &Settings, stats: &mut Stats, ids: &[i64]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let n: i32 = client
        .query_one(
            "SELECT outbox_release($1::bigint[], outbox => $2::text::regclass)",
            &[&ids, &s.outbox],
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
                    &[&id, &s.retry_after_ms, error, &s.outbox],
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
                    &[&id, error, &s.outbox],
                )
                .await?
                .get(0);
            stats.rejected += n as u64;
        }
    }
    Ok(())
}

/// How long until the earliest row that is pending but not claimable yet
/// falls due (zero if due already), or None when there is none.
async fn until_next_due(client: &Client, s: &Settings) -> Result<Option<Duration>> {
    let ms: Option<f64> = client
        .query_one(
            "SELECT ceil(EXTRACT(epoch FROM outbox_next_due(outbox => $1::text::regclass)
                                            - clock_timestamp()) * 1000)::float8",
            &[&s.outbox],
        )
        .await?
        .get(0);
    Ok(ms.map(|ms| Duration::from_millis(ms.max(0.0) as u64)))
}

/// Claim, push, release, reject and ack until a claim comes back empty (or
/// a stop is requested).  `unacked` holds ids pushed but not acked yet.
async fn drain(
    client: &Client,
    s: &Settings,
    stats: &mut Stats,
    unacked: &mut Vec<i64>,
    stop: &Stop,
) -> Result<()> {
    while !stop.requested() {
        let rows = client
            .query(
                "SELECT id, recipient, payload, delivery_attempts
                   FROM outbox_claim($1::integer, outbox => $2::text::regclass)",
                &[&s.batch, &s.outbox],
            )
            .await?;
        if rows.is_empty() {
            return Ok(());
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
                    unacked.push(row.id);
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
                    settle(client, s, stats, row.id, &push).await?;
                }
            }
        }
        release(client, s, stats, &unpushed).await?;
        ack(client, s, stats, unacked).await?;
        unacked.clear();
    }
    Ok(())
}

/// One connection's life: Ok when a stop was requested, Err when the
/// connection was lost.
async fn session(
    s: &Settings,
    stats: &mut Stats,
    unacked: &mut Vec<i64>,
    stop: &Stop,
    backoff_ms: &mut u64,
) -> Result<()> {
    let (client, mut connection) = config("delivery_outbox-relay-rust")
        .connect(NoTls)
        .await?;
    // The connection runs in its own task and forwards notifications; the
    // channel closes when the connection ends.
    let (tx, mut wakeups) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(_)) => {
                    let _ = tx.send(());
                }
                Ok(_) => {}
                Err(e) => {
                    log(&format!("connection: {}", e));
                    break;
                }
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN \"{}\"", s.channel.replace('"', "\"\"")))
        .await?;
    stats.connects += 1;
    *backoff_ms = s.backoff_min_ms;
    log(&format!("connected, listening on {}", s.channel));

    // pushed before the connection broke: a late ack still counts
    ack(&client, s, stats, unacked).await?;
    unacked.clear();

    let mut last_sweep = Instant::now();
    loop {
        drain(&client, s, stats, unacked, stop).await?;
        if stop.requested() {
            return Ok(());
        }
        if !s.sweep_every.is_zero() && last_sweep.elapsed() >= s.sweep_every {
            last_sweep = Instant::now();
            let n: i32 = client
                .query_one(
                    "SELECT outbox_reclaim(pg_catalog.make_interval(secs => $1::float8),
                                           outbox => $2::text::regclass)",
                    &[&s.reclaim_after, &s.outbox],
                )
                .await?
                .get(0);
            if n > 0 {
                stats.reclaimed += n as u64;
                log(&format!("reclaimed {} rows", n));
                continue;
            }
        }
        let wait = match until_next_due(&client, s).await? {
            Some(due) => due.min(s.wait),
            None => s.wait,
        };
        tokio::select! {
            wakeup = wakeups.recv() => {
                if wakeup.is_none() {
                    return Err("connection closed".into());
                }
                while wakeups.try_recv().is_ok() {}
            }
            _ = tokio::time::sleep(wait) => {}
            _ = stop.notify.notified() => return Ok(()),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let s = Settings {
        outbox: std::env::var("OUTBOX").ok().filter(|o| !o.is_empty()),
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
    let mut unacked = Vec::new();
    let mut backoff_ms = s.backoff_min_ms;
    while !stop.requested() {
        match session(&s, &mut stats, &mut unacked, &stop, &mut backoff_ms).await {
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
        "stopped: pushed {}, acked {}, released {}, failed {}, rejected {}, connects {}, reclaimed {}",
        stats.pushed,
        stats.acked,
        stats.released,
        stats.failed,
        stats.rejected,
        stats.connects,
        stats.reclaimed
    ));
}
