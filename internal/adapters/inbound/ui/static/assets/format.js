// How numbers and times read: in the viewer's locale and time zone,
// humanised (12.3K, 2.5/s, 3 min ago) with the exact value a hover away.

const plain = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const compact = new Intl.NumberFormat(undefined, { notation: 'compact', maximumFractionDigits: 1 });
const oneDecimal = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
const twoDecimals = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });
const dateTimeFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
const clockFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
const relFmt = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto', style: 'short' });

export const DASH = '—';

function missing(n) {
  return n === null || n === undefined || Number.isNaN(n);
}

/** A count: exact below 10,000, compact above (12.3K). */
export function count(n) {
  if (missing(n)) return DASH;
  return Math.abs(n) < 10000 ? plain.format(n) : compact.format(n);
}

/** "1 job", "3 jobs" (English plurals by adding s). */
export function plural(n, noun) {
  return count(n) + ' ' + noun + (n === 1 ? '' : 's');
}

/** The exact count, grouped, for titles. */
export function exact(n) {
  return missing(n) ? DASH : new Intl.NumberFormat().format(n);
}

/** A number that may be fractional (a pace, a reputation). */
export function decimal(n) {
  if (missing(n)) return DASH;
  if (Math.abs(n) >= 10000) return compact.format(n);
  return Math.abs(n) >= 100 ? plain.format(n) : Math.abs(n) >= 10 ? oneDecimal.format(n) : twoDecimals.format(n);
}

/** A rate per second: 0.25/s, 12.5/s, 1.2K/s. */
export function rate(n) {
  return missing(n) ? DASH : decimal(n) + '/s';
}


/** Bytes as KiB, MiB, GiB. */
export function bytes(n) {
  if (missing(n)) return DASH;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? plain.format(n) : oneDecimal.format(n)) + ' ' + units[i];
}

/** A duration given in milliseconds: 0.4 ms, 505 ms, 1.2 s, 3 min 5 s, 2 h 3 min. */
export function duration(ms) {
  if (missing(ms)) return DASH;
  if (ms < 1) return twoDecimals.format(ms) + ' ms';
  if (ms < 1000) return plain.format(ms) + ' ms';
  const sec = ms / 1000;
  if (sec < 60) return oneDecimal.format(sec) + ' s';
  const min = Math.floor(sec / 60);
  if (min < 60) return min + ' min ' + Math.floor(sec % 60) + ' s';
  const hours = Math.floor(min / 60);
  if (hours < 48) return hours + ' h ' + (min % 60) + ' min';
  return Math.floor(hours / 24) + ' d ' + (hours % 24) + ' h';
}

/** A Unix-ms time in the viewer's zone: "4 May 2026, 10:00:01". */
export function dateTime(ms) {
  return ms ? dateTimeFmt.format(new Date(ms)) : DASH;
}

/** A time of day with seconds, for recent events. */
export function time(ms) {
  return ms ? timeFmt.format(new Date(ms)) : DASH;
}

/** A time of day without seconds, for chart axes. */
export function clock(ms) {
  return clockFmt.format(new Date(ms));
}

/** "3 min ago", "in 20 sec", relative to now. */
export function relative(ms, now = Date.now()) {
  if (!ms) return DASH;
  const diff = (ms - now) / 1000;
  const abs = Math.abs(diff);
  if (abs < 1.5) return relFmt.format(0, 'second');
  if (abs < 60) return relFmt.format(Math.round(diff), 'second');
  if (abs < 3600) return relFmt.format(Math.round(diff / 60), 'minute');
  if (abs < 86400) return relFmt.format(Math.round(diff / 3600), 'hour');
  return relFmt.format(Math.round(diff / 86400), 'day');
}

/**
 * The end of a job id, enough to tell rows apart: ids begin with their
 * creation time, so neighbours share their first characters.
 */
export function shortId(id) {
  return id ? '…' + id.slice(-10) : DASH;
}
