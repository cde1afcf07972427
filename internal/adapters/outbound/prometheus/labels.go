package prommetrics

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// Label values with a fixed meaning. Neither can collide with an upstream
// key, which always contains "://" or starts with "pool:".
const (
	// OtherLabel stands for every value beyond a label's cap.
	OtherLabel = "other"
	// NoneLabel stands for an empty value (an upstream that could not be
	// parsed; no HTTP status).
	NoneLabel = "none"
)

// labelCap admits at most max distinct values of one label, first come
// first served, and maps every later one to OtherLabel. Admitted values stay
// admitted for the life of the process: a series, once exported, keeps its
// name. The fast path (a value seen before) takes a read lock.
type labelCap struct {
	max  int
	mu   sync.RWMutex
	seen map[string]struct{}
}

func newLabelCap(maxValues int) *labelCap {
	return &labelCap{max: maxValues, seen: make(map[string]struct{})}
}

// value returns v itself if it has (or now gets) a place under the cap,
// otherwise OtherLabel. Empty becomes NoneLabel; invalid UTF-8, which the
// Prometheus client refuses, is repaired.
func (c *labelCap) value(v string) string {
	if v == "" {
		return NoneLabel
	}
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	c.mu.RLock()
	_, ok := c.seen[v]
	full := len(c.seen) >= c.max
	c.mu.RUnlock()
	if ok {
		return v
	}
	if full {
		return OtherLabel
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[v]; ok {
		return v
	}
	if len(c.seen) >= c.max {
		return OtherLabel
	}
	c.seen[v] = struct{}{}
	return v
}

func (c *labelCap) size() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.seen)
}

// codeClass buckets an HTTP status into its class ("2xx" … "5xx"), or
// NoneLabel when no response was obtained (0) or the code is out of range.
// Classes, not codes: a destination answering odd codes cannot add series,
// and 429s show up as outcome="deferred" anyway.
func codeClass(status int) string {
	switch {
	case status >= 100 && status < 200:
		return "1xx"
	case status >= 200 && status < 300:
		return "2xx"
	case status >= 300 && status < 400:
		return "3xx"
	case status >= 400 && status < 500:
		return "4xx"
	case status >= 500 && status < 600:
		return "5xx"
	}
	return NoneLabel
}
