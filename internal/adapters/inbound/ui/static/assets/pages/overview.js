// Overview: how fast work comes in, goes out and reports back, how much
// waits, and what failed — live, with the last ten minutes charted.

import { api } from '../api.js';
import { h, text, attr, reconcile } from '../dom.js';
import { record, rateOf, latest } from '../history.js';
import { parseMetrics, sum } from '../metrics.js';
import { timeChart } from '../chart.js';
import { count, rate, decimal, duration, bytes, exact, plural } from '../format.js';
import { statTile, pageHead, card, table, th, facts } from '../ui.js';
import { laneState, laneHref, STATE_HELP } from '../lanes.js';

const FAMILIES = [
  'aquifer_jobs_accepted_total',
  'aquifer_dispatch_attempts_total',
  'aquifer_webhooks_total',
  'aquifer_jobs_finished_total',
];

const COUNTS_EVERY = 5000; // GET /jobs counts: a store query, so not every second

export default {
  id: 'overview',
  nav: 'overview',
  title: 'Overview',
  create(ctx) {
    const tiles = {
      ingest: statTile('stat-ingest-rate', 'Ingest'),
      dispatch: statTile('stat-dispatch-rate', 'Dispatch'),
      webhooks: statTile('stat-webhook-rate', 'Webhooks'),
      backlog: statTile('stat-backlog', 'Backlog', '#/jobs?status=queued'),
      failed: statTile('stat-failed', 'Failed jobs', '#/jobs?status=failed'),
    };
    const rates = timeChart({
      testId: 'chart-rates',
      title: 'Throughput per second',
      format: decimal,
      series: () => [
        { key: 'r:ingest', label: 'accepted', cls: 's1', area: true },
        { key: 'r:dispatch', label: 'attempts', cls: 's2' },
        { key: 'r:webhooks', label: 'webhooks', cls: 's3' },
        { key: 'r:failures', label: 'failed', cls: 's4' },
      ],
    });
    const backlog = timeChart({
      testId: 'chart-backlog',
      title: 'Unfinished work',
      format: count,
      series: () => [
        { key: 'h:queued', label: 'queued', cls: 's1', area: true },
        { key: 'h:in_flight', label: 'in flight', cls: 's5' },
        { key: 'h:webhooks_pending', label: 'webhooks pending', cls: 's3' },
      ],
    });
    const health = h('span', { class: 'pill' }, '…');
    const lanesBody = h('tbody');
    const lanesEmpty = h('p', { class: 'empty', hidden: true }, 'No destination has work right now.');
    const about = facts([]);
    ctx.main.append(
      pageHead('Overview', health),
      h('div', { class: 'stats' }, Object.values(tiles).map((t) => t.el)),
      h('div', { class: 'grid-2' }, rates.el, backlog.el),
      h(
        'div',
        { class: 'grid-2 grid-wide-left' },
        card(
          'Busiest destinations',
          table(['Destination', 'State', th('Pace', 'num'), th('In flight', 'num'), th('Buffered', 'num opt')], lanesBody),
          lanesEmpty,
          h('p', { class: 'card-foot' }, h('a', { href: '#/destinations' }, 'All destinations →')),
        ),
        card('This instance', about),
      ),
    );

    let metricsOff = false;
    let metricsError = '';
    let metricsNext = 0;
    let metricsEvery = 1000;
    let countsNext = 0;
    let failedCount = null;
    let countsError = '';

    async function refreshMetrics(signal, now) {
      if (now < metricsNext) return;
      const started = performance.now();
      let body;
      try {
        body = await api('/metrics', { text: true, signal });
      } catch (err) {
        if (err.name === 'AbortError') throw err;
        // 404: AQUIFER_METRICS=off, asked again now and then. Anything else
        // (a 503 while four scrapes run) leaves a gap in the charts.
        metricsOff = err.status === 404;
        metricsError = metricsOff ? '' : 'metrics: ' + err.message;
        metricsNext = now + (metricsOff ? 30000 : 5000);
        return;
      }
      metricsOff = false;
      metricsError = '';
      const m = parseMetrics(body, FAMILIES);
      const t = Date.now();
      record('m:accepted', t, sum(m, 'aquifer_jobs_accepted_total'));
      record('m:attempts', t, sum(m, 'aquifer_dispatch_attempts_total'));
      record('m:delivered', t, sum(m, 'aquifer_webhooks_total', (l) => l.result === 'delivered'));
      record('m:hook_failed', t, sum(m, 'aquifer_webhooks_total', (l) => l.result === 'failed'));
      record('m:failed', t, sum(m, 'aquifer_jobs_finished_total', (l) => l.status === 'failed'));
      record('r:ingest', t, rateOf('m:accepted'));
      record('r:dispatch', t, rateOf('m:attempts'));
      record('r:webhooks', t, rateOf('m:delivered'));
      record('r:failures', t, rateOf('m:failed'));
      // A big exposition (many destinations) is fetched less often: at
      // most a tenth of the time goes to reading metrics.
      metricsEvery = Math.min(Math.max(1000, (performance.now() - started) * 10), 10000);
      metricsNext = now + metricsEvery - 50;
    }

    async function refreshCounts(signal, now) {
      if (now < countsNext) return;
      countsNext = now + COUNTS_EVERY;
      try {
        const page = await api('/jobs?limit=1', { signal });
        failedCount = page.counts ? page.counts.failed : null;
        countsError = '';
      } catch (err) {
        if (err.status === 401 || err.name === 'AbortError') throw err;
        failedCount = null;
        countsError = err.message;
      }
    }

    function paint(doc) {
      const now = Date.now();
      const off = metricsOff ? 'metrics are off (AQUIFER_METRICS=off)' : metricsError;
      const r = (k) => (metricsOff ? null : latest(k));
      tiles.ingest.set(rate(r('r:ingest')), off || exact(latest('m:accepted')) + ' accepted since start');
      tiles.dispatch.set(rate(r('r:dispatch')), off || exact(latest('m:attempts')) + ' attempts since start');
      const hookFail = rateOf('m:hook_failed');
      tiles.webhooks.set(
        rate(r('r:webhooks')),
        off || (hookFail ? rate(hookFail) + ' failing' : exact(latest('m:delivered')) + ' delivered since start'),
      );
      tiles.webhooks.tone(hookFail > 0 ? 'bad' : '');
      const jobs = doc.jobs || {};
      tiles.backlog.set(
        count(jobs.queued),
        'in flight ' + count(jobs.in_flight) + ' · webhooks pending ' + count(jobs.webhooks_pending),
        exact(jobs.queued) + ' queued',
      );
      tiles.failed.set(
        count(failedCount),
        countsError || (metricsOff ? 'kept for retry' : 'kept for retry · ' + rate(r('r:failures')) + ' now'),
        failedCount === null ? '' : exact(failedCount) + ' failed jobs',
      );
      tiles.failed.tone(failedCount > 0 ? 'bad' : '');
      const rejecting = doc.admission && doc.admission.rejecting;
      tiles.ingest.tone(rejecting ? 'warn' : '');
      text(health, doc.status === 'ok' ? 'healthy' : 'degraded');
      attr(health, 'data-tone', doc.status === 'ok' ? 'good' : 'bad');
      attr(health, 'title', doc.store && doc.store.error ? doc.store.error : null);
      rates.render(now);
      backlog.render(now);
      paintLanes(doc);
      paintFacts(doc);
    }

    function paintLanes(doc) {
      const paused = new Map((doc.paused_lanes || []).map((p) => [p.lane, p]));
      const rows = (doc.lanes || []).map((l) => ({ ...l, paused: paused.has(l.lane) || l.paused }));
      for (const [lane] of paused) if (!rows.some((r) => r.lane === lane)) rows.push({ lane, paused: true, circuit: { state: 'closed' } });
      rows.sort((a, b) => (b.in_flight || 0) + (b.buffered || 0) - ((a.in_flight || 0) + (a.buffered || 0)) || a.lane.localeCompare(b.lane));
      const top = rows.slice(0, 8);
      lanesEmpty.hidden = top.length > 0;
      reconcile(
        lanesBody,
        top,
        (l) => l.lane,
        (l) =>
          h(
            'tr',
            null,
            h('td', { class: 'mono nowrap' }, h('a', { href: laneHref(l.lane) }, l.lane)),
            h('td', null, h('span', { class: 'badge' })),
            h('td', { class: 'num' }),
            h('td', { class: 'num' }),
            h('td', { class: 'num opt' }),
          ),
        (tr, l) => {
          const st = laneState(l);
          const badge = tr.children[1].firstChild;
          attr(badge, 'class', 'badge ls-' + st);
          attr(badge, 'title', STATE_HELP[st]);
          text(badge, st);
          text(tr.children[2], l.rps === undefined ? '—' : decimal(l.rps) + ' / ' + decimal(l.ceiling_rps) + ' rps');
          text(tr.children[3], count(l.in_flight));
          text(tr.children[4], count(l.buffered));
        },
      );
    }

    function paintFacts(doc) {
      const s = doc.store || {};
      const a = doc.admission || {};
      const items = [
        ['Store', s.ok ? (s.writable ? 'answering, writes commit' : 'answering, writes fail') : 'not answering'],
        ['Store latency', duration(s.latency_ms)],
      ];
      if (s.error) items.push(['Store error', s.error]);
      items.push(['Admission', a.rejecting ? 'shedding new jobs (' + (a.limit_reason || 'limit') + ')' : a.enabled ? 'accepting' : 'no limits set']);
      if (a.memory_mb !== undefined) items.push(['Memory', count(a.memory_mb) + ' MiB' + (a.memory_limit_mb ? ' of ' + count(a.memory_limit_mb) + ' MiB' : '')]);
      if (a.db_bytes !== undefined) items.push(['Store size', bytes(a.db_bytes) + (a.db_max_bytes ? ' of ' + bytes(a.db_max_bytes) : '')]);
      items.push(['Lanes', count((doc.lanes || []).length) + ' live · ' + count((doc.paused_lanes || []).length) + ' paused']);
      items.push(['Cluster', doc.cluster ? plural(doc.cluster.instances.length, 'instance') + '; this is ' + doc.cluster.instance_id : 'single instance']);
      if (doc.drain) items.push(['Drain', doc.drain.state]);
      items.push(['API keys', doc.auth === 'open' ? 'none: open mode' : 'required']);
      facts(items, about);
    }

    return {
      async refresh(signal) {
        const now = Date.now();
        const [doc] = await Promise.all([
          api('/health', { accept: [503], signal }),
          refreshMetrics(signal, now),
          refreshCounts(signal, now),
        ]);
        ctx.session.health(doc);
        const t = Date.now();
        const jobs = doc.jobs || {};
        record('h:queued', t, jobs.queued ?? null);
        record('h:in_flight', t, jobs.in_flight ?? null);
        record('h:webhooks_pending', t, jobs.webhooks_pending ?? null);
        paint(doc);
      },
    };
  },
};
