// Cluster: with several aquiferd sharing one Postgres store, the live
// instances and the lanes each one holds the lease of (and so dispatches);
// beside it, the store's health as this instance sees it.

import { api } from '../api.js';
import { h, text, attr, reconcile, replace } from '../dom.js';
import { count, duration, plural } from '../format.js';
import { pageHead, card, table, th, facts } from '../ui.js';
import { laneHref } from '../lanes.js';

const SHOWN_LANES = 12;

export default {
  id: 'cluster',
  nav: 'cluster',
  title: 'Cluster',
  create(ctx) {
    const tbody = h('tbody');
    const clustered = h(
      'div',
      { hidden: true },
      h('p', { class: 'muted summary' }),
      table(['Instance', th('Lanes held', 'num'), 'Lanes'], tbody, 'instances'),
    );
    const absent = h(
      'div',
      { class: 'empty-state', 'data-test': 'cluster-absent', hidden: true },
      h('h2', null, 'Not clustered'),
      h(
        'p',
        null,
        'This aquiferd does not share its store with other instances, so it dispatches every lane itself. ',
        'Cluster mode starts when several aquiferd use one Postgres store (AQUIFER_STORE_BACKEND=postgres): each destination is then dispatched by exactly one live instance, which holds its lane lease.',
      ),
    );
    const store = facts([]);
    ctx.main.append(pageHead('Cluster'), clustered, absent, card('Store', store));

    function paintStore(doc) {
      const s = doc.store || {};
      const items = [
        ['Health', doc.status],
        ['Answers', s.ok ? 'yes' : 'no'],
        ['Writes commit', s.writable ? 'yes' : 'no'],
        ['Ping', duration(s.latency_ms)],
        s.error && ['Error', s.error],
        ['Unfinished jobs', count((doc.jobs || {}).queued) + ' queued · ' + count((doc.jobs || {}).in_flight) + ' in flight here · ' + count((doc.jobs || {}).webhooks_pending) + ' webhooks pending'],
        doc.drain && ['Drain', doc.drain.state],
      ];
      facts(items, store);
    }

    function lanesCell(td, lanes) {
      const sorted = [...lanes].sort();
      const shown = sorted.slice(0, SHOWN_LANES);
      replace(
        td,
        shown.length ? shown.map((l) => h('a', { class: 'chip mono', href: laneHref(l) }, l)) : h('span', { class: 'muted' }, 'none'),
        sorted.length > shown.length ? h('span', { class: 'muted' }, ' and ' + (sorted.length - shown.length) + ' more') : null,
      );
    }

    return {
      async refresh(signal) {
        const doc = await api('/health', { accept: [503], signal });
        ctx.session.health(doc);
        paintStore(doc);
        const c = doc.cluster;
        clustered.hidden = !c;
        absent.hidden = !!c;
        if (!c) return;
        text(clustered.firstChild, plural(c.instances.length, 'live instance') + ' · this page is served by ' + c.instance_id);
        const rows = [...c.instances].sort((a, b) => (a.id === c.instance_id ? -1 : b.id === c.instance_id ? 1 : a.id.localeCompare(b.id)));
        reconcile(
          tbody,
          rows,
          (i) => i.id,
          (i) =>
            h(
              'tr',
              { 'data-test': 'instance-row', 'data-instance': i.id },
              h('td', { class: 'mono' }, i.id, i.id === c.instance_id ? [' ', h('span', { class: 'pill', 'data-tone': 'good' }, 'this one')] : null),
              h('td', { class: 'num' }),
              h('td', { class: 'chips' }),
            ),
          (tr, i) => {
            text(tr.children[1], count((i.lanes || []).length));
            lanesCell(tr.children[2], i.lanes || []);
            attr(tr, 'aria-current', i.id === c.instance_id ? 'true' : null);
          },
        );
      },
    };
  },
};
