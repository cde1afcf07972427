// Building DOM from data, never from markup strings: job bodies, headers and error
// messages come from upstreams and tenants, so everything is text nodes.

const SVG = 'http://www.w3.org/2000/svg';

/**
 * h('a', {href: '#/jobs', class: 'btn'}, 'Jobs') makes an element.
 * Attributes named on* are refused (listeners go through `on`), `class`
 * may be a string or an array, booleans set or drop the attribute, and
 * children may be strings, numbers, nodes, arrays or null.
 */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** Like h, in the SVG namespace. */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

function build(el, attrs, children) {
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (k === 'on') {
        for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      } else if (k === 'class') {
        const cls = Array.isArray(v) ? v.filter(Boolean).join(' ') : v;
        if (cls) el.setAttribute('class', cls);
      } else if (k.startsWith('on')) {
        throw new Error('inline handler ' + k);
      } else if (v === true) {
        el.setAttribute(k, '');
      } else if (v !== false && v !== null && v !== undefined) {
        el.setAttribute(k, String(v));
      }
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** Replaces el's children. */
export function replace(el, ...children) {
  el.textContent = '';
  append(el, children);
  return el;
}

/** Sets el's text only when it changed (keeps selections and screen readers calm). */
export function text(el, value) {
  const v = value === null || value === undefined ? '' : String(value);
  if (el.textContent !== v) el.textContent = v;
  return el;
}

/** Sets or removes an attribute only when it changed. */
export function attr(el, name, value) {
  if (value === null || value === undefined || value === false) {
    if (el.hasAttribute(name)) el.removeAttribute(name);
  } else {
    const v = value === true ? '' : String(value);
    if (el.getAttribute(name) !== v) el.setAttribute(name, v);
  }
  return el;
}

/**
 * Keeps parent's children in step with items, one element per key: an
 * element whose key stays is updated in place (so focus, hover and a
 * half-typed reason survive a refresh), new keys get create(item), gone
 * keys are removed, and the order follows items. Returns the keys that
 * are new since the last call.
 */
export function reconcile(parent, items, keyOf, create, update) {
  const old = new Map();
  for (const child of Array.from(parent.children)) {
    if (child.dataset.key !== undefined) old.set(child.dataset.key, child);
    else child.remove();
  }
  const fresh = [];
  let prev = null;
  for (const item of items) {
    const key = String(keyOf(item));
    let el = old.get(key);
    if (el) {
      old.delete(key);
    } else {
      el = create(item);
      el.dataset.key = key;
      fresh.push(key);
    }
    update(el, item);
    const want = prev ? prev.nextSibling : parent.firstChild;
    if (want !== el) parent.insertBefore(el, want);
    prev = el;
  }
  for (const el of old.values()) el.remove();
  return fresh;
}
