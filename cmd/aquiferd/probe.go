package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aquiferhq/aquifer/internal/config"
)

// probe is `aquiferd probe`: GET /health of the local instance and succeed
// only on 200 with status "ok". It is the container's health check (the
// distroless image has no curl), so it needs nothing but this binary, and
// every failure is one line naming the reason.
func probe(ctx context.Context, args []string, lookup config.LookupEnv, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("aquiferd probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rawURL := fs.String("url", "", "the instance to probe (base URL or its /health URL); default: http://AQUIFER_HOST:PORT, with 127.0.0.1 for 0.0.0.0 or ::")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("probe: unexpected argument %q (usage: aquiferd probe [-url URL] [-timeout 3s])", fs.Arg(0))
	}
	if *timeout <= 0 {
		return errors.New("probe: -timeout must be positive")
	}
	target, err := probeURL(*rawURL, lookup)
	if err != nil {
		return fmt.Errorf("probe: %s", oneLine(err))
	}
	if err := probeHealth(ctx, target, *timeout); err != nil {
		return fmt.Errorf("probe %s: %s", target, oneLine(err))
	}
	fmt.Fprintf(stdout, "%s: ok\n", target)
	return nil
}

// probeURL is the /health URL to probe: the one given, or the local
// instance's from the settings.
func probeURL(raw string, lookup config.LookupEnv) (string, error) {
	if raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("-url %q: want an http:// or https:// URL", raw)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/health"
		}
		return u.String(), nil
	}
	cfg, err := config.Load(lookup)
	if err != nil {
		return "", fmt.Errorf("invalid configuration: %w", err)
	}
	if !cfg.HasAdapter("http") && !cfg.HasAdapter("a2a") && !cfg.HasAdapter("mcp-http") {
		return "", fmt.Errorf("no HTTP listener to probe: AQUIFER_ADAPTER is %s", strings.Join(cfg.Adapters, ","))
	}
	host := cfg.Host
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		// All interfaces: loopback is one of them (and a listener on ::
		// takes IPv4 too).
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(cfg.Port)) + "/health", nil
}

// probeHealth GETs target and returns why the instance is not healthy, or
// nil. Redirects are not followed and proxies from the environment are not
// used: the answer must come from the instance itself.
func probeHealth(ctx context.Context, target string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is in the message already
		}
		if ctx.Err() != nil {
			return fmt.Errorf("no answer within %v", timeout)
		}
		return err
	}
	defer resp.Body.Close()
	var doc struct {
		Status string `json:"status"`
		Store  struct {
			Error string `json:"error"`
		} `json:"store"`
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	jsonErr := json.Unmarshal(body, &doc)
	switch {
	case jsonErr == nil && doc.Status != "" && doc.Status != "ok":
		reason := fmt.Sprintf("status %q (HTTP %d)", doc.Status, resp.StatusCode)
		if doc.Store.Error != "" {
			reason += ": store: " + doc.Store.Error
		}
		return errors.New(reason)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("HTTP %s", resp.Status)
	case jsonErr != nil || doc.Status == "":
		return errors.New("the answer is not an Aquifer /health document (no JSON status)")
	}
	return nil
}

// oneLine joins a multi-line message (a configuration error lists every
// problem on its own line) into one.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
