//! A delivery_outbox producer in Rust with tokio-postgres: the business row
//! and its outbox message in one transaction.
//!
//! 1. An order and its message commit together; relays are woken at COMMIT.
//! 2. Something fails after both writes: the rollback leaves neither.
//!
//! Prints "committed order=N outbox=M" and "rolled_back order=N outbox=M".
//! Connection: the libpq environment (see lib.rs); RECIPIENT (default
//! service:billing); OUTBOX: the outbox table (default: the extension's).

use delivery_outbox_examples::config;
use tokio_postgres::{GenericClient, NoTls};

async fn place_order<C: GenericClient>(
    client: &C,
    recipient: &str,
    outbox: Option<&str>,
    customer: &str,
    amount_cents: i32,
) -> Result<(i64, i64), tokio_postgres::Error> {
    let order_id: i64 = client
        .query_one(
            "INSERT INTO orders (customer, amount_cents) VALUES ($1, $2) RETURNING id",
            &[&customer, &amount_cents],
        )
        .await?
        .get(0);
    // The message: opaque bytes to the outbox; JSON here.
    let payload = format!(
        "{{\"order_id\": {}, \"customer\": \"{}\", \"amount_cents\": {}}}",
        order_id, customer, amount_cents
    );
    let outbox_id: i64 = client
        .query_one(
            "SELECT outbox_enqueue($1, 'order_created', $2, outbox => $3::text::regclass)",
            &[&recipient, &payload.as_bytes(), &outbox],
        )
        .await?
        .get(0);
    Ok((order_id, outbox_id))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("producer: {}", e);
        std::process::exit(1);
    }
}

async fn run() -> Result<(), tokio_postgres::Error> {
    let recipient = std::env::var("RECIPIENT")
        .ok()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "service:billing".to_string());
    let outbox = std::env::var("OUTBOX").ok().filter(|o| !o.is_empty());
    let (mut client, connection) = config("delivery_outbox-producer-rust")
        .connect(NoTls)
        .await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("producer: connection: {}", e);
        }
    });

    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS orders (
                 id bigserial PRIMARY KEY,
                 customer text NOT NULL,
                 amount_cents integer NOT NULL,
                 created_at timestamptz NOT NULL DEFAULT now())",
        )
        .await?;

    let tx = client.transaction().await?;
    let (order, message) = place_order(&tx, &recipient, outbox.as_deref(), "alice", 4200).await?;
    tx.commit().await?;
    println!("committed order={} outbox={}", order, message);

    let tx = client.transaction().await?;
    let (order, message) =
        place_order(&tx, &recipient, outbox.as_deref(), "bob", 990000).await?;
    // ... the payment is declined ...
    tx.rollback().await?;
    println!("rolled_back order={} outbox={}", order, message);
    Ok(())
}
