//! What the relay and the producer share: a connection from the libpq
//! environment, which tokio-postgres does not read by itself, and settings
//! from the environment.
//!
//! Read as libpq reads them: PGHOST (a comma list; a path is a socket
//! directory), PGPORT (a comma list), PGUSER, PGDATABASE, PGPASSWORD, else
//! the password file (PGPASSFILE, default ~/.pgpass), PGOPTIONS (e.g.
//! `-c search_path=tenant_a,outbox,public`), PGAPPNAME, PGCONNECT_TIMEOUT,
//! PGTARGETSESSIONATTRS (any, read-write) and PGSSLMODE (disable, allow and
//! prefer connect without TLS; require and verify-* fail: these examples
//! are built without TLS).  PGSERVICE and the other PG* variables are not
//! read.

use std::env;
use std::time::Duration;

use tokio_postgres::config::{SslMode, TargetSessionAttrs};

/// A setting from the environment, or its default.
pub fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A PG* variable, unset when empty (as libpq takes it).
fn pg_env(name: &str) -> Option<String> {
    env::var(name).ok().filter(|v| !v.is_empty())
}

/// The fields of a password file line, split at each unescaped ':'
/// (a backslash escapes ':' and '\\').
fn pgpass_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut().unwrap().push(next);
                }
            }
            ':' => fields.push(String::new()),
            _ => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

/// The password of the password file for host, port, dbname and user: the
/// first line whose four fields match (`*` matches anything; a socket
/// directory is matched as `localhost`).  libpq ignores a file that others
/// may read; so does this.
fn pgpass_password(host: &str, port: &str, dbname: &str, user: &str) -> Option<String> {
    let path =
        pg_env("PGPASSFILE").or_else(|| env::var("HOME").ok().map(|h| format!("{}/.pgpass", h)))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(&path).ok()?;
        if !meta.is_file() || meta.permissions().mode() & 0o077 != 0 {
            return None;
        }
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let host = if host.starts_with('/') {
        "localhost"
    } else {
        host
    };
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = pgpass_fields(line);
        if fields.len() < 5 {
            continue;
        }
        // the rest of the line is the password, colons and all
        let password = fields[4..].join(":");
        let wanted = [host, port, dbname, user];
        if fields[..4]
            .iter()
            .zip(wanted)
            .all(|(f, w)| f == "*" || f == w)
        {
            return Some(password);
        }
    }
    None
}

/// The connection settings of the libpq environment variables.
pub fn config(fallback_application_name: &str) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    let host = pg_env("PGHOST").unwrap_or_else(|| "/var/run/postgresql".to_string());
    for h in host.split(',') {
        config.host(h);
    }
    let port = pg_env("PGPORT").unwrap_or_else(|| "5432".to_string());
    for p in port.split(',') {
        if let Ok(p) = p.trim().parse() {
            config.port(p);
        }
    }
    let user = pg_env("PGUSER")
        .or_else(|| env::var("USER").ok())
        .unwrap_or_else(|| "postgres".to_string());
    config.user(&user);
    let dbname = pg_env("PGDATABASE").unwrap_or_else(|| user.clone());
    config.dbname(&dbname);
    let first_host = host.split(',').next().unwrap_or("");
    let first_port = port.split(',').next().unwrap_or("5432").trim();
    if let Some(password) =
        pg_env("PGPASSWORD").or_else(|| pgpass_password(first_host, first_port, &dbname, &user))
    {
        config.password(password);
    }
    if let Some(options) = pg_env("PGOPTIONS") {
        config.options(&options);
    }
    config.application_name(
        &pg_env("PGAPPNAME").unwrap_or_else(|| fallback_application_name.to_string()),
    );
    if let Some(secs) = pg_env("PGCONNECT_TIMEOUT").and_then(|t| t.trim().parse::<u64>().ok()) {
        if secs > 0 {
            config.connect_timeout(Duration::from_secs(secs.max(2)));
        }
    }
    if pg_env("PGTARGETSESSIONATTRS").as_deref() == Some("read-write") {
        config.target_session_attrs(TargetSessionAttrs::ReadWrite);
    }
    config.ssl_mode(match pg_env("PGSSLMODE").as_deref() {
        Some("disable") => SslMode::Disable,
        Some("require") | Some("verify-ca") | Some("verify-full") => SslMode::Require,
        _ => SslMode::Prefer,
    });
    config
}
