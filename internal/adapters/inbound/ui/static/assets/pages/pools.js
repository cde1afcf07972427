// Pools: each pool's members with their declared capacity, reputation
// (charted over the last ten minutes), effective rate and load, and the
// members that joined or went away while the page was open.

import { api } from '../api.js';
import { h, text, attr, reconcile, replace } from '../dom.js';
import { record, forget } from '../history.js';
import { timeChart } from '../chart.js';
import { count, decimal, duration, time } from '../format.js';
import { pageHead, table, th } from '../ui.js';
import { laneHref } from '../lanes.js';

const CLASSES = ['s1', 's2', 's3', 's5', 's6', 's4'];
const LOG_SIZE = 30;

export default {
  id: 'pools',
  nav: 'pools',
  title: 'Pools',
  create(ctx) {
    const list = h('div', { class: 'stack' });
    const empty = h(
      'p',
      { class: 'empty', hidden: true },
      'No pools: members join one by registering with POST /pools/{pool_id}/members (see docs/POOLS.md).',
    );
    const logList = h('ol', { class: 'events' });
    const logCard = h('section', { class: 'card', hidden: true }, h('h2', { class: 'card-title' }, 'Membership changes'), logList);
    const summary = h('p', { class: 'muted summary' });
    ctx.main.append(pageHead('Pools'), summary, list, empty, logCard);

    let seen = null; // pool → Map(member → last MemberHealth), from the previous refresh
    const log = [];

    function note(kind, pool, member, detail) {
      log.unshift({ at: Date.now(), kind, pool, member, detail });
      log.length = Math.min(log.length, LOG_SIZE);
    }

    function diff(pools) {
      const now = new Map(Object.entries(pools).map(([id, p]) => [id, new Map(p.members.map((m) => [m.id, m]))]));
      if (seen) {
        for (const [pid, members] of now) {
          for (const [mid] of members) if (!seen.get(pid) || !seen.get(pid).has(mid)) note('joined', pid, mid, '');
        }
        for (const [pid, members] of seen) {
          for (const [mid, m] of members) {
            if (now.get(pid) && now.get(pid).has(mid)) continue;
            note('left', pid, mid, 'left or was evicted; last heartbeat ' + duration(m.heartbeat_age_ms) + ' before, reputation ' + decimal(m.reputation));
          }
        }
      }
      seen = now;
    }

    function createCard(p) {
      const tbody = h('tbody');
      const head = h('div', { class: 'card-head' }, h('h2', { class: 'card-title mono' }), h('span', { class: 'muted' }), h('a', { class: 'card-link' }, 'Lane →'));
      const chart = timeChart({
        testId: 'chart-reputation',
        title: 'Reputation (0–1)',
        format: decimal,
        height: 160,
        series: () => (el.members || []).map((m, i) => ({ key: 'pool:' + el.poolId + ':' + m.id + ':rep', label: m.id, cls: CLASSES[i % CLASSES.length] })),
      });
      const el = h(
        'section',
        { class: 'card pool', 'data-test': 'pool' },
        head,
        h(
          'div',
          { class: 'pool-body' },
          table(
            [
              'Member',
              th('Address', 'opt'),
              th('Declared', 'num'),
              th('Reputation', 'num'),
              th('Effective', 'num'),
              th('In flight', 'num'),
              'State',
              th('Heartbeat', 'num opt'),
              th('Picks', 'num opt'),
              th('OK / failed', 'num opt'),
            ],
            tbody,
          ),
          chart.el,
        ),
      );
      el.tbody = tbody;
      el.chart = chart;
      return el;
    }

    function updateCard(el, p) {
      el.poolId = p.id;
      el.members = p.members;
      attr(el, 'data-pool', p.id);
      const [title, sub, link] = el.firstChild.children;
      text(title, p.id);
      text(sub, count(p.members.length) + (p.members.length === 1 ? ' member' : ' members') + ' · capacity ' + decimal(p.total_capacity_rps) + ' rps');
      attr(link, 'href', laneHref('pool:' + p.id));
      reconcile(
        el.tbody,
        p.members,
        (m) => m.id,
        (m) =>
          h(
            'tr',
            { 'data-test': 'member-row', 'data-pool': p.id, 'data-member': m.id },
            h('td', { class: 'mono' }, m.id),
            h('td', { class: 'mono nowrap opt' }),
            h('td', { class: 'num' }),
            h('td', { class: 'num' }, h('span'), h('span', { class: 'meter', 'aria-hidden': 'true' }, h('span', { class: 'meter-fill' }))),
            h('td', { class: 'num' }),
            h('td', { class: 'num' }),
            h('td', null, h('span', { class: 'badge' })),
            h('td', { class: 'num opt' }),
            h('td', { class: 'num opt' }),
            h('td', { class: 'num opt' }),
          ),
        (tr, m) => {
          const c = tr.children;
          text(c[1], m.address || '');
          text(c[2], decimal(m.declared_rps) + ' rps');
          text(c[3].firstChild, decimal(m.reputation));
          c[3].lastChild.firstChild.style.width = Math.round(Math.max(0, Math.min(1, m.reputation)) * 100) + '%';
          attr(c[3].lastChild, 'data-tone', m.reputation < 0.5 ? 'bad' : m.reputation < 0.9 ? 'warn' : null);
          text(c[4], decimal(m.effective_rps) + ' rps');
          text(c[5], count(m.in_flight) + ' / ' + count(m.max_concurrent));
          const badge = c[6].firstChild;
          attr(badge, 'class', 'badge ' + (m.paused ? 'ls-paused' : 'ls-running'));
          text(badge, m.paused ? 'waiting' : 'active');
          attr(badge, 'title', m.paused ? 'Told to wait by a 429, Retry-After or a rate-limit reset' : null);
          text(c[7], duration(m.heartbeat_age_ms) + ' ago');
          text(c[8], count(m.picks));
          text(c[9], count(m.successes) + ' / ' + count(m.failures));
        },
      );
      el.chart.render(Date.now());
    }

    function paintLog() {
      logCard.hidden = log.length === 0;
      replace(
        logList,
        log.map((e) =>
          h(
            'li',
            { 'data-tone': e.kind === 'joined' ? 'good' : 'bad' },
            h('time', { class: 'muted', datetime: new Date(e.at).toISOString() }, time(e.at)),
            ' ',
            h('b', { class: 'mono' }, e.pool + '/' + e.member),
            ' ',
            e.kind === 'joined' ? 'joined' : e.detail,
          ),
        ),
      );
    }

    return {
      async refresh(signal) {
        const doc = await api('/pools', { signal });
        const pools = doc.pools || {};
        const t = Date.now();
        const keep = new Set();
        const items = Object.keys(pools)
          .sort()
          .map((id) => ({ id, ...pools[id] }));
        for (const p of items) {
          for (const m of p.members) {
            const key = 'pool:' + p.id + ':' + m.id + ':rep';
            keep.add(key);
            record(key, t, m.reputation);
          }
        }
        forget('pool:', keep);
        diff(pools);
        reconcile(list, items, (p) => p.id, createCard, updateCard);
        empty.hidden = items.length > 0;
        const members = items.reduce((n, p) => n + p.members.length, 0);
        text(summary, count(items.length) + (items.length === 1 ? ' pool · ' : ' pools · ') + count(members) + ' members');
        paintLog();
      },
    };
  },
};
