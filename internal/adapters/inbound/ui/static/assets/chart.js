// Live time-series charts drawn as inline SVG: up to the last ten minutes
// of a few series from history.js, redrawn on every refresh, with a legend
// of the newest values and a crosshair tooltip under the pointer. A page
// just opened has seconds of history, so the time axis spans what there is
// (a minute at least) and widens to ten minutes as samples come. Colours
// come from the stylesheet (classes s1…s6), so the charts follow the theme.

import { s, h, replace } from './dom.js';
import { get, WINDOW_MS } from './history.js';
import { clock, time } from './format.js';

const M = { left: 48, right: 12, top: 10, bottom: 22 };

/** A "nice" axis maximum and step for values up to max: 1, 2 or 5 × 10^k. */
export function niceScale(max, ticks = 4) {
  if (!(max > 0)) return { max: 1, step: 0.25 };
  const raw = max / ticks;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= raw);
  return { max: step * Math.ceil(max / step - 1e-9), step };
}

const MIN_SPAN = 60000;

// The time the axis spans: from the oldest sample kept (a minute at least,
// ten at most) to now.
function span(keys, now) {
  let oldest = now;
  for (const k of keys) {
    const t = get(k).t;
    for (let i = 0; i < t.length; i++) {
      if (t[i] >= now - WINDOW_MS) {
        oldest = Math.min(oldest, t[i]);
        break;
      }
    }
  }
  return Math.min(WINDOW_MS, Math.max(MIN_SPAN, now - oldest));
}

// Where a sample's time and value land, with the chart's geometry.
function scales(width, height, now, win, ymax) {
  const x0 = now - win;
  const iw = width - M.left - M.right;
  const ih = height - M.top - M.bottom;
  return {
    x: (t) => M.left + ((t - x0) / win) * iw,
    y: (v) => M.top + ih - (v / ymax) * ih,
    t: (px) => x0 + ((px - M.left) / iw) * win,
    x0,
    iw,
    ih,
    win,
  };
}

// Tick steps for the time axis, and whether their labels need seconds.
const STEPS = [5, 10, 15, 30, 60, 120, 300, 600].map((sec) => sec * 1000);

// The samples of a series inside the window, and the pause length beyond
// which two neighbours are drawn apart (the page was closed, the tab hidden).
function visible(data, from) {
  const t = [];
  const v = [];
  for (let i = 0; i < data.t.length; i++) {
    if (data.t[i] >= from) {
      t.push(data.t[i]);
      v.push(data.v[i]);
    }
  }
  const gaps = [];
  for (let i = 1; i < t.length; i++) gaps.push(t[i] - t[i - 1]);
  gaps.sort((a, b) => a - b);
  const median = gaps.length ? gaps[Math.floor(gaps.length / 2)] : 1000;
  return { t, v, gap: Math.max(5000, median * 4) };
}

function pathOf(pts, sc, area) {
  let d = '';
  let run = [];
  const flush = () => {
    if (run.length === 0) return;
    const line = run.map(([x, y], i) => (i === 0 ? 'M' : 'L') + x.toFixed(1) + ' ' + y.toFixed(1)).join('');
    if (area) {
      const base = sc.y(0).toFixed(1);
      d += line + 'L' + run[run.length - 1][0].toFixed(1) + ' ' + base + 'L' + run[0][0].toFixed(1) + ' ' + base + 'Z';
    } else {
      d += run.length === 1 ? line + 'l0.1 0' : line;
    }
    run = [];
  };
  for (let i = 0; i < pts.t.length; i++) {
    const v = pts.v[i];
    if (v === null || v === undefined) {
      flush();
      continue;
    }
    if (i > 0 && pts.t[i] - pts.t[i - 1] > pts.gap) flush();
    run.push([sc.x(pts.t[i]), sc.y(v)]);
  }
  flush();
  return d;
}

function nearest(ts, t) {
  let lo = 0;
  let hi = ts.length - 1;
  if (hi < 0) return -1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (ts[mid] < t) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0 && Math.abs(ts[lo - 1] - t) < Math.abs(ts[lo] - t)) lo--;
  return lo;
}

/**
 * A chart of the series series() names ([{key, label, cls, area}]), values
 * shown with format. Returns {el, render(now)}; call render after each
 * refresh (and it redraws itself on resize).
 */
