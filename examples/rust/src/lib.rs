//! What the relay and the producer share: a connection from the libpq
//! environment (PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD, PGAPPNAME),
//! which tokio-postgres does not read by itself, and settings from the
//! environment.

use std::env;

/// A setting from the environment, or its default.
pub fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The connection settings of the libpq environment variables.
pub fn config(fallback_application_name: &str) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    let host = env::var("PGHOST").unwrap_or_else(|_| "/var/run/postgresql".to_string());
    for h in host.split(',') {
        config.host(h);
    }
    if let Ok(port) = env::var("PGPORT") {
        if let Ok(port) = port.parse() {
            config.port(port);
        }
    }
    let user = env::var("PGUSER")
        .or_else(|_| env::var("USER"))
        .unwrap_or_else(|_| "postgres".to_string());
    config.user(&user);
    config.dbname(&env::var("PGDATABASE").unwrap_or(user));
    if let Ok(password) = env::var("PGPASSWORD") {
        config.password(password);
    }
    config.application_name(
        &env::var("PGAPPNAME").unwrap_or_else(|_| fallback_application_name.to_string()),
    );
    config
}
