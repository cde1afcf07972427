package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The dashboard's browser tests share one headless Chromium per test
// process: starting a browser costs about a second, a new tab a few
// milliseconds. Each test (or subtest) opens its own tab, so tabs never share
// a session: sessionStorage, where the dashboard keeps an API key, is per tab.

// shared is the test process's browser, started by the first test that
// asks for it and closed by TestMain.
var shared struct {
	once   sync.Once
	ctx    context.Context // the browser's first tab; tabs are opened from it
	stop   func()
	err    error
	output *lockedBuffer // the browser's stdout and stderr, for a failed start
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.stop != nil {
		shared.stop()
	}
	os.Exit(code)
}

// chromiumPath finds the browser the way scripts/test-deps.sh does: the
// binary AQUIFER_CHROMIUM names, else Debian's chromium on PATH.
func chromiumPath() (string, error) {
	if p := os.Getenv("AQUIFER_CHROMIUM"); p != "" {
		found, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("AQUIFER_CHROMIUM=%s: %v (unset it to use Debian's chromium, which scripts/test-deps.sh installs)", p, err)
		}
		return found, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if found, err := exec.LookPath(name); err == nil {
			return found, nil
		}
	}
	return "", errors.New("the dashboard's browser tests need Chromium, and neither chromium nor chromium-browser is on PATH: " +
		"run scripts/test-deps.sh (it installs Debian's chromium package with apt), or set AQUIFER_CHROMIUM to a Chrome or Chromium binary")
}

// browserFlags are the allocator options: chromedp's defaults (headless, no
// first-run, no background networking, sync or default apps), restated where
// the tests depend on them, plus what keeps the browser off the network. It
// talks to chromedp over a pipe, so it opens no debugging port; it resolves
// no name and reaches only 127.0.0.1, where the tests' aquiferd listens; and
// it fetches no component, safe-browsing list or field trial.
func browserFlags(path string) []chromedp.ExecAllocatorOption {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("disable-field-trial-config", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,OptimizationHints,MediaRouter,DialMediaRouteProvider,"+
			"AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions"),
		chromedp.WindowSize(1280, 800),
	)
	// Chromium's sandbox needs user namespaces that root in a container (CI)
	// does not get; anyone else keeps it.
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	return opts
}

// browser returns the shared browser's context, starting it on first use.
// A machine without Chromium fails the test, saying how to install it.
func browser(t *testing.T) context.Context {
	t.Helper()
	shared.once.Do(func() {
		path, err := chromiumPath()
		if err != nil {
			shared.err = err
			return
		}
		shared.output = &lockedBuffer{}
		opts := append(browserFlags(path), chromedp.CombinedOutput(shared.output))
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		// The first Run starts the browser and binds it to bctx: no
		// timeout here, or the browser would stop when it ran out.
		if err := chromedp.Do(bctx); err != nil {
			bcancel()
			acancel()
			shared.err = fmt.Errorf("start %s: %w\n%s", path, err, shared.output.String())
			return
		}
		shared.ctx = bctx
		shared.stop = func() {
			ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
			defer cancel()
			_ = chromedp.Cancel(ctx)
			bcancel()
			acancel()
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.ctx
}

// waitTimeout bounds each wait for the page: far above what a page takes
// here (well under a second), so that only a page that never gets there
// fails, also on a loaded CI machine.
const waitTimeout = 20 * time.Second

// tab is one browser tab on one aquiferd's dashboard. Its methods fail the
// test on error. It records uncaught exceptions and Content Security Policy
// violations, and fails the test with them when the test ends.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string // the daemon's URL

	mu       sync.Mutex
	problems []string
}

// newTab opens a tab on the shared browser with a viewport of width×height
// CSS pixels.
func newTab(t *testing.T, base string, width, height int64) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser(t))
	b := &tab{t: t, ctx: ctx, base: base}
	if err := chromedp.Do(ctx); err != nil { // opens the tab
		cancel()
		t.Fatalf("open a tab: %v", err)
	}
	t.Cleanup(cancel)
	t.Cleanup(b.reportProblems) // runs before cancel: cleanups run last first
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	entries := chromedp.Events(ctx, cdplog.EntryAdded)
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			b.problem((&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		}
	}()
	go func() {
		for ev, err := range entries {
			if err != nil {
				return
			}
			// Failed requests (a 401 before the login form, a 403 the
			// page shows as a toast) are logged too, as network errors:
			// they are the API's answers, not the page's faults.
			e := ev.Entry
			if strings.Contains(e.Text, "Content Security Policy") ||
				(e.Level == cdplog.EntryLevelError && e.Source == cdplog.EntrySourceJavascript) {
				b.problem(fmt.Sprintf("console %s (%s): %s %s", e.Level, e.Source, e.Text, e.URL))
			}
		}
	}()
	b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, cdplog.Enable, cdp.Empty{})
		return err
	}), chromedp.EmulateViewport(width, height))
	return b
}

func (b *tab) problem(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, s)
}

func (b *tab) reportProblems() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("the page reported: %s", p)
	}
}

// do runs actions with the wait timeout.
func (b *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%v\n%s", err, b.describe())
	}
}

// open loads the dashboard at a hash route ("#/jobs?status=failed"), as a
// person following a link would: a full page load.
func (b *tab) open(route string) {
	b.t.Helper()
	b.do(chromedp.Navigate(b.base + "/ui/" + route))
}

