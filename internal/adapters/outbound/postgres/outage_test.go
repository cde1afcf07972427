package postgres

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// proxy forwards loopback TCP connections to the test database and can cut
// them: close every connection and refuse new ones, as a database that went
// away does.
type proxy struct {
	t      *testing.T
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]bool
	stalled bool // accept connections but never answer (a black hole)
	wg      sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.holdIfStalled(c) {
				continue
			}
			up, err := net.DialTimeout("tcp", p.target, 3*time.Second)
			if err != nil {
				c.Close()
				continue
			}
			if !p.track(c, up) {
				return
			}
			for _, pair := range [][2]net.Conn{{c, up}, {up, c}} {
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					_, _ = io.Copy(pair[0], pair[1])
					pair[0].Close()
					pair[1].Close()
				}()
			}
		}
	}()
}

// track registers a forwarded pair unless the proxy was cut meanwhile.
func (p *proxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		c.Close()
		up.Close()
		return false
	}
	p.conns[c], p.conns[up] = true, true
	return true
}

// holdIfStalled keeps c open without forwarding it while the proxy stalls.
func (p *proxy) holdIfStalled(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.conns[c] = true
	}
	return p.stalled
}

// stall closes every connection and then accepts new ones without ever
// answering: the database hangs.
func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// cut closes every connection and stops listening: connects are refused.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// restore forwards again: it ends a stall, or listens again on the same
// address after a cut.
func (p *proxy) restore() {
	p.mu.Lock()
	stalled, listening := p.stalled, p.ln != nil
	p.stalled = false
	if stalled {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
	p.mu.Unlock()
	if listening {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("re-listen on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// viaProxy returns the test DSN pointed at a proxy in front of its server.
func viaProxy(t *testing.T) (string, *proxy) {
	t.Helper()
	cfg, err := pgx.ParseConfig(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host == "" || cfg.Host[0] == '/' {
		t.Skipf("the test database is reached over a unix socket (%s); the outage test needs TCP", cfg.Host)
	}
	p := newProxy(t, net.JoinHostPort(cfg.Host, itoa(cfg.Port)))
	u := &url.URL{Scheme: "postgres", User: url.User(cfg.User), Host: p.addr, Path: "/" + cfg.Database,
		RawQuery: "sslmode=disable"}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	}
	return u.String(), p
}

func itoa(n uint16) string {
	var b [5]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func TestSurvivesDatabaseOutage(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	admin(t)
	dsn, p := viaProxy(t)
	s := openStore(t, schema, "a:1", func(o *Options) {
		o.DSN = dsn
		o.Timeout = 2 * time.Second
	})
	before := insert(t, s, "u", "before", "up.test:80")

	p.cut()
	start := time.Now()
	_, _, err := s.Insert(t.Context(), storetest.NewJob("u", "during", "up.test:80"))
	if err == nil {
		t.Fatal("Insert during the outage succeeded")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Insert during the outage took %v to fail", took)
	}
	if code := domain.CodeOf(err); code != domain.CodeUnavailable {
		t.Fatalf("Insert during the outage: %v (code %s), want unavailable", err, code)
	}
	if _, err := s.Get(t.Context(), before.ID); domain.CodeOf(err) != domain.CodeUnavailable {
		t.Fatalf("Get during the outage = %v, want unavailable", err)
	}
	if _, err := s.ListReady(t.Context(), &ports.ListReadyParams{Queue: "up.test:80", Limit: 10, Now: time.Now()}); domain.CodeOf(err) != domain.CodeUnavailable {
		t.Fatalf("ListReady during the outage = %v, want unavailable", err)
	}
	if err := s.Ping(t.Context()); domain.CodeOf(err) != domain.CodeUnavailable {
		t.Fatalf("Ping during the outage = %v, want unavailable", err)
	}
	// A fire-and-forget write during the outage is lost at worst.
	if err := s.MarkInFlight(t.Context(), &ports.MarkInFlightParams{ID: before.ID, At: time.Now()}); err != nil {
		t.Fatalf("MarkInFlight during the outage: %v", err)
	}

	p.restore()
	deadline := time.Now().Add(10 * time.Second)
	var after *domain.Job
	for {
		j, fresh, err := s.Insert(t.Context(), storetest.NewJob("u", "after", "up.test:80"))
		if err == nil && fresh {
			after = j
			break
		}
		if err == nil {
			t.Fatalf("Insert after the outage: not fresh")
		}
		if time.Now().After(deadline) {
			t.Fatalf("Insert still fails 10s after the database came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got, err := s.Get(t.Context(), before.ID)
	if err != nil || got.UserID != "u" || got.IdempotentKey != "before" || string(got.Body) != string(before.Body) ||
		got.Seq != before.Seq || got.ReadySeq != before.ReadySeq {
		t.Fatalf("job inserted before the outage: %+v, %v", got, err)
	}
	if after.ReadySeq <= before.ReadySeq {
		t.Fatalf("ReadySeq after the outage %d <= %d before", after.ReadySeq, before.ReadySeq)
	}
	if j, err := s.Lookup(t.Context(), "u", "during"); err != nil && !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("Lookup after the outage: %v", err)
	} else if err == nil {
		t.Logf("the insert that failed during the outage had committed (%s): allowed, the caller retries with its key", j.ID)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping after the outage: %v", err)
	}
}

// TestHungDatabaseFailsPromptly: a database that accepts connections but
// never answers costs each operation at most Options.Timeout.
func TestHungDatabaseFailsPromptly(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	admin(t)
	dsn, p := viaProxy(t)
	s := openStore(t, schema, "a:1", func(o *Options) {
		o.DSN = dsn
		o.Timeout = time.Second
	})
	before := insert(t, s, "u", "before", "up.test:80")
	p.stall()
	var wg sync.WaitGroup
	for i, op := range []func() error{
		func() error {
			_, _, err := s.Insert(t.Context(), storetest.NewJob("u", "during", "up.test:80"))
			return err
		},
		func() error { _, err := s.Get(t.Context(), before.ID); return err },
		func() error {
			_, err := s.ListReady(t.Context(), &ports.ListReadyParams{Queue: "up.test:80", Limit: 10, Now: time.Now()})
			return err
		},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := op()
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("op %d took %v while the database hung", i, took)
			}
			if domain.CodeOf(err) != domain.CodeUnavailable {
				t.Errorf("op %d while the database hung: %v, want unavailable", i, err)
			}
		}()
	}
	wg.Wait()
	p.restore()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := s.Insert(t.Context(), storetest.NewJob("u", "after", "up.test:80"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Insert still fails 10s after the database came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if j, err := s.Get(t.Context(), before.ID); err != nil || j.IdempotentKey != "before" {
		t.Fatalf("job inserted before the hang: %+v, %v", j, err)
	}
}
