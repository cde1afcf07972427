// The charts' memory: every series the pages sample, kept in this tab for
// the last ten minutes and nowhere else. Nothing is stored server-side for
// the dashboard; a page that is not open samples nothing, so its charts
// show a gap for the time it was away. The samples are put in the tab's
// sessionStorage when it is hidden or left, so a reload keeps the charts.

export const WINDOW_MS = 10 * 60 * 1000;

const series = new Map(); // key → {t: number[], v: (number|null)[]}

/** Adds a sample (value null marks a gap) and forgets what is older than the window. */
export function record(key, t, value) {
  let s = series.get(key);
  if (!s) {
    s = { t: [], v: [] };
    series.set(key, s);
  }
  const last = s.t.length ? s.t[s.t.length - 1] : -Infinity;
  if (t < last) return; // a late answer; the chart only moves forward
  if (t === last) {
    s.v[s.v.length - 1] = value;
  } else {
    s.t.push(t);
    s.v.push(value);
  }
  let cut = 0;
  while (cut < s.t.length && s.t[cut] < t - WINDOW_MS) cut++;
  if (cut > 0) {
    s.t.splice(0, cut);
    s.v.splice(0, cut);
  }
}

/** The samples of key: {t, v} arrays (empty when never sampled). */
export function get(key) {
  return series.get(key) || { t: [], v: [] };
}

/** The newest value of key, or null. */
export function latest(key) {
  const s = series.get(key);
  return s && s.v.length ? s.v[s.v.length - 1] : null;
}

/**
 * The rate of a counter series over the last spanMs: (newest − the sample
 * spanMs before) / seconds between them. Null until two samples exist, and
 * over a counter reset (a restarted aquiferd starts its counters at zero).
 */
export function rateOf(key, spanMs = 5000) {
  const s = series.get(key);
  if (!s || s.t.length < 2) return null;
  const n = s.t.length - 1;
  let i = n - 1;
  while (i > 0 && s.t[n] - s.t[i] < spanMs) i--;
  const dt = (s.t[n] - s.t[i]) / 1000;
  const dv = s.v[n] - s.v[i];
  if (s.v[n] === null || s.v[i] === null || dt <= 0 || dv < 0) return null;
  return dv / dt;
}

/** Forgets every series whose key starts with prefix and is not in keep. */
export function forget(prefix, keep) {
  for (const key of series.keys()) {
    if (key.startsWith(prefix) && !keep.has(key)) series.delete(key);
  }
}

const STORE = 'aquifer.history';

/** Keeps the samples in sessionStorage for a reload of this tab. */
export function saveHistory() {
  const now = Date.now();
  const out = {};
  for (const [key, s] of series) {
    const i = s.t.findIndex((t) => t >= now - WINDOW_MS);
    if (i >= 0) out[key] = [s.t.slice(i), s.v.slice(i)];
  }
  try {
    sessionStorage.setItem(STORE, JSON.stringify(out));
  } catch {
    // Full or refused: the charts start afresh after a reload, nothing worse.
  }
}

/** Takes back what saveHistory kept, dropping what has aged out of the window. */
export function loadHistory() {
  let saved;
  try {
    saved = JSON.parse(sessionStorage.getItem(STORE) || '{}');
  } catch {
    return;
  }
  const now = Date.now();
  for (const [key, [t, v]] of Object.entries(saved)) {
    if (!Array.isArray(t) || !Array.isArray(v) || t.length !== v.length) continue;
    for (let i = 0; i < t.length; i++) if (t[i] >= now - WINDOW_MS) record(key, t[i], v[i]);
  }
}