// route changes the hash route inside the loaded page, as the page's own
// links do: no reload.
func (b *tab) route(route string) {
	b.t.Helper()
	b.eval(fmt.Sprintf("location.hash = %s", jsString(route)), nil)
}

// ready waits until page's root is shown with its first data loaded.
func (b *tab) ready(page string) {
	b.t.Helper()
	b.waitVisible(fmt.Sprintf(`main[data-test=page-%s][data-ready="true"]`, page))
}

// eval evaluates a JavaScript expression; out (a pointer, or nil to ignore
// the value) receives its JSON value.
func (b *tab) eval(expr string, out any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitTimeout)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil && !(out == nil && (errors.Is(err, chromedp.ErrJSUndefined) || errors.Is(err, chromedp.ErrJSNull))) {
		b.t.Fatalf("evaluate %s: %v\n%s", expr, err, b.describe())
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			b.t.Fatalf("evaluate %s: %v in %s", expr, err, raw)
		}
	}
}

// until waits for the JavaScript function fn, called with args, to return
// true. On failure what (called then) describes the wait.
func (b *tab) until(what func() string, fn string, args ...any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitTimeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](fn,
		chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(waitTimeout),
		chromedp.WithPollingArgs(args...)))
	if err != nil {
		b.t.Fatalf("waiting for %s: %v\n%s", what(), err, b.describe())
	}
}

func say(s string) func() string { return func() string { return s } }

// The page-side halves of the waits. visibleJS is the test of being shown:
// laid out, and not hidden by visibility.
const (
	visibleJS = `(e) => !!e && e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden"`
	textOfJS  = `(e) => e ? e.textContent.replace(/\s+/g, " ").trim() : null`
)

func (b *tab) waitVisible(sel string) {
	b.t.Helper()
	b.until(say(sel+" to be shown"), `(sel) => (`+visibleJS+`)(document.querySelector(sel))`, sel)
}

func (b *tab) waitGone(sel string) {
	b.t.Helper()
	b.until(say(sel+" to be hidden"), `(sel) => !(`+visibleJS+`)(document.querySelector(sel))`, sel)
}

func (b *tab) waitPresent(sel string) {
	b.t.Helper()
	b.until(say(sel+" to exist"), `(sel) => !!document.querySelector(sel)`, sel)
}

// waitText waits until the first element sel selects has exactly the text
// want (white space collapsed).
func (b *tab) waitText(sel, want string) {
	b.t.Helper()
	b.until(func() string { return fmt.Sprintf("%s to read %q (it reads %q)", sel, want, b.textNow(sel)) },
		`(sel, want) => (`+textOfJS+`)(document.querySelector(sel)) === want`, sel, want)
}

// waitTextContains waits until the first element sel selects has want in
// its text.
func (b *tab) waitTextContains(sel, want string) {
	b.t.Helper()
	b.until(func() string { return fmt.Sprintf("%s to contain %q (it reads %q)", sel, want, b.textNow(sel)) },
		`(sel, want) => ((`+textOfJS+`)(document.querySelector(sel)) || "").includes(want)`, sel, want)
}

// text is the text of the first element sel selects, which must exist.
func (b *tab) text(sel string) string {
	b.t.Helper()
	b.waitPresent(sel)
	return b.textNow(sel)
}

func (b *tab) textNow(sel string) string {
	b.t.Helper()
	var s *string
	b.eval(fmt.Sprintf(`(%s)(document.querySelector(%s))`, textOfJS, jsString(sel)), &s)
	if s == nil {
		return ""
	}
	return *s
}

// count is how many elements sel selects now.
func (b *tab) count(sel string) int {
	b.t.Helper()
	var n int
	b.eval(fmt.Sprintf(`document.querySelectorAll(%s).length`, jsString(sel)), &n)
	return n
}

// visible reports whether the first element sel selects is shown now.
func (b *tab) visible(sel string) bool {
	b.t.Helper()
	var v bool
	b.eval(fmt.Sprintf(`(%s)(document.querySelector(%s))`, visibleJS, jsString(sel)), &v)
	return v
}

// click clicks the first element sel selects with the mouse, once it is
// shown, as a person would (the page sees real mouse events).
func (b *tab) click(sel string) {
	b.t.Helper()
	b.waitVisible(sel)
	b.do(chromedp.ScrollIntoView(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
}

// typeInto focuses the input sel selects, clears it and types s with key
// events.
func (b *tab) typeInto(sel, s string) {
	b.t.Helper()
	b.waitVisible(sel)
	b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%s); e.value = ""; e.focus(); })()`, jsString(sel)), nil)
	b.do(chromedp.SendKeys(chromedp.CSS(sel), s))
}

// key sends one key (a kb constant, e.g. kb.Escape) to the focused element.
func (b *tab) key(k string) {
	b.t.Helper()
	b.do(chromedp.KeyEvent(k))
}

// screenshot is a PNG of the viewport.
func (b *tab) screenshot() []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	return png
}

// describe is what a failure shows of the page: where it is, its toasts
// and the start of its main element.
func (b *tab) describe() string {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const main = document.querySelector("main");
		const toasts = [...document.querySelectorAll("[data-test=toast]")].map(e => e.textContent.trim());
		return "page " + location.href + (toasts.length ? "\ntoasts: " + JSON.stringify(toasts) : "") +
			"\n" + (main ? main.outerHTML : document.body ? document.body.outerHTML : "(no body)").slice(0, 3000);
	})()`))
	if err != nil {
		return "(the page could not be read: " + err.Error() + ")"
	}
	return s
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}
