// Jobs: the GET /jobs listing with its filters in the address (so a view
// can be shared), per-status counts, paging, and bulk retry / cancel of
// everything the filter selects — always counted by a dry run and
// confirmed before anything changes.

import { api } from '../api.js';
import { h, text, attr, reconcile, replace } from '../dom.js';
import { count, exact, shortId, duration } from '../format.js';
import { pageHead, table, th, toast, confirmDialog, setStatusBadge, statusBadge, setWhen, when, actionFailed } from '../ui.js';

const STATUSES = ['queued', 'in_flight', 'completed', 'failed'];
const FIELDS = ['destination', 'user_id', 'pool_id', 'tenant', 'q'];
const SINCE = { '15m': 15 * 60e3, '1h': 3600e3, '6h': 6 * 3600e3, '24h': 24 * 3600e3 };
const PAGE_SIZE = 50;

/** The hash of the jobs page for filter (an object of the hash's fields). */
export function jobsHref(filter) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(filter)) if (v) q.set(k, v);
  const s = q.toString();
  return '#/jobs' + (s ? '?' + s : '');
}

function input(name, label, value, placeholder, cls = '') {
  const id = 'f-' + name;
  return h(
    'label',
    { class: ['field', cls], for: id },
    h('span', null, label),
    h('input', { id, class: 'input', name, value: value || '', placeholder, autocomplete: 'off', spellcheck: 'false' }),
  );
}

