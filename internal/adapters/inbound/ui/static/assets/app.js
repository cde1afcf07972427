// The dashboard's shell: hash routing between the pages, the refresh loop
// (at most once a second, only for the page on screen, and not at all
// while the tab is hidden), the login redirect on a 401, and the open-mode
// banner.

import { api, getKey, clearKey, onResponse, RETURN_KEY, REASON_KEY } from './api.js';
import { h, text, attr } from './dom.js';
import { toast, refreshTimes } from './ui.js';
import { saveHistory, loadHistory } from './history.js';
import overview from './pages/overview.js';
import destinations from './pages/destinations.js';
import destination from './pages/destination.js';
import jobs from './pages/jobs.js';
import job from './pages/job.js';
import pools from './pages/pools.js';
import cluster from './pages/cluster.js';
import login from './pages/login.js';

const routes = [
  [/^\/overview$/, overview],
  [/^\/destinations$/, destinations],
  [/^\/destinations\/(.+)$/, destination],
  [/^\/jobs$/, jobs],
  [/^\/jobs\/([^/]+)$/, job],
  [/^\/pools$/, pools],
  [/^\/cluster$/, cluster],
  [/^\/login$/, login],
];

const content = document.getElementById('content');
const banner = document.querySelector('[data-test=open-mode-banner]');
const logout = document.querySelector('[data-test=logout]');
const who = document.querySelector('.who');
const live = document.querySelector('.live');
const liveText = live.querySelector('.live-text');
const topbar = document.querySelector('.topbar');
const menu = document.querySelector('.menu-toggle');

// What the pages share about this Aquifer and this tab's session.
const session = {
  auth: null, // "open" or "api_keys" once /health answered
  /** Pages that fetch /health pass it here, to keep the banner current. */
  health(doc) {
    if (doc && doc.auth) setAuth(doc.auth);
  },
  go,
  needLogin: (message) => needLogin(message),
};

let current = null; // the mounted page: {page, view, main, problem, ctrl, timer, ready, running, again}

function setAuth(mode) {
  session.auth = mode;
  banner.hidden = mode !== 'open';
  updateWho();
}

function updateWho() {
  const key = getKey();
  logout.hidden = !key;
  who.hidden = false;
  text(who, key ? 'signed in with an API key' : session.auth === 'open' ? 'open mode' : '');
  who.hidden = who.textContent === '';
}

function setLive(state, detail = '') {
  attr(live, 'data-live', state);
  attr(live, 'title', detail || null);
  text(liveText, { ok: 'live', hidden: 'paused', error: 'no answer', starting: 'connecting' }[state] || state);
}

/** Navigates to hash (e.g. "#/jobs?status=failed"). */
function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/overview';
  const q = raw.indexOf('?');
  const path = q >= 0 ? raw.slice(0, q) : raw;
  const query = new URLSearchParams(q >= 0 ? raw.slice(q + 1) : '');
  for (const [re, page] of routes) {
    const m = path.match(re);
    if (m) {
      let params;
      try {
        params = m.slice(1).map(decodeURIComponent);
      } catch {
        return null;
      }
      return { page, params, query };
    }
  }
  return null;
}

function route() {
  const r = parseHash();
  if (!r) {
    location.replace('#/overview');
    return;
  }
  mount(r);
}

function mount({ page, params, query }) {
  if (current) {
    current.ctrl.abort();
    clearTimeout(current.timer);
    if (current.view.destroy) current.view.destroy();
  }
  const problem = h('div', { class: 'page-problem', role: 'alert', hidden: true });
  const main = h('main', { class: 'page page-' + page.id, 'data-test': 'page-' + page.id, 'aria-busy': 'true' }, problem);
  content.replaceChildren(main);
  for (const a of document.querySelectorAll('[data-nav]')) attr(a, 'aria-current', a.dataset.nav === page.nav ? 'page' : null);
  topbar.classList.remove('nav-open');
  menu.setAttribute('aria-expanded', 'false');
  updateWho(); // the sign-in form may have just stored a key
  const c = { page, main, problem, ctrl: new AbortController(), timer: 0, ready: false, running: false, again: false };
  current = c;
  const ctx = { main, params, query, session, go, refresh: () => refreshNow(c), signal: c.ctrl.signal };
  c.view = page.create(ctx);
  document.title = (c.view.title || page.title) + ' · Aquifer';
  tick(c);
}

