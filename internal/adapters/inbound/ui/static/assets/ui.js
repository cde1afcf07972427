// The pieces every page uses: toasts for what an action answered, the
// confirmation dialog, status badges, stat tiles and empty states.

import { h, replace, text, attr } from './dom.js';
import { relative, dateTime } from './format.js';

const MAX_TOASTS = 4;

/**
 * Reports a failed action: a 401 (the key expired or was revoked) goes to
 * the login form, anything else is a toast with the API's message.
 */
export function actionFailed(ctx, err) {
  if (err && err.status === 401) ctx.session.needLogin(err.message);
  else toast(err && err.message ? err.message : String(err));
}

/**
 * Shows message in a toast. Errors (the API's own message) are
 * [data-test=toast] and stay 10 s; notices of success are
 * [data-test=notice] and stay 4 s.
 */
export function toast(message, kind = 'error') {
  const box = document.querySelector('.toasts');
  if (!box) return;
  const error = kind === 'error';
  const close = h('button', { type: 'button', class: 'toast-close', 'aria-label': 'Dismiss' }, '×');
  const el = h(
    'div',
    { class: 'toast toast-' + kind, 'data-test': error ? 'toast' : 'notice', role: error ? 'alert' : 'status' },
    h('span', { class: 'toast-text' }, message),
    close,
  );
  const dismiss = () => el.remove();
  close.addEventListener('click', dismiss);
  box.append(el);
  while (box.children.length > MAX_TOASTS) box.firstElementChild.remove();
  setTimeout(dismiss, error ? 10000 : 4000);
}

const FOCUSABLE = 'button:not([disabled]), [href], input:not([disabled]), select:not([disabled]), textarea:not([disabled]), [tabindex]:not([tabindex="-1"])';

/**
 * Asks for confirmation in a modal dialog: Tab stays inside it, Esc and
 * the cancel button answer false, the confirm button true. Focus returns
 * to where it was. The body may be nodes the caller keeps updating.
 */
export function confirmDialog({ title, body, confirmLabel = 'Confirm', danger = false, canConfirm = true }) {
  return new Promise((resolve) => {
    const before = document.activeElement;
    const confirm = h(
      'button',
      { type: 'button', class: ['btn', danger ? 'btn-danger' : 'btn-primary'], 'data-test': 'confirm', disabled: !canConfirm },
      confirmLabel,
    );
    const cancel = h('button', { type: 'button', class: 'btn', 'data-test': 'cancel-confirm' }, 'Go back');
    const heading = h('h2', { id: 'dialog-title' }, title);
    const dlg = h(
      'dialog',
      { class: 'dialog', 'aria-labelledby': 'dialog-title' },
      heading,
      h('div', { class: 'dialog-body' }, body),
      h('div', { class: 'dialog-actions' }, cancel, confirm),
    );
    let answered = false;
    const finish = (ok) => {
      if (answered) return;
      answered = true;
      if (dlg.open) dlg.close();
      dlg.remove();
      if (before && typeof before.focus === 'function') before.focus();
      resolve(ok);
    };
    confirm.addEventListener('click', () => finish(true));
    cancel.addEventListener('click', () => finish(false));
    dlg.addEventListener('cancel', (ev) => {
      ev.preventDefault();
      finish(false);
    });
    dlg.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape') {
        ev.preventDefault();
        finish(false);
        return;
      }
      if (ev.key !== 'Tab') return;
      const items = Array.from(dlg.querySelectorAll(FOCUSABLE));
      if (items.length === 0) return;
      const first = items[0];
      const last = items[items.length - 1];
      if (ev.shiftKey && document.activeElement === first) {
        ev.preventDefault();
        last.focus();
      } else if (!ev.shiftKey && document.activeElement === last) {
        ev.preventDefault();
        first.focus();
      }
    });
    document.body.append(dlg);
    dlg.showModal();
    // Enter confirms a retry at once; a cancel, which cannot be undone,
    // starts on Go back.
    (canConfirm && !danger ? confirm : cancel).focus();
  });
}

