package domain

import (
	"net"
	"net/url"
	"strings"
	"sync"
)

// UpstreamKey names a destination for pacing purposes: "scheme://host:port"
// with the scheme and host lower-cased and the port always explicit, so that
// https://API.example.com and https://api.example.com:443 share one lane.
// Pool destinations use "pool:<pool_id>".
type UpstreamKey string

// PoolUpstream returns the upstream key of a pool.
func PoolUpstream(poolID string) UpstreamKey { return UpstreamKey("pool:" + poolID) }

// UpstreamOf returns the upstream key of an absolute http(s) URL. It returns
// false when the URL cannot be parsed or is not http(s).
//
// It runs several times per job (lanes, metrics, webhook routing), so the
// answer for each URL authority ("scheme://host:port", the part the key
// depends on) is remembered: a URL whose remainder cannot make url.Parse
// fail — no '%' escapes, no control characters — is answered from the
// authority's entry without being parsed again.
func UpstreamOf(raw string) (UpstreamKey, bool) {
	prefix, ok := authorityPrefix(raw)
	if !ok {
		return parseUpstream(raw)
	}
	if e, hit := upstreamCache.get(prefix); hit {
		return e.key, e.ok
	}
	k, valid := parseUpstream(prefix)
	upstreamCache.put(strings.Clone(prefix), upstreamEntry{key: k, ok: valid})
	return k, valid
}

// AuthorityPrefix returns raw up to the end of its authority when the rest
// of raw cannot change how url.Parse reads that authority (see
// authorityPrefix): a key for remembering per-destination answers without
// parsing the URL.
func AuthorityPrefix(raw string) (string, bool) { return authorityPrefix(raw) }

// authorityPrefix returns raw up to the end of its authority — "scheme://"
// and what follows up to the first '/', '?' or '#', where url.Parse ends it
// — when nothing in raw could make url.Parse answer differently for raw
// than for the prefix: no percent escapes (a bad one in the path or
// fragment is an error) and no control characters (refused anywhere).
func authorityPrefix(raw string) (string, bool) {
	sep := strings.Index(raw, "://")
	if sep <= 0 {
		return "", false
	}
	end := len(raw)
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c < 0x20 || c == 0x7f || c == '%':
			return "", false
		case i > sep+2 && end == len(raw) && (c == '/' || c == '?' || c == '#'):
			end = i
		}
	}
	if strings.IndexByte(raw[:sep], '#') >= 0 || strings.IndexByte(raw[:sep], '?') >= 0 || strings.IndexByte(raw[:sep], '/') >= 0 {
		return "", false // not a scheme: let url.Parse say what it is
	}
	return raw[:end], true
}

// upstreamEntry is one remembered answer of UpstreamOf.
type upstreamEntry struct {
	key UpstreamKey
	ok  bool
}

// authorityCache maps URL authorities to their upstream keys. It holds at
// most max entries and starts over when full: destinations are few, and
// a flood of distinct hosts only costs the parse the cache saves.
type authorityCache struct {
	mu  sync.RWMutex
	m   map[string]upstreamEntry
	max int
}

var upstreamCache = &authorityCache{m: make(map[string]upstreamEntry), max: 4096}

func (c *authorityCache) get(prefix string) (upstreamEntry, bool) {
	c.mu.RLock()
	e, ok := c.m[prefix]
	c.mu.RUnlock()
	return e, ok
}

func (c *authorityCache) put(prefix string, e upstreamEntry) {
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[prefix] = e
	c.mu.Unlock()
}

// parseUpstream is UpstreamOf without the cache.
func parseUpstream(raw string) (UpstreamKey, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	return upstreamOfURL(u)
}

func upstreamOfURL(u *url.URL) (UpstreamKey, bool) {
	scheme := strings.ToLower(u.Scheme)
	// "Example.com." and "example.com" are one destination, and so are
	// ports "0443" and "443": one lane, one budget.
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return "", false
	}
	port := strings.TrimLeft(u.Port(), "0")
	switch scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		if port == "" {
			port = "443"
		}
	default:
		return "", false
	}
	return UpstreamKey(scheme + "://" + net.JoinHostPort(host, port)), true
}

// Host returns the "host:port" part of an URL upstream key and the bare host
// ("" for pool keys). Configuration matches on these.
func (k UpstreamKey) Host() (hostPort, host string) {
	s := string(k)
	i := strings.Index(s, "://")
	if i < 0 {
		return "", ""
	}
	hostPort = s[i+3:]
	h, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return hostPort, hostPort
	}
	return hostPort, h
}

// IsPool reports whether the key names a pool.
func (k UpstreamKey) IsPool() bool { return strings.HasPrefix(string(k), "pool:") }

// PoolID returns the pool's id for a pool key, "" otherwise.
func (k UpstreamKey) PoolID() string {
	id, ok := strings.CutPrefix(string(k), "pool:")
	if !ok {
		return ""
	}
	return id
}

// QueueKey identifies one queue of waiting work: an upstream's shared
// queue, or one tenant's queue of it ("<upstream>|<tenant hash>") when
// account queues are on. The lane of an upstream (the unit that paces
// everything sent there) serves all of its queues; "lane" always means that
// per-upstream unit, "queue" one of these keys.
type QueueKey string

// SharedQueue returns the queue every job to upstream joins when account
// queues are off.
func SharedQueue(u UpstreamKey) QueueKey { return QueueKey(u) }

// TenantQueue returns the queue of one tenant of upstream.
func TenantQueue(u UpstreamKey, tenant string) QueueKey {
	return QueueKey(string(u) + "|" + tenant)
}

// Upstream returns the upstream part of the key: whose lane serves it.
func (l QueueKey) Upstream() UpstreamKey {
	s := string(l)
	if i := strings.LastIndexByte(s, '|'); i >= 0 {
		return UpstreamKey(s[:i])
	}
	return UpstreamKey(s)
}

// Tenant returns the tenant part of the key, or "" for a shared queue.
func (l QueueKey) Tenant() string {
	s := string(l)
	if i := strings.LastIndexByte(s, '|'); i >= 0 {
		return s[i+1:]
	}
	return ""
}