export default {
  id: 'jobs',
  nav: 'jobs',
  title: 'Jobs',
  create(ctx) {
    const applied = { status: ctx.query.get('status') || '', since: ctx.query.get('since') || '' };
    for (const f of FIELDS) applied[f] = ctx.query.get(f) || '';
    // A relative "since" is fixed when the filter is applied: paging needs
    // the same filter on every page, and a bulk action the one it counted.
    const createdAfter = SINCE[applied.since] ? Date.now() - SINCE[applied.since] : 0;

    const statusSel = h(
      'select',
      { id: 'f-status', name: 'status', class: 'input' },
      h('option', { value: '' }, 'any status'),
      STATUSES.map((s) => h('option', { value: s, selected: applied.status === s }, s)),
    );
    const sinceSel = h(
      'select',
      { id: 'f-since', name: 'since', class: 'input' },
      h('option', { value: '' }, 'any time'),
      Object.keys(SINCE).map((s) => h('option', { value: s, selected: applied.since === s }, 'last ' + s)),
    );
    const form = h(
      'form',
      { class: 'filters', 'data-test': 'job-filters', role: 'search' },
      h('label', { class: 'field', for: 'f-status' }, h('span', null, 'Status'), statusSel),
      input('destination', 'Destination', applied.destination, 'https://api.example.com', 'field-wide'),
      input('user_id', 'User', applied.user_id, 'user_id'),
      input('q', 'Search', applied.q, 'path or failure reason'),
      input('pool_id', 'Pool', applied.pool_id, 'pool id', 'opt'),
      input('tenant', 'Tenant', applied.tenant, 'tenant (admin)', 'opt'),
      h('label', { class: 'field', for: 'f-since' }, h('span', null, 'Created'), sinceSel),
      h(
        'div',
        { class: 'field field-buttons' },
        h('button', { type: 'submit', class: 'btn btn-primary' }, 'Apply'),
        h('a', { class: 'btn btn-ghost', href: '#/jobs' }, 'Clear'),
      ),
    );
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const data = new FormData(form);
      const f = {};
      for (const [k, v] of data.entries()) f[k] = String(v).trim();
      ctx.go(jobsHref(f));
    });
    statusSel.addEventListener('change', () => form.requestSubmit());
    sinceSel.addEventListener('change', () => form.requestSubmit());

    const tabCounts = {};
    const tab = (status, label) => {
      const n = h('span', { class: 'tab-count', 'data-test': 'count-' + (status || 'all') }, '—');
      tabCounts[status || 'all'] = n;
      return h(
        'a',
        { class: 'tab', href: jobsHref({ ...applied, status }), 'aria-current': applied.status === status ? 'page' : null },
        label,
        ' ',
        n,
      );
    };
    const tabs = h(
      'nav',
      { class: 'tabs', 'aria-label': 'Jobs by status' },
      tab('', 'All'),
      tab('queued', 'Queued'),
      tab('in_flight', 'In flight'),
      tab('completed', 'Completed'),
      tab('failed', 'Failed'),
    );

    const retryBtn = h('button', { type: 'button', class: 'btn', 'data-test': 'bulk-retry' }, 'Retry all matching…');
    const cancelBtn = h('button', { type: 'button', class: 'btn btn-danger-ghost', 'data-test': 'bulk-cancel' }, 'Cancel all matching…');
    const progress = h('div', { class: 'operation', 'data-test': 'operation-progress', hidden: true, role: 'status' });
    const tbody = h('tbody');
    const empty = h('p', { class: 'empty', hidden: true }, 'No jobs match these filters.');
    const prevBtn = h('button', { type: 'button', class: 'btn btn-small', 'data-test': 'prev-page', disabled: true }, '← Newer');
    const nextBtn = h('button', { type: 'button', class: 'btn btn-small', 'data-test': 'next-page', disabled: true }, 'Older →');
    const pageInfo = h('span', { class: 'muted' });

    ctx.main.append(
      pageHead('Jobs', retryBtn, cancelBtn),
      form,
      tabs,
      progress,
      table(
        [
          'Job',
          'Status',
          'Request',
          th('User', 'opt'),
          th('Attempts', 'num'),
          'Result',
          th('Webhook', 'opt'),
          th('Created', 'num'),
          th('Updated', 'num opt'),
        ],
        tbody,
        'jobs',
      ),
      empty,
      h('div', { class: 'pager' }, prevBtn, pageInfo, nextBtn),
    );

    const cursors = ['']; // the cursor of each page visited; the last is on screen
    let next = null;
    let painted = false;
    let operation = null;

    prevBtn.addEventListener('click', () => {
      if (cursors.length > 1) cursors.pop();
      painted = false;
      ctx.refresh();
    });
    nextBtn.addEventListener('click', () => {
      if (!next) return;
      cursors.push(next);
      painted = false;
      ctx.refresh();
    });
    retryBtn.addEventListener('click', () => bulk('retry'));
    cancelBtn.addEventListener('click', () => bulk('cancel'));

    function listQuery(cursor) {
      const q = new URLSearchParams();
      if (applied.status) q.set('status', applied.status);
      for (const f of FIELDS) if (applied[f]) q.set(f, applied[f]);
      if (createdAfter) q.set('created_after', String(createdAfter));
      q.set('limit', String(PAGE_SIZE));
      if (cursor) q.set('cursor', cursor);
      return '/jobs?' + q.toString();
    }

    function bulkFilter() {
      const f = {};
      if (applied.status) f.status = [applied.status];
      for (const k of FIELDS) if (applied[k]) f[k] = applied[k];
      if (createdAfter) f.created_after = createdAfter;
      return f;
    }

    function describe(filter) {
      const parts = Object.entries(filter).map(([k, v]) => h('li', null, h('span', { class: 'muted' }, k + ' '), h('code', null, k === 'created_after' ? new Date(v).toLocaleString() : Array.isArray(v) ? v.join(', ') : v)));
      return parts.length ? h('ul', { class: 'filter-list' }, parts) : h('p', { class: 'warn-text' }, 'No filter: this selects every job you can see.');
    }

    async function bulk(kind) {
      const filter = bulkFilter();
      const btn = kind === 'retry' ? retryBtn : cancelBtn;
      btn.disabled = true;
      let dry;
      try {
        dry = await api('/jobs/' + kind, { method: 'POST', body: { filter, dry_run: true } });
      } catch (err) {
        actionFailed(ctx, err);
        return;
      } finally {
        btn.disabled = false;
      }
      const n = dry.count;
      const verb = kind === 'retry' ? 'retried' : 'cancelled';
      const body = [
        h('p', { class: 'dialog-count' }, h('b', { 'data-test': 'dry-run-count' }, String(n)), n === 1 ? ' job' : ' jobs', ' would be ' + verb + '.'),
        h('p', { class: 'muted' }, kind === 'retry'
          ? 'A retry re-queues finished jobs (completed and failed) with their original request; jobs still running or delivering a webhook are skipped.'
          : 'A cancel fails queued jobs that have not been sent; their webhooks report reason "canceled".'),
        h('p', { class: 'muted' }, 'Selected by:'),
        describe(filter),
        h('p', { class: 'muted' }, 'It runs in the background, in batches; jobs submitted after it starts are left alone.'),
      ];
      const ok = await confirmDialog({
        title: kind === 'retry' ? 'Retry jobs' : 'Cancel jobs',
        body,
        confirmLabel: (kind === 'retry' ? 'Retry ' : 'Cancel ') + exact(n) + (n === 1 ? ' job' : ' jobs'),
        danger: kind === 'cancel',
        canConfirm: n > 0,
      });
      if (!ok) return;
      try {
        const res = await api('/jobs/' + kind, { method: 'POST', body: { filter } });
        operation = res.operation;
        paintOperation();
        toast('Started ' + kind + ' ' + operation.id, 'ok');
      } catch (err) {
        actionFailed(ctx, err);
      }
      ctx.refresh();
    }

    function paintOperation() {
      if (!operation) return;
      const op = operation;
      const pct = Math.round((op.progress || 0) * 100);
      const bar = h('progress', { max: 100, value: pct, 'aria-label': op.kind + ' progress' });
      const stateCls = op.state === 'completed' ? 'good' : op.state === 'failed' ? 'bad' : 'busy';
      replace(
        progress,
        h('div', { class: 'operation-head' },
          h('strong', null, (op.kind === 'retry' ? 'Retry ' : 'Cancel ') + op.id),
          h('span', { class: 'pill', 'data-tone': stateCls }, op.state)),
        bar,
        h('div', { class: 'muted' },
          exact(op.processed) + ' of ' + exact(op.total) + ' examined (' + pct + '%) · ' + exact(op.changed) + ' changed · ' + exact(op.skipped) + ' skipped' +
            (op.error ? ' · ' + op.error : '')),
      );
      progress.hidden = false;
    }

    function create(j) {
      const tr = h(
        'tr',
        { 'data-test': 'job-row', 'data-job-id': j.job_id },
        h('td', { class: 'mono nowrap' }, h('a', { href: '#/jobs/' + j.job_id, title: j.job_id }, shortId(j.job_id))),
        h('td', null, statusBadge(j.status)),
        h('td', { class: 'request' }, h('span', { class: 'method' }), ' ', h('span', { class: 'mono wrap url' })),
        h('td', { class: 'opt nowrap clip' }),
        h('td', { class: 'num' }),
        h('td', { class: 'result' }),
        h('td', { class: 'opt' }),
        h('td', { class: 'num' }, when(j.created_at)),
        h('td', { class: 'num opt' }, when(j.updated_at)),
      );
      tr.addEventListener('click', (ev) => {
        if (ev.target.closest('a, button')) return;
        ctx.go('#/jobs/' + j.job_id);
      });
      return tr;
    }

    function update(tr, j) {
      const c = tr.children;
      setStatusBadge(c[1].firstChild, j.status);
      text(c[2].children[0], j.method);
      text(c[2].children[1], j.pool_id ? 'pool:' + j.pool_id : j.url);
      text(c[3], (j.tenant ? j.tenant + ' / ' : '') + j.user_id);
      text(c[4], j.attempts + (j.attempts_recorded > j.attempts ? ' (' + j.attempts_recorded + ' recorded)' : ''));
      let result = '';
      if (j.status === 'completed' || j.status === 'failed') {
        result = j.response_status ? String(j.response_status) : '';
        if (j.reason) result += (result ? ' · ' : '') + j.reason;
      } else if (j.last_attempt) {
        result = 'last try ' + (j.last_attempt.status || j.last_attempt.error || '') + ' in ' + duration(j.last_attempt.duration_ms);
      }
      text(c[5], result);
      attr(c[5], 'data-tone', j.status === 'failed' ? 'bad' : j.response_status >= 400 ? 'warn' : null);
      text(c[6], j.webhook ? j.webhook.status : j.webhook_url ? 'waiting' : '—');
      const now = Date.now();
      setWhen(c[7].firstChild, j.created_at, now);
      setWhen(c[8].firstChild, j.updated_at, now);
    }

    function paintCounts(counts) {
      let all = 0;
      for (const s of STATUSES) {
        text(tabCounts[s], count(counts[s]));
        attr(tabCounts[s], 'title', exact(counts[s]));
        all += counts[s] || 0;
      }
      text(tabCounts.all, count(all));
    }

    return {
      async refresh(signal) {
        const cursor = cursors[cursors.length - 1];
        const [page, op] = await Promise.all([
          api(listQuery(cursor), { signal }),
          operation && operation.state === 'running' ? api('/operations/' + encodeURIComponent(operation.id), { signal }) : null,
        ]);
        if (op) {
          operation = op;
          paintOperation();
        }
        if (page.counts) paintCounts(page.counts);
        const fresh = reconcile(tbody, page.jobs, (j) => j.job_id, create, update);
        if (painted) for (const id of fresh) tbody.querySelector('[data-job-id="' + id + '"]').classList.add('row-new');
        painted = true;
        next = page.next_cursor;
        nextBtn.disabled = !next;
        prevBtn.disabled = cursors.length <= 1;
        text(pageInfo, 'page ' + cursors.length + (page.jobs.length ? ' · ' + page.jobs.length + ' shown' : ''));
        empty.hidden = page.jobs.length > 0;
      },
    };
  },
};
