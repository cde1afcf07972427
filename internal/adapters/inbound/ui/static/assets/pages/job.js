// One job: its status, its request as the API shows it (secrets
// redacted), every attempt of its history, the response, the webhook, and
// retry / cancel.

import { api } from '../api.js';
import { h, text, attr, replace, reconcile } from '../dom.js';
import { count, duration, exact } from '../format.js';
import { pageHead, card, toast, actionFailed, statusBadge, setStatusBadge, at, idTitle, setWhen, facts } from '../ui.js';
import { laneHref } from '../lanes.js';

/** scheme://host:port of a URL, as lanes are named; '' when it does not parse. */
function destinationOf(raw) {
  try {
    const u = new URL(raw);
    const port = u.port || (u.protocol === 'https:' ? '443' : u.protocol === 'http:' ? '80' : '');
    return u.protocol + '//' + u.hostname + (port ? ':' + port : '');
  } catch {
    return '';
  }
}

/** The body pretty-printed when it is JSON, as given otherwise. */
function prettyBody(body, contentType) {
  if (!body) return '';
  if ((contentType || '').includes('json') || /^\s*[[{]/.test(body)) {
    try {
      return JSON.stringify(JSON.parse(body), null, 2);
    } catch {
      // not JSON after all
    }
  }
  return body;
}

export default {
  id: 'job',
  nav: 'jobs',
  title: 'Job',
  create(ctx) {
    const id = ctx.params[0];
    const status = statusBadge('…');
    const retry = h('button', { type: 'button', class: 'btn btn-primary', 'data-test': 'retry-job' }, 'Retry');
    const cancel = h('button', { type: 'button', class: 'btn btn-danger-ghost', 'data-test': 'cancel-job' }, 'Cancel');
    const copy = h('button', { type: 'button', class: 'btn btn-ghost btn-small', title: 'Copy the job id' }, 'Copy id');
    const summary = h('div', { 'data-test': 'job-summary' });
    const request = h('div', { 'data-test': 'job-request', class: 'request-view' });
    const attempts = h('ol', { class: 'timeline' });
    const noAttempts = h('p', { class: 'empty' }, 'Not sent yet.');
    const response = h('div', { 'data-test': 'job-response' });
    const webhook = h('div', { 'data-test': 'job-webhook' });
    let job = null;
    let shown = ''; // what the static sections show, so a refresh does not redraw (and drop a selection) needlessly

    ctx.main.append(
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/jobs' }, 'Jobs'), ' / '),
      pageHead(idTitle('Job', id), status, copy, retry, cancel),
      h('div', { class: 'grid-2 grid-wide-left' }, card('Job', summary), card('Request', request)),
      h('div', { class: 'grid-2 grid-wide-left' }, card('Attempts', attempts, noAttempts), h('div', { class: 'stack' }, card('Response', response), card('Webhook', webhook))),
    );

    copy.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(id);
        toast('Copied ' + id, 'ok');
      } catch {
        toast('Could not copy: the browser refused the clipboard');
      }
    });
    retry.addEventListener('click', () => act('retry'));
    cancel.addEventListener('click', () => act('cancel'));

    async function act(kind) {
      const btn = kind === 'retry' ? retry : cancel;
      btn.disabled = true;
      try {
        const j = kind === 'retry'
          ? await api('/jobs/' + encodeURIComponent(id) + '/retry', { method: 'POST' })
          : await api('/jobs/' + encodeURIComponent(id), { method: 'DELETE' });
        paint(j);
        toast(kind === 'retry' ? 'Queued again: ' + id : 'Cancelled ' + id, 'ok');
      } catch (err) {
        actionFailed(ctx, err);
      } finally {
        btn.disabled = false;
        ctx.refresh();
      }
    }

    function paint(j) {
      job = j;
      const now = Date.now();
      setStatusBadge(status, j.status);
      const finished = j.status === 'completed' || j.status === 'failed';
      retry.disabled = !finished;
      attr(retry, 'title', finished ? 'Send it again with its original request' : 'Only a finished job can be retried');
      cancel.disabled = j.status !== 'queued';
      attr(cancel, 'title', j.status === 'queued' ? 'Fail it before it is sent' : 'Only a job not yet sent can be cancelled');
      paintAttempts(j.history || [], now);
      const sig = JSON.stringify(j);
      if (sig === shown) return;
      shown = sig;
      const dest = j.pool_id ? 'pool:' + j.pool_id : destinationOf(j.url);
      replace(
        summary,
        facts([
          ['Status', j.status + (j.scheduled ? ' — scheduled' : '') + (j.reason ? ' — ' + j.reason : '')],
          ['Created', at(j.created_at, now)],
          ['Updated', at(j.updated_at, now)],
          j.not_before && ['Not before', at(Date.parse(j.not_before), now)],
          j.deadline && ['Deadline', at(Date.parse(j.deadline), now)],
          j.priority && j.priority !== 'normal' && ['Priority', j.priority],
          j.retry && ['Retry policy', retryPolicy(j.retry)],
          j.timeout_seconds && ['Timeout', j.timeout_seconds + ' s per attempt'],
          j.traceparent && ['Trace', h('span', { class: 'mono' }, j.traceparent.slice(3, 35))],
          j.tenant && ['Tenant', j.tenant],
          ['User', j.user_id],
          dest && ['Destination', h('a', { href: laneHref(dest), class: 'mono' }, dest)],
          ['Attempts', exact(j.attempts) + ' in this cycle'],
        ]),
      );
      const headers = Object.entries(j.headers || {}).sort(([a], [b]) => a.localeCompare(b));
      replace(
        request,
        h('p', { class: 'mono wrap request-line' }, h('b', null, j.method), ' ', j.pool_id ? 'pool:' + j.pool_id : j.url),
        headers.length
          ? h('table', { class: 'table kv' }, h('tbody', null, headers.map(([k, v]) => h('tr', null, h('th', { scope: 'row', class: 'mono' }, k), h('td', { class: 'mono wrap', 'data-redacted': v === '[redacted]' ? 'true' : null }, v)))))
          : h('p', { class: 'muted' }, 'No headers.'),
        h('p', { class: 'muted small' }, 'Secret header values and URL parameters are redacted by the API; the request body is never shown.'),
      );
      paintResponse(j, finished);
      paintWebhook(j, finished);
    }

    function paintAttempts(history, now) {
      noAttempts.hidden = history.length > 0;
      const longest = Math.max(1, ...history.map((a) => a.duration_ms || 0));
      const items = history.map((a, i) => ({ ...a, n: i + 1 })).reverse();
      reconcile(
        attempts,
        items,
        (a) => a.at + ':' + a.n,
        () =>
          h(
            'li',
            { 'data-test': 'attempt', class: 'attempt' },
            h('span', { class: 'attempt-dot', 'aria-hidden': 'true' }),
            h('div', { class: 'attempt-main' }, h('span', { class: 'attempt-outcome' }), h('span', { class: 'attempt-meta muted' })),
            h('span', { class: 'attempt-bar', 'aria-hidden': 'true' }, h('span')),
            h('time', { class: 'attempt-time rel muted' }),
          ),
        (li, a) => {
          const ok = a.status && a.status < 500 && a.status !== 429;
          attr(li, 'data-tone', a.error || !ok ? 'bad' : a.status >= 400 ? 'warn' : 'good');
          const main = li.children[1];
          text(main.children[0], a.status ? 'HTTP ' + a.status : a.error || 'no answer');
          const meta = [duration(a.duration_ms)];
          if (a.signal) meta.push('signal ' + a.signal);
          if (a.member) meta.push('member ' + a.member);
          if (a.status && a.error) meta.push(a.error);
          text(main.children[1], meta.join(' · '));
          li.children[2].firstChild.style.width = Math.max(2, ((a.duration_ms || 0) / longest) * 100).toFixed(0) + '%';
          setWhen(li.children[3], a.at, now);
        },
      );
    }

    function paintResponse(j, finished) {
      if (!finished) {
        replace(response, h('p', { class: 'empty' }, j.status === 'in_flight' ? 'Being sent now…' : 'No response yet: the job waits for its turn.'));
        return;
      }
      const notes = [];
      if (j.body_truncated) notes.push('truncated at AQUIFER_MAX_RESPONSE_BYTES');
      if (j.body_encoding === 'base64') notes.push('not UTF-8: shown as base64');
      replace(
        response,
        facts([
          ['Status', j.response_status ? String(j.response_status) : 'no HTTP response'],
          j.content_type && ['Content-Type', j.content_type],
          j.reason && ['Reason', j.reason],
        ]),
        j.body ? h('pre', { class: 'body' }, prettyBody(j.body, j.content_type)) : h('p', { class: 'muted' }, 'Empty body.'),
        notes.length ? h('p', { class: 'muted small' }, notes.join(' · ')) : null,
      );
    }

    function paintWebhook(j, finished) {
      if (!j.webhook_url) {
        replace(webhook, h('p', { class: 'muted' }, 'No webhook_url: the caller polls or streams the result.'));
        return;
      }
      const w = j.webhook;
      replace(
        webhook,
        facts([
          ['URL', h('span', { class: 'mono wrap' }, j.webhook_url)],
          ['State', w ? w.status : finished ? 'pending' : 'sent when the job finishes'],
          w && ['Attempts', count(w.attempts)],
          w && w.response_status !== undefined && ['Receiver answered', w.response_status ? String(w.response_status) : 'no answer'],
          w && w.reason && ['Reason', w.reason],
        ]),
      );
    }

    return {
      title: 'Job ' + id.slice(0, 8),
      // A finished job changes only when someone retries it.
      interval: () => (job && (job.status === 'completed' || job.status === 'failed') && (!job.webhook || job.webhook.status !== 'pending') ? 3000 : 1000),
      async refresh(signal) {
        paint(await api('/jobs/' + encodeURIComponent(id), { signal }));
      },
    };
  },
};

// retryPolicy describes a job's own retry policy.
function retryPolicy(r) {
  const parts = [];
  if (r.max_attempts) parts.push(r.max_attempts + ' attempts');
  if (r.backoff_seconds) parts.push('backoff ' + r.backoff_seconds + ' s, doubling' + (r.max_backoff_seconds ? ' up to ' + r.max_backoff_seconds + ' s' : ''));
  return parts.join(', ') || 'the server\'s';
}
