// One destination: its pace against its ceiling over the last ten minutes,
// the signal that set it, its backlog and queues, its outage circuit, and
// pause (with a reason) / resume.

import { api, laneSegment } from '../api.js';
import { h, text, attr, reconcile } from '../dom.js';
import { timeChart } from '../chart.js';
import { count, decimal, duration, dateTime } from '../format.js';
import { pageHead, statTile, card, table, th, toast, actionFailed, at, when, idTitle, facts } from '../ui.js';
import { laneState, STATE_HELP } from '../lanes.js';
import { recordLane, setPaused, signalText } from './destinations.js';

export default {
  id: 'destination',
  nav: 'destinations',
  title: 'Destination',
  create(ctx) {
    const dest = ctx.params[0];
    let k = 'lane:' + dest + ':'; // the API's spelling once it answered (default port filled in)
    const state = h('span', { class: 'badge', 'data-test': 'lane-state' }, '…');
    const reason = h('input', {
      type: 'text',
      class: 'input',
      name: 'reason',
      maxlength: 500,
      placeholder: 'Reason (optional)',
      'aria-label': 'Reason for the pause',
    });
    const pause = h('button', { type: 'button', class: 'btn', 'data-test': 'pause-lane' }, 'Pause');
    const resume = h('button', { type: 'button', class: 'btn btn-primary', 'data-test': 'resume-lane', hidden: true }, 'Resume');
    const signal = h('p', { class: 'signal-line', 'data-test': 'lane-signal' }, '…');
    const tiles = {
      pace: statTile('lane-pace', 'Pace now'),
      ceiling: statTile('lane-ceiling', 'Ceiling'),
      inFlight: statTile('lane-in-flight', 'In flight'),
      backlog: statTile('lane-backlog', 'Backlog'),
      wait: statTile('lane-oldest', 'Oldest wait'),
    };
    const paceChart = timeChart({
      testId: 'chart-pace',
      title: 'Pace vs ceiling (requests/s)',
      format: decimal,
      series: () => [
        { key: k + 'ceiling', label: 'ceiling', cls: 's6' },
        { key: k + 'rps', label: 'pace', cls: 's2', area: true },
      ],
    });
    const loadChart = timeChart({
      testId: 'chart-lane-load',
      title: 'Backlog and in flight',
      format: count,
      series: () => [
        { key: k + 'backlog', label: 'backlog', cls: 's1', area: true },
        { key: k + 'in_flight', label: 'in flight', cls: 's5' },
      ],
    });
    const details = attr(facts([]), 'data-test', 'lane-details');
    const circuit = facts([]);
    const queuesBody = h('tbody');
    const queuesCard = card(
      'Queues',
      table(['Queue', th('Buffered', 'num'), th('Running', 'num'), 'Waiting on', th('Cap', 'num opt')], queuesBody),
    );
    const pool = dest.startsWith('pool:') ? dest.slice(5) : null;
    const jobsHref = (status) => {
      const q = new URLSearchParams();
      if (status) q.set('status', status);
      if (pool) q.set('pool_id', pool);
      else q.set('destination', dest);
      return '#/jobs?' + q.toString();
    };
    pause.addEventListener('click', () => act(true, pause));
    resume.addEventListener('click', () => act(false, resume));
    reason.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter') act(true, pause);
    });
    ctx.main.append(
      h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/destinations' }, 'Destinations'), ' / '),
      pageHead(idTitle('Destination', dest), state, h('span', { class: 'inline-form' }, reason, pause, resume)),
      signal,
      h('div', { class: 'stats' }, Object.values(tiles).map((t) => t.el)),
      h('div', { class: 'grid-2' }, paceChart.el, loadChart.el),
      h(
        'div',
        { class: 'grid-2' },
        card(
          'Lane',
          details,
          h(
            'p',
            { class: 'card-foot' },
            h('a', { href: jobsHref('') }, 'Jobs to this destination →'),
            ' ',
            h('a', { href: jobsHref('failed') }, 'Failed ones →'),
            pool ? [' ', h('a', { href: '#/pools' }, 'Pool members →')] : null,
          ),
        ),
        card('Outage circuit', circuit),
      ),
      queuesCard,
    );

    async function act(doPause, button) {
      button.disabled = true;
      try {
        await setPaused(dest, doPause, reason.value.trim());
        toast((doPause ? 'Paused ' : 'Resumed ') + dest, 'ok');
        if (doPause) reason.value = '';
      } catch (err) {
        actionFailed(ctx, err);
      } finally {
        button.disabled = false;
        ctx.refresh();
      }
    }

    function paint(l) {
      const now = Date.now();
      const st = laneState(l);
      attr(state, 'class', 'badge ls-' + st);
      attr(state, 'title', STATE_HELP[st]);
      text(state, st);
      pause.hidden = st === 'paused';
      resume.hidden = st !== 'paused';
      reason.hidden = st === 'paused';
      text(signal, signalText(l));
      attr(signal, 'data-tone', l.paused || (l.circuit && l.circuit.state !== 'closed') ? 'bad' : l.pace && l.pace.paced_by ? 'warn' : 'good');
      const pace = l.pace || {};
      const ceil = l.ceiling || {};
      tiles.pace.set(decimal(pace.rps) + ' rps', count(pace.max_concurrent) + ' at once' + (pace.paced_by ? ' · ' + pace.paced_by : ''));
      tiles.pace.tone(pace.paced_by ? 'warn' : '');
      tiles.ceiling.set(decimal(ceil.rps) + ' rps', count(ceil.max_concurrent) + ' at once');
      tiles.inFlight.set(count(l.in_flight), count(l.buffered) + ' buffered in memory');
      tiles.backlog.set(count(l.backlog), 'waiting in the store');
      tiles.wait.set(l.oldest_queued_age_seconds ? duration(l.oldest_queued_age_seconds * 1000) : '—', l.oldest_queued_at ? 'since ' + dateTime(l.oldest_queued_at) : 'nothing waiting');
      paceChart.render(now);
      loadChart.render(now);
      facts([
        ['State', st + ': ' + STATE_HELP[st]],
        l.mode && ['Pacing mode', l.mode + (l.mode_reason ? ' — ' + l.mode_reason : '')],
        l.paused && ['Paused', at(l.paused.since, now)],
        l.paused && l.paused.reason && ['Reason', l.paused.reason],
        pace.since && ['Pace last moved', at(pace.since, now)],
        l.held_until && ['Held until', dateTime(l.held_until)],
        ['Live here', l.live ? 'yes: this instance has a lane for it' : 'no lane in this instance now'],
        l.held_by && ['Dispatched by', l.held_by],
        ['Account queues', l.account_queues ? 'on: one queue per tenant' : 'off'],
        l.last_error && ['Last error', [l.last_error, l.last_error_at ? [' (', when(l.last_error_at, now), ')'] : null]],
      ], details);
      const c = l.circuit || {};
      facts([
        ['State', c.state === 'closed' ? 'closed: the destination answers' : c.state === 'open' ? 'open: the destination is down, work is held' : 'half-open: a probe is running'],
        ['Failures in a row', count(c.consecutive_failures)],
        c.since_ms && ['Down since', at(c.since_ms, now)],
        c.next_probe_ms && ['Next probe', when(c.next_probe_ms, now)],
        c.probes && ['Probes', count(c.probes)],
        c.last_error && ['Last error', c.last_error],
      ], circuit);
      const queues = l.queues || [];
      queuesCard.hidden = queues.length === 0;
      reconcile(
        queuesBody,
        queues,
        (q) => q.queue,
        () => h('tr', null, h('td', { class: 'mono wrap' }), h('td', { class: 'num' }), h('td', { class: 'num' }), h('td'), h('td', { class: 'num opt' })),
        (tr, q) => {
          text(tr.children[0], q.queue);
          text(tr.children[1], count(q.buffered));
          text(tr.children[2], count(q.running));
          text(tr.children[3], q.paused_until ? (q.paused_by || 'destination') + ' until ' + new Date(q.paused_until).toLocaleTimeString() : '');
          text(tr.children[4], q.cap_rps ? decimal(q.cap_rps) + ' rps' : '');
        },
      );
    }

    return {
      title: dest,
      async refresh(sig) {
        const l = await api('/lanes/' + laneSegment(dest), { signal: sig });
        k = 'lane:' + l.destination + ':';
        recordLane(l, Date.now());
        paint(l);
      },
    };
  },
};
