// What a lane's state is called, from GET /lanes or /health's lanes.

/**
 * paused (an operator's pause), down (its outage circuit is open or
 * probing), running (it has work: waiting, buffered or in flight) or idle.
 */
export function laneState(l) {
  const paused = l.paused === true || (l.paused && typeof l.paused === 'object');
  if (paused) return 'paused';
  if (l.circuit && l.circuit.state && l.circuit.state !== 'closed') return 'down';
  if ((l.backlog || 0) > 0 || (l.in_flight || 0) > 0 || (l.buffered || 0) > 0) return 'running';
  return 'idle';
}

export const STATE_HELP = {
  paused: 'an operator paused it: jobs are accepted and stored, none is sent until it is resumed',
  down: 'its outage circuit is open: the destination stopped answering, its work is held and probed',
  running: 'it has work waiting or in flight',
  idle: 'nothing waiting or in flight',
};

/** The hash of a destination's page. */
export function laneHref(dest) {
  return '#/destinations/' + encodeURIComponent(dest);
}
