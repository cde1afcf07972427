package domain_test

import (
	"math"
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestUpstreamOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw    string
		want   domain.UpstreamKey
		wantOK bool
	}{
		{"https://api.example.com/v1/x?q=1#f", "https://api.example.com:443", true},
		{"https://API.Example.COM/path", "https://api.example.com:443", true},
		{"HTTPS://api.example.com", "https://api.example.com:443", true},
		{"https://api.example.com:443", "https://api.example.com:443", true},
		{"http://example.com", "http://example.com:80", true},
		{"HTTP://Example.com:80/", "http://example.com:80", true},
		{"http://example.com:8080/x", "http://example.com:8080", true},
		{"https://example.com:80/", "https://example.com:80", true},
		{"http://example.com:443/", "http://example.com:443", true},
		{"http://127.0.0.1:9000/", "http://127.0.0.1:9000", true},
		{"http://[::1]/", "http://[::1]:80", true},
		{"https://[::1]/", "https://[::1]:443", true},
		{"https://[2001:DB8::1]:8443/x", "https://[2001:db8::1]:8443", true},
		{"http://user:pw@Example.com/", "http://example.com:80", true},
		{"http://internal-api:8443", "http://internal-api:8443", true},

		{"ftp://example.com/", "", false},
		{"ws://example.com/", "", false},
		{"file:///etc/passwd", "", false},
		{"mailto:a@example.com", "", false},
		{"example.com", "", false},
		{"//example.com/x", "", false},
		{"/relative", "", false},
		{"", "", false},
		{"https://", "", false},
		{"http://:8080/", "", false},
		{"http://%zz/", "", false},
		{"http://example.com:port/", "", false},
	}
	for _, tc := range tests {
		got, ok := domain.UpstreamOf(tc.raw)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("UpstreamOf(%q) = (%q, %v), want (%q, %v)", tc.raw, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestUpstreamOfSharesLaneAcrossSpellings(t *testing.T) {
	t.Parallel()
	spellings := []string{
		"https://api.example.com/a",
		"https://API.EXAMPLE.COM/b",
		"HTTPS://api.example.com:443/c",
		"https://Api.Example.Com:443",
		"https://api.example.com:0443/d",
		"https://api.example.com./e",
	}
	first, _ := domain.UpstreamOf(spellings[0])
	for _, s := range spellings[1:] {
		if k, _ := domain.UpstreamOf(s); k != first {
			t.Errorf("UpstreamOf(%q) = %q, want %q", s, k, first)
		}
	}
	// Different scheme or port is a different upstream.
	for _, s := range []string{"http://api.example.com/", "https://api.example.com:8443/"} {
		if k, _ := domain.UpstreamOf(s); k == first {
			t.Errorf("UpstreamOf(%q) = %q collides with %q", s, k, first)
		}
	}
}

func TestUpstreamKeyHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key            domain.UpstreamKey
		hostPort, host string
		isPool         bool
	}{
		{"https://api.example.com:443", "api.example.com:443", "api.example.com", false},
		{"http://internal-api:8443", "internal-api:8443", "internal-api", false},
		{"http://[::1]:80", "[::1]:80", "::1", false},
		{"https://[2001:db8::1]:8443", "[2001:db8::1]:8443", "2001:db8::1", false},
		{"http://example.com", "example.com", "example.com", false}, // no port: whole remainder
		{domain.PoolUpstream("pool-1"), "", "", true},
		{"", "", "", false},
	}
	for _, tc := range tests {
		hp, h := tc.key.Host()
		if hp != tc.hostPort || h != tc.host {
			t.Errorf("UpstreamKey(%q).Host() = (%q, %q), want (%q, %q)", tc.key, hp, h, tc.hostPort, tc.host)
		}
		if got := tc.key.IsPool(); got != tc.isPool {
			t.Errorf("UpstreamKey(%q).IsPool() = %v, want %v", tc.key, got, tc.isPool)
		}
	}
}

func TestUpstreamOfHostRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct{ raw, hostPort, host string }{
		{"https://API.vendor-a.com/x", "api.vendor-a.com:443", "api.vendor-a.com"},
		{"http://Internal-API:8443/x", "internal-api:8443", "internal-api"},
		{"http://[FE80::1]:81/", "[fe80::1]:81", "fe80::1"},
	}
	for _, tc := range tests {
		k, ok := domain.UpstreamOf(tc.raw)
		if !ok {
			t.Fatalf("UpstreamOf(%q) failed", tc.raw)
		}
		hp, h := k.Host()
		if hp != tc.hostPort || h != tc.host {
			t.Errorf("UpstreamOf(%q).Host() = (%q, %q), want (%q, %q)", tc.raw, hp, h, tc.hostPort, tc.host)
		}
	}
}

func TestPoolUpstream(t *testing.T) {
	t.Parallel()
	k := domain.PoolUpstream("gpu.pool_1")
	if k != "pool:gpu.pool_1" {
		t.Fatalf("PoolUpstream = %q", k)
	}
	if !k.IsPool() {
		t.Fatal("pool key not reported as pool")
	}
	u, _ := domain.UpstreamOf("https://pool.example.com/")
	if u.IsPool() {
		t.Fatalf("URL upstream %q reported as pool", u)
	}
}