/** Refreshes the page now (after an action), or right after a refresh in progress. */
function refreshNow(c) {
  if (c !== current) return;
  if (c.running) {
    c.again = true;
    return;
  }
  tick(c);
}

async function tick(c) {
  if (c !== current) return;
  clearTimeout(c.timer);
  if (document.hidden) {
    c.parked = true;
    setLive('hidden', 'The tab is hidden: nothing is fetched until it is shown again.');
    return;
  }
  const started = performance.now();
  c.running = true;
  try {
    await c.view.refresh(c.ctrl.signal);
    if (c !== current) return;
    refreshTimes(c.main);
    c.problem.hidden = true;
    if (!c.ready) {
      c.ready = true;
      c.main.setAttribute('data-ready', 'true');
      c.main.removeAttribute('aria-busy');
    }
    setLive('ok', 'Last refreshed ' + new Date().toLocaleTimeString());
  } catch (err) {
    if (c !== current || (err && err.name === 'AbortError')) return;
    if (err && err.status === 401) {
      needLogin(err.message);
      return;
    }
    const msg = err && err.message ? err.message : String(err);
    setLive('error', msg);
    text(c.problem, (c.ready ? 'The last refresh failed, showing older data: ' : 'Could not load this page: ') + msg);
    c.problem.hidden = false;
    if (!(err && 'status' in err)) console.error(err); // a bug of ours, not an answer of the API
  } finally {
    c.running = false;
  }
  if (c !== current) return;
  if (c.again) {
    c.again = false;
    tick(c);
    return;
  }
  const interval = c.view.interval ? c.view.interval() : 1000;
  c.timer = setTimeout(() => tick(c), Math.max(250, interval - (performance.now() - started)));
}

/** The API wants a key (or the one we sent was refused): off to the login form. */
function needLogin(message) {
  if (current && current.page === login) return;
  const hadKey = !!getKey();
  if (hadKey) clearKey();
  sessionStorage.setItem(RETURN_KEY, location.hash || '#/overview');
  // Arriving without a key is no error; a key the API stopped taking is.
  sessionStorage.setItem(REASON_KEY, JSON.stringify({ message, refused: hadKey }));
  updateWho();
  location.hash = '#/login';
}

window.addEventListener('pagehide', saveHistory);

document.addEventListener('visibilitychange', () => {
  if (document.hidden) saveHistory();
  if (!document.hidden && current && current.parked) {
    current.parked = false;
    tick(current);
  }
});

window.addEventListener('hashchange', route);

onResponse((headers) => {
  if (headers.get('Aquifer-Warning') && session.auth !== 'open') setAuth('open');
});

logout.addEventListener('click', () => {
  clearKey();
  updateWho();
  toast('Signed out: the key is forgotten in this tab.', 'ok');
  go('#/login');
});

menu.addEventListener('click', () => {
  const open = topbar.classList.toggle('nav-open');
  menu.setAttribute('aria-expanded', String(open));
});

document.querySelector('[data-skip]').addEventListener('click', (ev) => {
  ev.preventDefault();
  content.focus();
});

const version = document.querySelector('meta[name=aquifer-version]');
text(document.querySelector('[data-version]'), version ? version.content : '');

async function boot() {
  loadHistory();
  setLive('starting');
  updateWho();
  try {
    session.health(await api('/health', { accept: [503], key: '' }));
  } catch {
    // The pages will say what is wrong when they load.
  }
  route();
}

boot();