/** A job status badge; its text is the API's status exactly. */
export function statusBadge(status, testId = 'job-status') {
  return h('span', { class: 'badge st-' + status, 'data-test': testId }, status);
}

export function setStatusBadge(el, status) {
  attr(el, 'class', 'badge st-' + status);
  text(el, status);
}

/** A stat tile: a big number with a label and a line of detail. */
export function statTile(testId, label, href) {
  const value = h('span', { class: 'stat-value', 'data-test': testId }, '—');
  const sub = h('span', { class: 'stat-sub muted' });
  const inner = [h('span', { class: 'stat-label' }, label), value, sub];
  const el = href ? h('a', { class: 'stat', href }, inner) : h('div', { class: 'stat' }, inner);
  return {
    el,
    set(v, detail = '', title = '') {
      text(value, v);
      text(sub, detail);
      attr(value, 'title', title || null);
    },
    tone(t) {
      attr(el, 'data-tone', t || null);
    },
  };
}

/**
 * A <time> showing "3 min ago", the exact time on hover. The shell keeps
 * every such element current after each refresh (refreshTimes), so pages
 * need not redraw to let time pass.
 */
export function when(ms, now = Date.now()) {
  const el = h('time', { class: 'rel' });
  setWhen(el, ms, now);
  return el;
}

export function setWhen(el, ms, now = Date.now()) {
  attr(el, 'data-ms', ms || null);
  text(el, relative(ms, now));
  attr(el, 'datetime', ms ? new Date(ms).toISOString() : null);
  attr(el, 'title', ms ? dateTime(ms) : null);
}

/** An exact time with its relative one beside it: "4 May 2026, 10:00:01 (3 min ago)". */
export function at(ms, now = Date.now()) {
  return ms ? [dateTime(ms), ' (', when(ms, now), ')'] : '—';
}

/** Brings every relative time under root up to now. */
export function refreshTimes(root, now = Date.now()) {
  for (const el of root.querySelectorAll('time.rel[data-ms]')) text(el, relative(Number(el.dataset.ms), now));
}

/** A page heading with optional actions on the right. */
export function pageHead(title, ...actions) {
  return h('div', { class: 'page-head' }, h('h1', null, title), actions.length ? h('div', { class: 'page-actions' }, actions) : null);
}

/** A heading naming one thing by its id: "Job 01a2…" with the id in monospace. */
export function idTitle(kind, id) {
  return [kind + ' ', h('span', { class: 'mono id-title' }, id)];
}

/**
 * A definition list of [term, description] pairs; falsy entries are
 * skipped, so optional facts can be written inline (cond && [...]). With
 * el, its contents are replaced; otherwise a new list is made.
 */
export function facts(items, el = h('dl', { class: 'facts' })) {
  return replace(el, items.filter(Boolean).map(([dt, dd]) => [h('dt', null, dt), h('dd', null, dd)]));
}

/** A titled card. */
export function card(title, ...children) {
  return h('section', { class: 'card' }, title ? h('h2', { class: 'card-title' }, title) : null, children);
}

/** An inline problem message for a page whose data could not load. */
export function problem(el, message) {
  replace(el, h('div', { class: 'problem', role: 'alert' }, h('strong', null, 'Could not load: '), message));
}

/** A table in a horizontally scrolling box, so phones scroll the table, not the page. */
export function table(headers, tbody, cls = '') {
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: ['table', cls] },
      h('thead', null, h('tr', null, headers.map((c) => (typeof c === 'string' ? h('th', { scope: 'col' }, c) : c)))),
      tbody,
    ),
  );
}

/** A header cell for numbers (right-aligned) or one hidden on phones. */
export function th(label, cls) {
  return h('th', { scope: 'col', class: cls }, label);
}