export function timeChart({ testId, title, series, format, height = 200, note = '' }) {
  const svg = s('svg', { class: 'chart-svg', role: 'img', height });
  const tip = h('div', { class: 'chart-tip', hidden: true });
  const body = h('div', { class: 'chart-body' }, svg, tip);
  const legend = h('ul', { class: 'legend' });
  const el = h(
    'figure',
    { class: 'chart', 'data-test': testId },
    h('figcaption', { class: 'chart-head' }, h('span', { class: 'chart-title' }, title), legend),
    body,
    note ? h('p', { class: 'chart-note muted' }, note) : null,
  );
  let hoverX = null;
  let lastNow = Date.now();

  function render(now = Date.now()) {
    lastNow = now;
    const list = series();
    const width = Math.max(body.clientWidth || 0, 240);
    const win = span(list.map((se) => se.key), now);
    const sc0 = scales(width, height, now, win, 1);
    const data = list.map((se) => ({ se, pts: visible(get(se.key), sc0.x0) }));
    let ymax = 0;
    for (const { pts } of data) for (const v of pts.v) if (v !== null && v > ymax) ymax = v;
    const { max, step } = niceScale(ymax);
    const sc = scales(width, height, now, win, max);
    svg.setAttribute('width', width);
    svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
    const grid = s('g', { class: 'grid' });
    for (let v = 0; v <= max + step / 2; v += step) {
      const y = sc.y(v).toFixed(1);
      grid.append(
        s('line', { x1: M.left, x2: width - M.right, y1: y, y2: y }),
        s('text', { x: M.left - 6, y, dy: '0.32em', 'text-anchor': 'end' }, format(v)),
      );
    }
    // Time ticks at least a label's width apart.
    const every = STEPS.find((st) => (sc.iw * st) / win >= (st < 60000 ? 100 : 80)) || STEPS[STEPS.length - 1];
    const label = every < 60000 ? time : clock;
    for (let t = Math.ceil(sc.x0 / every) * every; t <= now; t += every) {
      const x = sc.x(t);
      const anchor = x > width - M.right - 30 ? 'end' : 'middle';
      grid.append(
        s('line', { class: 'tick', x1: x.toFixed(1), x2: x.toFixed(1), y1: M.top, y2: height - M.bottom }),
        s('text', { x: x.toFixed(1), y: height - 6, 'text-anchor': anchor }, label(t)),
      );
    }
    const lines = s('g', { class: 'lines' });
    let empty = true;
    for (const { se, pts } of data) {
      if (pts.t.length) empty = false;
      if (se.area) lines.append(s('path', { class: 'area ' + se.cls, d: pathOf(pts, sc, true) }));
      lines.append(s('path', { class: 'line ' + se.cls, d: pathOf(pts, sc, false) }));
    }
    const overlay = s('g', { class: 'overlay' });
    replace(svg, grid, lines, overlay);
    if (empty) {
      svg.append(s('text', { class: 'chart-empty', x: width / 2, y: height / 2, 'text-anchor': 'middle' }, 'collecting samples…'));
    }
    const summary = [];
    const items = data.map(({ se, pts }) => {
      const v = pts.v.length ? pts.v[pts.v.length - 1] : null;
      summary.push(se.label + ' ' + (v === null ? 'no data' : format(v)));
      return h('li', null, h('span', { class: 'swatch ' + se.cls }), se.label + ' ', h('b', null, v === null ? '—' : format(v)));
    });
    replace(legend, items);
    svg.setAttribute('aria-label', title + ', last ' + Math.round(win / 60000) + ' min: ' + summary.join(', '));
    drawHover(data, sc, width, overlay);
  }

  function drawHover(data, sc, width, overlay) {
    if (hoverX === null || hoverX < M.left || hoverX > width - M.right) {
      tip.hidden = true;
      return;
    }
    const t = sc.t(hoverX);
    const rows = [];
    let at = null;
    for (const { se, pts } of data) {
      const i = nearest(pts.t, t);
      if (i < 0 || Math.abs(pts.t[i] - t) > pts.gap) continue;
      at = at === null ? pts.t[i] : at;
      const v = pts.v[i];
      if (v === null) continue;
      overlay.append(s('circle', { class: 'dot ' + se.cls, cx: sc.x(pts.t[i]).toFixed(1), cy: sc.y(v).toFixed(1), r: 3.5 }));
      rows.push(h('div', null, h('span', { class: 'swatch ' + se.cls }), se.label + ' ', h('b', null, format(v))));
    }
    if (at === null) {
      tip.hidden = true;
      return;
    }
    const x = sc.x(at).toFixed(1);
    overlay.prepend(s('line', { class: 'crosshair', x1: x, x2: x, y1: M.top, y2: height - M.bottom }));
    replace(tip, h('div', { class: 'chart-tip-time' }, time(at)), rows);
    tip.hidden = false;
    const xn = Number(x);
    let left = xn + 12;
    if (left + tip.offsetWidth > width) left = xn - tip.offsetWidth - 12;
    tip.style.left = Math.max(0, left) + 'px';
  }

  svg.addEventListener('pointermove', (ev) => {
    const r = svg.getBoundingClientRect();
    hoverX = ev.clientX - r.left;
    render(lastNow);
  });
  svg.addEventListener('pointerleave', () => {
    hoverX = null;
    render(lastNow);
  });
  if (typeof ResizeObserver === 'function') {
    let w = 0;
    const ro = new ResizeObserver(() => {
      // A page left behind shrinks its charts to nothing: let go of them.
      if (!body.isConnected) {
        ro.disconnect();
        return;
      }
      if (body.clientWidth !== w) {
        w = body.clientWidth;
        render(lastNow);
      }
    });
    ro.observe(body);
  }
  return { el, render };
}

/** A small inline line of one series for a table cell: {el, render(now)}. */
export function sparkline(key, { width = 96, height = 24, cls = 's1', max = null } = {}) {
  const path = s('path', { class: 'line ' + cls });
  const area = s('path', { class: 'area ' + cls });
  const el = s('svg', { class: 'spark', width, height, viewBox: `0 0 ${width} ${height}`, 'aria-hidden': 'true' }, area, path);
  function render(now = Date.now()) {
    const win = span([key], now);
    const pts = visible(get(key), now - win);
    let ymax = max || 0;
    if (!max) for (const v of pts.v) if (v !== null && v > ymax) ymax = v;
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    const sc = {
      x: (t) => ((t - (now - win)) / win) * width,
      y: (v) => height - 1 - (v / ymax) * (height - 2),
    };
    path.setAttribute('d', pathOf(pts, sc, false));
    area.setAttribute('d', pathOf(pts, sc, true));
  }
  return { el, render };
}

