// Destinations: every lane, its state, its pace against its ceiling (with
// the last ten minutes as a sparkline), what holds it back, its backlog,
// and the pause / resume buttons.

import { api, laneSegment } from '../api.js';
import { h, text, attr, reconcile } from '../dom.js';
import { record, forget } from '../history.js';
import { sparkline } from '../chart.js';
import { count, decimal, duration, relative, time, plural } from '../format.js';
import { pageHead, table, th, toast, actionFailed } from '../ui.js';
import { laneState, laneHref, STATE_HELP } from '../lanes.js';

/** Samples one lane's numbers into the charts' history. */
export function recordLane(l, t) {
  const k = 'lane:' + l.destination + ':';
  record(k + 'rps', t, l.pace ? l.pace.rps : null);
  record(k + 'ceiling', t, l.ceiling ? l.ceiling.rps : null);
  record(k + 'backlog', t, l.backlog);
  record(k + 'in_flight', t, l.in_flight);
}

/** Pauses or resumes dest, answering the lane or throwing the API's error. */
export function setPaused(dest, pause, reason) {
  const path = '/lanes/' + laneSegment(dest) + (pause ? '/pause' : '/resume');
  return api(path, { method: 'POST', body: pause && reason ? { reason } : {} });
}

/** What holds a lane's pace below its ceiling, in words. */
export function signalText(l) {
  if (l.paused) return 'paused by an operator' + (l.paused.reason ? ': ' + l.paused.reason : '');
  if (l.held_until && l.held_until > Date.now()) return 'held by Retry-After until ' + time(l.held_until);
  if (l.circuit && l.circuit.state !== 'closed') return 'outage circuit ' + l.circuit.state.replace('_', '-');
  if (l.pace && l.pace.paced_by) return 'paced by ' + l.pace.paced_by + (l.pace.since ? ' since ' + time(l.pace.since) + ' (' + relative(l.pace.since) + ')' : '');
  return 'at ceiling';
}

