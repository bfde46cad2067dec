/*
 * console/lib/conninfo.js: a libpq connection string as a node-postgres
 * configuration.
 *
 * libpq takes two forms (PostgreSQL docs, "Connection Strings"): a URI
 * (postgresql://user@host:port/dbname?...), which pg-connection-string
 * parses, and a keyword/value string ("host=/tmp/x port=5511 dbname=y"),
 * which node-postgres does not, so it is parsed here: values may be quoted
 * with single quotes, inside which \' and \\ are escapes.  A host that
 * starts with "/" is a unix-socket directory, as for libpq; node-postgres
 * connects to <host>/.s.PGSQL.<port> for such a host.  Anything left out
 * falls back to node-postgres's defaults, which read PGHOST, PGPORT,
 * PGDATABASE, PGUSER and PGPASSWORD as libpq does.
 */
'use strict';

const { parse: parseUri } = require('pg-connection-string');

/* libpq keywords and node-postgres's names for them */
const KEYWORDS = {
  host: 'host',
  hostaddr: 'host',
  port: 'port',
  dbname: 'database',
  user: 'user',
  password: 'password',
  application_name: 'application_name',
  connect_timeout: 'connect_timeout',
  options: 'options',
  sslmode: 'sslmode',
  sslcert: 'sslcert',
  sslkey: 'sslkey',
  sslrootcert: 'sslrootcert',
};

/*
 * parseKeywords(str): the keyword=value pairs of str, as an object;
 * throws on a malformed string (missing "=", unterminated quote).
 */
function parseKeywords(str) {
  const out = {};
  let i = 0;
  const n = str.length;
  const isSpace = (c) => c === ' ' || c === '\t' || c === '\n' || c === '\r';
  while (i < n) {
    while (i < n && isSpace(str[i])) i++;
    if (i >= n) break;
    let key = '';
    while (i < n && str[i] !== '=' && !isSpace(str[i])) key += str[i++];
    while (i < n && isSpace(str[i])) i++;
    if (str[i] !== '=') throw new Error(`missing "=" after "${key}" in connection info string`);
    i++;
    while (i < n && isSpace(str[i])) i++;
    let val = '';
    if (str[i] === "'") {
      i++;
      let closed = false;
      while (i < n) {
        const c = str[i++];
        if (c === '\\' && i < n) val += str[i++];
        else if (c === "'") { closed = true; break; }
        else val += c;
      }
      if (!closed) throw new Error('unterminated quoted string in connection info string');
    } else {
      while (i < n && !isSpace(str[i])) {
        if (str[i] === '\\' && i + 1 < n) i++;
        val += str[i++];
      }
    }
    out[key] = val;
  }
  return out;
}

/*
 * toPgConfig(conninfo): a node-postgres client configuration for a libpq
 * connection string of either form; throws on an unknown keyword, as libpq
 * does ("invalid connection option").
 */
function toPgConfig(conninfo) {
  const s = (conninfo || '').trim();
  if (/^postgres(ql)?:\/\//.test(s)) return parseUri(s);
  const pairs = parseKeywords(s);
  const cfg = {};
  for (const [k, v] of Object.entries(pairs)) {
    const name = KEYWORDS[k];
    if (!name) throw new Error(`invalid connection option "${k}"`);
    if (name === 'port' || name === 'connect_timeout') cfg[name] = Number(v);
    else if (name === 'sslmode') {
      if (v === 'disable') cfg.ssl = false;
      else if (v === 'require' || v === 'prefer' || v === 'allow') cfg.ssl = { rejectUnauthorized: false };
      else cfg.ssl = true;
    } else cfg[name] = v;
  }
  if (cfg.connect_timeout) {
    cfg.connectionTimeoutMillis = cfg.connect_timeout * 1000;
    delete cfg.connect_timeout;
  }
  return cfg;
}

module.exports = { toPgConfig, parseKeywords };
