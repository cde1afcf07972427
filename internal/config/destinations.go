package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/viper"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// The destinations section of the YAML file holds the global destination
// rules (docs/CONFIGURATION.md, "Destination rules and SSRF"):
//
//	destinations:
//	  allow: [api.vendor-a.com, "*.vendor-b.com", 203.0.113.0/24]
//	  deny: [10.0.0.0/8]
//	  deny_private: true   # also AQUIFER_DENY_PRIVATE
//
// deny_private is a Setting like any other (the environment wins over the
// file); allow and deny are lists and live in the YAML file only.

// denyPrivateSetting is destinations.deny_private, listed in Settings.
var denyPrivateSetting = Setting{
	Key: "destinations.deny_private", Env: "AQUIFER_DENY_PRIVATE", Default: "false",
	Doc: "Refuse private and loopback destinations (127/8, ::1, RFC 1918, 100.64/10, fc00::/7, link-local multicast) at submission and at dial time, for job URLs, pool members and webhooks. true/false.",
	apply: func(c *Config, v string) (err error) {
		c.Destinations.DenyPrivate, err = parseBool(v)
		return
	},
}

// isDestinationsKey reports whether k (viper form) belongs to the
// destinations section; loadDestinations reports unknown keys inside it.
func isDestinationsKey(k string) bool {
	return k == "destinations" || strings.HasPrefix(k, "destinations::")
}

// loadDestinations reads the allow and deny lists of the destinations
// section into d, whose DenyPrivate the settings have already set, and
// checks that the rules compile.
func loadDestinations(v *viper.Viper, d *domain.DestinationRules) error {
	raw := v.Get("destinations")
	if raw == nil || raw == "" {
		return nil
	}
	rules, err := parseDestinationRules("destinations", raw)
	if err != nil {
		return err
	}
	d.Allow, d.Deny = rules.Allow, rules.Deny // deny_private: the setting, where the environment wins
	return nil
}

// parseDestinationRules reads one destinations map ({allow, deny,
// deny_private}) found at YAML key where, and validates it: every invalid
// entry is reported, named. The tenants section can use it for a tenant's
// own rules.
func parseDestinationRules(where string, raw any) (domain.DestinationRules, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return domain.DestinationRules{}, fmt.Errorf("YAML key %s: must be a map with allow, deny and deny_private", where)
	}
	var (
		r    domain.DestinationRules
		errs []error
	)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var err error
		switch strings.ToLower(k) {
		case "allow":
			r.Allow, err = destinationList(m[k])
		case "deny":
			r.Deny, err = destinationList(m[k])
		case "deny_private":
			r.DenyPrivate, err = parseBool(fmt.Sprint(m[k]))
		default:
			err = errors.New("unknown setting")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("YAML key %s.%s: %w", where, k, err))
		}
	}
	if len(errs) == 0 {
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("YAML key %s: %w", where, err))
		}
	}
	return r, errors.Join(errs...)
}

// destinationList accepts a YAML list of entries or one string of
// comma-separated entries.
func destinationList(raw any) ([]string, error) {
	switch x := raw.(type) {
	case nil:
		return nil, nil
	case string:
		var out []string
		for e := range strings.SplitSeq(x, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
		return out, nil
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			switch e.(type) {
			case map[string]any, []any, nil:
				return nil, fmt.Errorf("entry %v: must be a host name, IP address or CIDR range", e)
			}
			out = append(out, fmt.Sprint(e))
		}
		if len(out) == 0 {
			return nil, nil
		}
		return out, nil
	}
	return nil, errors.New("must be a list of host names, IP addresses and CIDR ranges")
}
