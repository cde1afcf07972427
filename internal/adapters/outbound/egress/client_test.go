package egress_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/egress"
)

// exchangeLog is what a test server saw: one line per request.
type exchangeLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *exchangeLog) add(r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("%s %s%s body=%q auth=%q x=%q", r.Method, r.Host, r.URL.RequestURI(),
		body, r.Header.Get("Authorization"), r.Header.Get("X-Job")))
}

func (l *exchangeLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

// redirectServer answers /to/CODE?next=URL with that redirect status and a
// Location of URL (none when next is absent), and everything else with 200
// and the request's method and body.
func redirectServer(t *testing.T, log *exchangeLog) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		var code int
		if _, err := fmt.Sscanf(r.URL.Path, "/to/%d", &code); err == nil {
			if next := r.URL.Query().Get("next"); next != "" {
				w.Header().Set("Location", next)
			}
			w.WriteHeader(code)
			_, _ = io.WriteString(w, "redirect body")
			return
		}
		_, _ = io.WriteString(w, "done "+r.Method)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// outcome is everything a caller of Do can see, and everything the
// destination saw.
func outcome(t *testing.T, do func(*http.Request) (*http.Response, error), req *http.Request, log *exchangeLog) string {
	t.Helper()
	resp, err := do(req)
	if err != nil {
		return fmt.Sprintf("error %v; saw %q", err, log.take())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %q location=%q final=%s; saw %q", resp.StatusCode, body, resp.Header.Get("Location"),
		resp.Request.URL, log.take())
}

// Client.Do sends the first hop itself and leaves redirects to net/http:
// for every kind of answer, what the caller gets back and what the
// destinations see are what http.Client.Do gives and makes them see. A
// redirect's first hop reaches the destination once.
func TestClientDoIsNetHTTPsDo(t *testing.T) {
	forBoth(t, func(t *testing.T, m transportMode) {
		log := &exchangeLog{}
		srv := redirectServer(t, log)
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		other := "http://other.test:" + port // the same server under another host name
		b := setup(t, m)
		b.answer("other.test", "127.0.0.1")
		c := egress.NewClient(egress.Options{Resolver: b.resolver, Dial: b.dialer.Dial, NetHTTPForPlainHTTP: m.netHTTP, MaxRedirects: 3})
		t.Cleanup(c.CloseIdleConnections)

		closed, _ := net.Listen("tcp", "127.0.0.1:0")
		refused := "http://" + closed.Addr().String() + "/"
		closed.Close()

		type request struct {
			name, method, url, body string
			header                  map[string]string
			unreplayable            bool // a body net/http cannot send again (no GetBody)
		}
		for _, rq := range []request{
			{name: "plain GET", method: "GET", url: srv.URL + "/a?x=1"},
			{name: "POST", method: "POST", url: srv.URL + "/a", body: "payload", header: map[string]string{"X-Job": "1"}},
			{name: "301 turns POST into GET", method: "POST", url: srv.URL + "/to/301?next=/b", body: "payload"},
			{name: "302 turns PUT into GET", method: "PUT", url: srv.URL + "/to/302?next=/b", body: "payload"},
			{name: "303", method: "POST", url: srv.URL + "/to/303?next=/b", body: "payload"},
			{name: "307 keeps method and body", method: "POST", url: srv.URL + "/to/307?next=/b", body: "payload", header: map[string]string{"X-Job": "7"}},
			{name: "308 keeps method and body", method: "PATCH", url: srv.URL + "/to/308?next=/b", body: "payload"},
			{name: "307 with a body sent once only", method: "POST", url: srv.URL + "/to/307?next=/b", body: "payload", unreplayable: true},
			{name: "308 without Location", method: "POST", url: srv.URL + "/to/308", body: "payload"},
			{name: "302 without Location", method: "GET", url: srv.URL + "/to/302"},
			{name: "304 is not a redirect", method: "GET", url: srv.URL + "/to/304?next=/b"},
			{name: "a chain", method: "GET", url: srv.URL + "/to/302?next=" + "/to/307%3Fnext%3D/c"},
			{name: "past the cap", method: "GET", url: srv.URL + "/to/302?next=/to/302%3Fnext%3D/to/302%253Fnext%253D/to/302"},
			{name: "to another host drops Authorization", method: "GET", url: srv.URL + "/to/302?next=" + other + "/b",
				header: map[string]string{"Authorization": "Bearer s3cret", "X-Job": "kept"}},
			{name: "to a refused address", method: "GET", url: srv.URL + "/to/302?next=http://169.254.169.254/latest"},
			{name: "user info", method: "GET", url: "http://user:pw@" + srv.Listener.Addr().String() + "/to/302?next=/b"},
			{name: "connection refused", method: "POST", url: refused, body: "payload"},
			{name: "no route to a name", method: "GET", url: "http://nowhere.test/"},
		} {
			make := func() *http.Request {
				var body io.Reader
				if rq.body != "" {
					body = strings.NewReader(rq.body)
					if rq.unreplayable {
						body = io.MultiReader(body) // a reader NewRequest knows no GetBody for
					}
				}
				req, err := http.NewRequestWithContext(t.Context(), rq.method, rq.url, body)
				if err != nil {
					t.Fatal(err)
				}
				if rq.unreplayable {
					req.ContentLength = int64(len(rq.body))
				}
				for k, v := range rq.header {
					req.Header.Set(k, v)
				}
				return req
			}
			want := outcome(t, c.Client.Do, make(), log)
			got := outcome(t, c.Do, make(), log)
			if got != want {
				t.Errorf("%s:\n Do:           %s\n net/http's Do: %s", rq.name, got, want)
			}
		}
	})
}

// Client.Do allocates less per request than net/http's Client.Do: it skips
// the copy of the request's headers and URL that net/http makes for
// redirects before it sends anything: six allocations here, eight for a
// dispatch's nine headers in BenchmarkClientDo. The counts include the test
// server's, the same for both.
func TestClientDoSkipsTheRedirectCopy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	c := egress.NewClient(egress.Options{})
	defer c.CloseIdleConnections()
	allocs := func(do func(*http.Request) (*http.Response, error)) float64 {
		return testing.AllocsPerRun(200, func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/", strings.NewReader("payload"))
			for _, h := range []string{"A", "B", "C", "D", "E", "F", "G", "H"} {
				req.Header["X-"+h] = []string{h}
			}
			resp, err := do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	netHTTP, ours := allocs(c.Client.Do), allocs(c.Do)
	if ours > netHTTP-4 {
		t.Fatalf("Client.Do makes %.1f allocations per request, net/http's %.1f: want at least 4 fewer", ours, netHTTP)
	}
	t.Logf("allocations per request: net/http's Client.Do %.1f, Client.Do %.1f", netHTTP, ours)
}
