package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aquiferhq/aquifer/internal/l8"
)

// oneOf returns v lower-cased if it is one of allowed.
func oneOf(v string, allowed ...string) (string, error) {
	v = strings.ToLower(v)
	if slices.Contains(allowed, v) {
		return v, nil
	}
	return "", fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
}

func parseInt(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", v)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is out of range [%d, %d]", n, lo, hi)
	}
	return n, nil
}

func parseInt64(v string, lo int64) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", v)
	}
	if n < lo {
		return 0, fmt.Errorf("%d is below the minimum %d", n, lo)
	}
	return n, nil
}

func parseFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	return f, nil
}

// parseDuration accepts Go durations ("30s", "1m30s"); a bare number is
// seconds.
func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n <= 0 || math.IsInf(n, 0) || math.IsNaN(n) {
			return 0, fmt.Errorf("%q must be a positive duration", v)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (like 30s or 2m)", v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q must be a positive duration", v)
	}
	return d, nil
}

// parseBool accepts true/false, 1/0 and yes/no, case-insensitively.
func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (true/false, 1/0, yes/no)", v)
}

// parseOnOff accepts on/off, and the spellings parseBool takes, for a
// feature switch.
func parseOnOff(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "on", "true", "1", "yes":
		return true, nil
	case "off", "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("%q is not on or off", v)
}

// parseHost accepts the address the HTTP listener binds: an IP address
// (IPv6 with or without brackets) or a host name. Empty is refused rather
// than read as "all interfaces", so that a variable left empty by a template
// never opens the listener to the network: all interfaces are 0.0.0.0 or ::.
func parseHost(v string) (string, error) {
	if v == "" {
		return "", errors.New("must not be empty: 127.0.0.1 for this host only, 0.0.0.0 or :: for all interfaces")
	}
	h := strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")
	if net.ParseIP(h) != nil {
		return h, nil
	}
	for _, r := range h {
		if !(r == '.' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return "", fmt.Errorf("%q is not an IP address or host name (the port is PORT)", v)
		}
	}
	return h, nil
}

// parseWebhookSecrets splits a list of Standard Webhooks shared secrets
// (separated by spaces or commas) and checks each with l8's one check of
// the form (whsec_ + standard base64 of 24 to 64 bytes). Errors say which
// entry and what is wrong, never the value.
func parseWebhookSecrets(v string) ([]l8.Secret, error) {
	list := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	var (
		out  []l8.Secret
		errs []error
	)
	for i, s := range list {
		sec := l8.SecretFrom(s)
		var bad *l8.SecretError
		if errors.As(sec.Check(), &bad) {
			which := "the secret"
			if len(list) > 1 {
				which = fmt.Sprintf("secret %d of %d", i+1, len(list))
			}
			errs = append(errs, fmt.Errorf("%s %s (aquiferd gen-webhook-secret makes one)", which, bad.Problem))
			continue
		}
		out = append(out, sec)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// parseDurationMax is parseDuration with an upper bound.
func parseDurationMax(v string, hi time.Duration) (time.Duration, error) {
	d, err := parseDuration(v)
	if err == nil && d > hi {
		err = fmt.Errorf("%v is longer than the limit of %v", d, hi)
	}
	return d, err
}
