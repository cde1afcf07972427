// Reading GET /metrics (the Prometheus text format) for the few families
// the overview charts: only the lines of the wanted names are parsed, so a
// large exposition (hundreds of destinations) stays cheap.

/**
 * Parses text and returns, for each wanted metric name, its samples as
 * {labels, value}. Comments, other families and malformed lines are skipped.
 */
export function parseMetrics(text, wanted) {
  const out = new Map();
  for (const name of wanted) out.set(name, []);
  let pos = 0;
  while (pos < text.length) {
    let end = text.indexOf('\n', pos);
    if (end < 0) end = text.length;
    const line = text.slice(pos, end);
    pos = end + 1;
    if (line === '' || line[0] === '#') continue;
    const brace = line.indexOf('{');
    const space = line.indexOf(' ');
    const nameEnd = brace >= 0 && (space < 0 || brace < space) ? brace : space;
    if (nameEnd <= 0) continue;
    const list = out.get(line.slice(0, nameEnd));
    if (!list) continue;
    let labels = {};
    let rest = line.slice(nameEnd);
    if (rest[0] === '{') {
      const parsed = parseLabels(rest);
      if (!parsed) continue;
      labels = parsed.labels;
      rest = rest.slice(parsed.length);
    }
    const value = parseFloat(rest.trim().split(' ')[0]);
    if (!Number.isNaN(value)) list.push({ labels, value });
  }
  return out;
}

// parseLabels reads {a="x",b="y \"q\""} at the start of s.
function parseLabels(s) {
  const labels = {};
  let i = 1;
  while (i < s.length) {
    if (s[i] === '}') return { labels, length: i + 1 };
    if (s[i] === ',' || s[i] === ' ') {
      i++;
      continue;
    }
    const eq = s.indexOf('=', i);
    if (eq < 0 || s[eq + 1] !== '"') return null;
    const name = s.slice(i, eq);
    let j = eq + 2;
    let value = '';
    while (j < s.length && s[j] !== '"') {
      if (s[j] === '\\' && j + 1 < s.length) {
        const c = s[j + 1];
        value += c === 'n' ? '\n' : c;
        j += 2;
      } else {
        value += s[j++];
      }
    }
    if (j >= s.length) return null;
    labels[name] = value;
    i = j + 1;
  }
  return null;
}

/** Sums the samples of name whose labels pass match (all when omitted). */
export function sum(parsed, name, match) {
  let total = 0;
  let seen = false;
  for (const smp of parsed.get(name) || []) {
    if (match && !match(smp.labels)) continue;
    total += smp.value;
    seen = true;
  }
  return seen ? total : 0;
}
