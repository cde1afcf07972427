// The dashboard's one way to reach the REST API. The key the operator
// typed lives in this tab's sessionStorage only (never a cookie, so a
// foreign page cannot ride on it); every call carries it as a bearer token,
// and every call with a body sends it as JSON, which the API requires of
// state-changing requests from browsers.

const KEY = 'aquifer.key';

/** Where the login form sends the operator back to, and why it was shown. */
export const RETURN_KEY = 'aquifer.return';
export const REASON_KEY = 'aquifer.login-reason';

/** An answer of the API that is not a success, with its JSON error. */
export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.body = body || {};
  }
}

const listeners = new Set();

/** Calls fn(headers) after every answer, e.g. to notice open mode. */
export function onResponse(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

export function getKey() {
  try {
    return sessionStorage.getItem(KEY) || '';
  } catch {
    return '';
  }
}

export function setKey(key) {
  sessionStorage.setItem(KEY, key);
}

export function clearKey() {
  sessionStorage.removeItem(KEY);
}

/**
 * Calls the API at path (a path on this origin) and returns the decoded
 * JSON answer, or its text with {text: true}. A non-2xx answer throws an
 * ApiError carrying the API's own message. {accept: [503]} returns such
 * statuses' bodies instead of throwing (GET /health answers 503 when
 * degraded, with the document).
 */
export async function api(path, opts = {}) {
  const { method = 'GET', body, signal, text = false, accept = [], key = getKey() } = opts;
  const headers = { Accept: text ? 'text/plain' : 'application/json' };
  if (key) headers.Authorization = 'Bearer ' + key;
  const init = { method, headers, signal, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    if (err && err.name === 'AbortError') throw err;
    throw new ApiError(0, 'Aquifer did not answer (' + (err && err.message ? err.message : 'network error') + ')');
  }
  for (const fn of listeners) fn(res.headers, res.status);
  if (res.ok || accept.includes(res.status)) {
    if (text) return res.text();
    try {
      return await res.json();
    } catch (err) {
      if (err && err.name === 'AbortError') throw err;
      throw new ApiError(res.status, path + ' did not answer JSON (is a proxy in the way?)');
    }
  }
  let payload = {};
  try {
    payload = await res.json();
  } catch {
    // Not JSON: a proxy's page. Say what we got.
  }
  const msg = payload.error || res.status + ' ' + (res.statusText || 'error');
  throw new ApiError(res.status, msg, payload);
}

/** Escapes a destination as the one path segment /lanes/{destination} takes. */
export function laneSegment(dest) {
  return encodeURIComponent(dest);
}
