/*
 * console/lib/security.js: the access token, the session cookie and the
 * CSRF tokens.
 *
 * - Every visitor gets a session: a random id in an HttpOnly, SameSite=Strict
 *   cookie, known only to this process (a restart ends every session).
 * - With an access token (--token), a request is let in when its session
 *   entered the token on /login, or when it carries
 *   "Authorization: Bearer <token>"; any other gets the login page (401).
 * - Every form that changes something carries the session's CSRF token,
 *   an HMAC of the session id under a key drawn at start; a POST without
 *   the right one is refused (403) before anything runs.  Comparisons are
 *   constant-time.
 */
'use strict';

const crypto = require('crypto');

const COOKIE = 'outbox_console_sid';

function parseCookies(header) {
  const out = {};
  for (const part of (header || '').split(';')) {
    const i = part.indexOf('=');
    if (i < 0) continue;
    const k = part.slice(0, i).trim();
    const v = part.slice(i + 1).trim();
    try {
      out[k] = decodeURIComponent(v);
    } catch {
      out[k] = v;
    }
  }
  return out;
}

function sameSecret(a, b) {
  const x = crypto.createHash('sha256').update(String(a)).digest();
  const y = crypto.createHash('sha256').update(String(b)).digest();
  return crypto.timingSafeEqual(x, y);
}

function makeSecurity(token) {
  const key = crypto.randomBytes(32);
  const sessions = new Map();     /* sid -> {authed, seen} */
  const MAX_SESSIONS = 10000;

  function csrfFor(sid) {
    return crypto.createHmac('sha256', key).update('csrf:' + sid).digest('base64url');
  }

  /* middleware: the session (made when missing), the token check */
  function session(req, res, next) {
    const cookies = parseCookies(req.headers.cookie);
    let sid = cookies[COOKIE];
    if (!sid || !sessions.has(sid)) {
      if (sessions.size >= MAX_SESSIONS) {
        /* the oldest first: a flood of cookie-less requests cannot grow it without bound */
        const oldest = sessions.keys().next().value;
        sessions.delete(oldest);
      }
      sid = crypto.randomBytes(24).toString('base64url');
      sessions.set(sid, { authed: false });
      res.setHeader('Set-Cookie', `${COOKIE}=${sid}; Path=/; HttpOnly; SameSite=Strict`);
    }
    req.sid = sid;
    req.sess = sessions.get(sid);
    res.locals.csrf = csrfFor(sid);
    res.locals.tokenRequired = !!token;
    if (!token) return next();
    const auth = req.headers.authorization || '';
    if (auth.startsWith('Bearer ') && sameSecret(auth.slice(7), token)) return next();
    if (req.sess.authed) return next();
    if (req.path === '/login' || req.path.startsWith('/static/')) return next();
    res.status(401);
    return res.render('login', { title: 'Sign in', error: null, next: req.originalUrl });
  }

  /* POST /login: the token, checked; the session is let in */
  function login(req, res) {
    if (!token) return res.redirect(303, '/');
    if (!csrfOk(req)) return refuseCsrf(res);
    if (typeof req.body.token === 'string' && sameSecret(req.body.token, token)) {
      req.sess.authed = true;
      const next = typeof req.body.next === 'string' && req.body.next.startsWith('/') &&
        !req.body.next.startsWith('//') ? req.body.next : '/';
      return res.redirect(303, next);
    }
    res.status(401);
    return res.render('login', { title: 'Sign in', error: 'That is not the access token.', next: req.body.next || '/' });
  }

  function csrfOk(req) {
    const sent = req.body && req.body._csrf;
    return typeof sent === 'string' && sameSecret(sent, csrfFor(req.sid));
  }

  function refuseCsrf(res) {
    res.status(403);
    return res.render('message', {
      title: 'Refused',
      text: 'The form carried no valid CSRF token (an old page, another browser, or another site). Reload the page and try again.',
    });
  }

  /* middleware for every POST that changes something */
  function requireCsrf(req, res, next) {
    if (!csrfOk(req)) return refuseCsrf(res);
    return next();
  }

  return { session, login, requireCsrf };
}

module.exports = { makeSecurity, parseCookies };