export default {
  id: 'destinations',
  nav: 'destinations',
  title: 'Destinations',
  create(ctx) {
    const tbody = h('tbody');
    const empty = h('p', { class: 'empty', hidden: true }, 'No destinations yet: a lane appears when a job is submitted for it.');
    const summary = h('p', { class: 'muted summary' });
    const search = h('input', {
      type: 'search',
      class: 'input',
      placeholder: 'Filter destinations',
      'aria-label': 'Filter destinations',
      value: ctx.query.get('q') || '',
    });
    let lanes = [];
    search.addEventListener('input', () => paint());
    ctx.main.append(
      pageHead('Destinations', search),
      summary,
      table(
        [
          'Destination',
          'State',
          th('Pace (rps)', 'num'),
          th('Last 10 min', 'opt'),
          th('Signal · last error', 'opt'),
          th('In flight', 'num'),
          th('Backlog', 'num'),
          th('Oldest wait', 'num opt'),
          th('Actions', 'actions'),
        ],
        tbody,
        'lanes',
      ),
      empty,
    );

    async function act(dest, pause, button) {
      button.disabled = true;
      try {
        await setPaused(dest, pause, pause ? 'paused from the dashboard' : '');
        toast((pause ? 'Paused ' : 'Resumed ') + dest, 'ok');
      } catch (err) {
        actionFailed(ctx, err);
      } finally {
        button.disabled = false;
        ctx.refresh();
      }
    }

    function create(l) {
      const dest = l.destination;
      const pause = h('button', { type: 'button', class: 'btn btn-small', 'data-test': 'pause-lane' }, 'Pause');
      const resume = h('button', { type: 'button', class: 'btn btn-small btn-primary', 'data-test': 'resume-lane' }, 'Resume');
      pause.addEventListener('click', () => act(dest, true, pause));
      resume.addEventListener('click', () => act(dest, false, resume));
      const spark = sparkline('lane:' + dest + ':rps', { cls: 's2' });
      const tr = h(
        'tr',
        { 'data-test': 'lane-row', 'data-destination': dest },
        h('td', { class: 'mono nowrap' }, h('a', { href: laneHref(dest) }, dest)),
        h('td', null, h('span', { class: 'badge', 'data-test': 'lane-state' })),
        h('td', { class: 'num' }, h('span', { class: 'pace' }), h('span', { class: 'meter', 'aria-hidden': 'true' }, h('span', { class: 'meter-fill' }))),
        h('td', { class: 'opt' }, spark.el),
        h('td', { class: 'opt signal' }, h('span'), h('span', { class: 'error-line' })),
        h('td', { class: 'num' }),
        h('td', { class: 'num' }),
        h('td', { class: 'num opt' }),
        h('td', { class: 'actions' }, pause, resume),
      );
      tr.spark = spark;
      return tr;
    }

    function update(tr, l) {
      const st = laneState(l);
      const c = tr.children;
      const badge = c[1].firstChild;
      attr(badge, 'class', 'badge ls-' + st);
      attr(badge, 'title', STATE_HELP[st]);
      text(badge, st);
      const pace = l.pace || {};
      const ceiling = l.ceiling || {};
      text(c[2].firstChild, decimal(pace.rps) + ' / ' + decimal(ceiling.rps));
      attr(c[2], 'title', 'now ' + decimal(pace.rps) + ' rps, ' + pace.max_concurrent + ' at once; ceiling ' + decimal(ceiling.rps) + ' rps, ' + ceiling.max_concurrent + ' at once');
      const frac = ceiling.rps > 0 ? Math.min(pace.rps / ceiling.rps, 1) : 0;
      c[2].lastChild.firstChild.style.width = (frac * 100).toFixed(0) + '%';
      attr(c[2].lastChild, 'data-tone', frac < 0.5 ? 'warn' : null);
      tr.spark.render();
      text(c[4].firstChild, signalText(l));
      const err = c[4].lastChild;
      text(err, l.last_error || '');
      attr(err, 'title', l.last_error ? l.last_error + (l.last_error_at ? ' — ' + new Date(l.last_error_at).toLocaleString() : '') : null);
      text(c[5], count(l.in_flight) + (pace.max_concurrent ? ' / ' + pace.max_concurrent : ''));
      text(c[6], count(l.backlog));
      text(c[7], l.oldest_queued_age_seconds ? duration(l.oldest_queued_age_seconds * 1000) : '—');
      c[8].children[0].hidden = st === 'paused';
      c[8].children[1].hidden = st !== 'paused';
      attr(tr, 'data-state', st);
    }

    function paint() {
      const q = search.value.trim().toLowerCase();
      const shown = q ? lanes.filter((l) => l.destination.toLowerCase().includes(q)) : lanes;
      reconcile(tbody, shown, (l) => l.destination, create, update);
      const by = { paused: 0, down: 0, running: 0, idle: 0 };
      for (const l of lanes) by[laneState(l)]++;
      text(
        summary,
        plural(lanes.length, 'destination') + ' · ' + by.running + ' running · ' + by.paused + ' paused · ' + by.down + ' down · ' + by.idle + ' idle',
      );
      empty.hidden = shown.length > 0;
      if (q && shown.length === 0) text(empty, 'No destination matches “' + search.value.trim() + '”.');
      else text(empty, 'No destinations yet: a lane appears when a job is submitted for it.');
    }

    return {
      async refresh(signal) {
        const doc = await api('/lanes', { signal });
        lanes = doc.lanes || [];
        const t = Date.now();
        for (const l of lanes) recordLane(l, t);
        forget('lane:', new Set(lanes.flatMap((l) => ['rps', 'ceiling', 'backlog', 'in_flight'].map((k) => 'lane:' + l.destination + ':' + k))));
        paint();
      },
    };
  },
};