func TestJobUpstream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		job  domain.Job
		want domain.UpstreamKey
	}{
		{"url", domain.Job{URL: "https://API.example.com/x"}, "https://api.example.com:443"},
		{"pool", domain.Job{PoolID: "p1"}, "pool:p1"},
		{"pool wins", domain.Job{PoolID: "p1", URL: "https://x.com/"}, "pool:p1"},
		{"bad url", domain.Job{URL: "ftp://x.com/"}, ""},
	}
	for _, tc := range tests {
		if got := tc.job.Upstream(); got != tc.want {
			t.Errorf("%s: Upstream() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestQueueKeys(t *testing.T) {
	t.Parallel()
	ipv6, _ := domain.UpstreamOf("http://[::1]:8080/")
	tests := []struct {
		name     string
		lane     domain.QueueKey
		want     domain.QueueKey
		upstream domain.UpstreamKey
		tenant   string
	}{
		{"shared url", domain.SharedQueue("https://api.example.com:443"), "https://api.example.com:443", "https://api.example.com:443", ""},
		{"tenant url", domain.TenantQueue("https://api.example.com:443", "ab12cd"), "https://api.example.com:443|ab12cd", "https://api.example.com:443", "ab12cd"},
		{"shared pool", domain.SharedQueue(domain.PoolUpstream("p")), "pool:p", "pool:p", ""},
		{"tenant pool", domain.TenantQueue(domain.PoolUpstream("p"), "t"), "pool:p|t", "pool:p", "t"},
		{"shared ipv6", domain.SharedQueue(ipv6), "http://[::1]:8080", "http://[::1]:8080", ""},
		{"tenant ipv6", domain.TenantQueue(ipv6, "0f"), "http://[::1]:8080|0f", "http://[::1]:8080", "0f"},
		{"empty tenant", domain.TenantQueue("pool:p", ""), "pool:p|", "pool:p", ""},
	}
	for _, tc := range tests {
		if tc.lane != tc.want {
			t.Errorf("%s: lane = %q, want %q", tc.name, tc.lane, tc.want)
		}
		if got := tc.lane.Upstream(); got != tc.upstream {
			t.Errorf("%s: Upstream() = %q, want %q", tc.name, got, tc.upstream)
		}
		if got := tc.lane.Tenant(); got != tc.tenant {
			t.Errorf("%s: Tenant() = %q, want %q", tc.name, got, tc.tenant)
		}
	}
	if domain.SharedQueue("pool:p") == domain.TenantQueue("pool:p", "t") {
		t.Error("shared and tenant lanes of one upstream collide")
	}
	if domain.TenantQueue("pool:p", "a") == domain.TenantQueue("pool:p", "b") {
		t.Error("tenant lanes of different tenants collide")
	}
}

func TestRateValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rate domain.Rate
		want string // "" = valid
	}{
		{"default", domain.DefaultRate, ""},
		{"minimum rps", domain.Rate{RPS: 0.5, MaxConcurrent: 1}, ""},
		{"high", domain.Rate{RPS: 10000, MaxConcurrent: 500}, ""},
		{"rps below minimum", domain.Rate{RPS: 0.49, MaxConcurrent: 1}, "up: rps must be a number >= 0.5, got 0.49"},
		{"rps zero", domain.Rate{RPS: 0, MaxConcurrent: 1}, "up: rps must be a number >= 0.5, got 0"},
		{"rps negative", domain.Rate{RPS: -3, MaxConcurrent: 1}, "up: rps must be a number >= 0.5, got -3"},
		{"rps NaN", domain.Rate{RPS: math.NaN(), MaxConcurrent: 1}, "up: rps must be a number >= 0.5, got NaN"},
		{"rps +Inf", domain.Rate{RPS: math.Inf(1), MaxConcurrent: 1}, "up: rps must be a number >= 0.5, got +Inf"},
		{"rps -Inf", domain.Rate{RPS: math.Inf(-1), MaxConcurrent: 1}, "up: rps must be a number >= 0.5, got -Inf"},
		{"max_concurrent zero", domain.Rate{RPS: 1, MaxConcurrent: 0}, "up: max_concurrent must be >= 1, got 0"},
		{"max_concurrent negative", domain.Rate{RPS: 1, MaxConcurrent: -2}, "up: max_concurrent must be >= 1, got -2"},
		{"rps checked first", domain.Rate{RPS: 0, MaxConcurrent: 0}, "up: rps must be a number >= 0.5, got 0"},
	}
	for _, tc := range tests {
		err := tc.rate.Validate("up")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
	if domain.DefaultRate != (domain.Rate{RPS: 2, MaxConcurrent: 1}) {
		t.Errorf("DefaultRate = %+v, want 2 rps / 1 concurrent", domain.DefaultRate)
	}
}

// FuzzUpstreamOfMatchesParse checks the remembered answers: UpstreamOf
// must say exactly what parsing the whole URL says, for any input, whether
// its authority was seen before or not.
func FuzzUpstreamOfMatchesParse(f *testing.F) {
	for _, s := range []string{
		"https://api.example.com/v1/x?q=1#f", "HTTP://Example.com:80/", "http://[::1]/", "http://user:pw@h/",
		"http://h/%zz", "http://h/a#%zz", "http://h/\x7f", "http://h\x01/", "http://h?x", "http://h#f/x",
		"http:///p", "http://:80/", "1http://h/", "ht?tp://h/", "a/b://h/", "http://h:0080/x", "https://h./",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for range 2 { // the second call is answered from the cache
			got, ok := domain.UpstreamOf(raw)
			want, wantOK := domain.ParseUpstreamForTest(raw)
			if got != want || ok != wantOK {
				t.Fatalf("UpstreamOf(%q) = (%q, %v), parsing says (%q, %v)", raw, got, ok, want, wantOK)
			}
		}
	})
}

func TestUpstreamOfAnswersLikeParsingAfterCaching(t *testing.T) {
	// Same authority, different remainders: one valid, one that parsing refuses.
	for _, raw := range []string{"http://cache.test/ok", "http://cache.test/bad%zz", "http://cache.test/ctl\x7f", "http://cache.test?q"} {
		got, ok := domain.UpstreamOf(raw)
		want, wantOK := domain.ParseUpstreamForTest(raw)
		if got != want || ok != wantOK {
			t.Errorf("UpstreamOf(%q) = (%q, %v), parsing says (%q, %v)", raw, got, ok, want, wantOK)
		}
	}
	if testing.AllocsPerRun(100, func() { domain.UpstreamOf("http://cache.test/some/path?x=1") }) != 0 {
		t.Error("a remembered authority still allocates")
	}
}
