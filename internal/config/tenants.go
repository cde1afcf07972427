package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Tenant is an API-key tenant from the YAML file's tenants: list. When any
// is configured, every job, pool and stream endpoint requires
// "Authorization: Bearer <key>", and each tenant sees only its own jobs and
// pools.
type Tenant struct {
	Name string
	// KeySHA256 is the hex SHA-256 of the tenant's API key (the key itself
	// is never stored; `aquiferd hash-key` prints the hash of a new one).
	KeySHA256 string
	// MaxQueued caps the tenant's unfinished jobs (0: no cap).
	MaxQueued int64
	// Upstreams caps the tenant's own pace per destination ("host" or
	// "host:port" → rate), below the destination's shared ceiling.
	Upstreams map[string]domain.Rate
	// Destinations narrows where the tenant's jobs may go, on top of the
	// global destinations: rules.
	Destinations domain.DestinationRules
	// WebhookSecrets sign the tenant's webhook deliveries (Standard
	// Webhooks v1) instead of AQUIFER_WEBHOOK_SECRET (YAML webhook_secret:
	// one secret or a list).
	WebhookSecrets []string
}

var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// HashKey returns the hex SHA-256 of an API key, as key_sha256 holds it.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// loadTenants reads the tenants: list of the YAML file at path. It is read
// directly (not through viper, which lower-cases keys).
func loadTenants(path string) ([]Tenant, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CONFIG_PATH=%s: %w", path, err)
	}
	var doc struct {
		Tenants []map[string]yaml.Node `yaml:"tenants"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, nil // viper reports YAML syntax errors
	}
	var (
		out  []Tenant
		errs []error
	)
	names, keys := map[string]bool{}, map[string]string{}
	for i, entry := range doc.Tenants {
		where := fmt.Sprintf("tenants[%d]", i)
		t := Tenant{}
		for field, node := range entry {
			var err error
			switch field {
			case "name":
				err = node.Decode(&t.Name)
			case "key_sha256":
				err = node.Decode(&t.KeySHA256)
				t.KeySHA256 = strings.ToLower(strings.TrimSpace(t.KeySHA256))
			case "max_queued":
				err = node.Decode(&t.MaxQueued)
				if err == nil && t.MaxQueued < 0 {
					err = errors.New("must be 0 (no cap) or more")
				}
			case "upstreams":
				var m map[string]map[string]any
				if err = node.Decode(&m); err == nil {
					t.Upstreams = map[string]domain.Rate{}
					for host, r := range m {
						key := strings.ToLower(strings.TrimSpace(host))
						rate, rerr := parseRate(where+".upstreams."+host, toAnyMap(r), domain.DefaultRate)
						if rerr != nil {
							errs = append(errs, rerr)
							continue
						}
						if key == "" || strings.Contains(key, "/") {
							errs = append(errs, fmt.Errorf("YAML key %s.upstreams.%s: must be a host or host:port", where, host))
							continue
						}
						t.Upstreams[key] = rate
					}
				}
			case "destinations":
				var m map[string]any
				if err = node.Decode(&m); err == nil {
					t.Destinations, err = parseDestinationRules(where+".destinations", m)
					if err != nil {
						errs = append(errs, err)
						err = nil
					}
				}
			case "webhook_secret":
				t.WebhookSecrets, err = decodeWebhookSecrets(node)
			default:
				err = errors.New("unknown setting")
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("YAML key %s.%s: %w", where, field, err))
			}
		}
		if t.Name != "" {
			where = "tenants." + t.Name
		}
		switch {
		case !tenantName.MatchString(t.Name):
			errs = append(errs, fmt.Errorf("YAML key %s.name: a tenant needs a name of 1–64 letters, digits, '.', '_' or '-'", where))
		case names[t.Name]:
			errs = append(errs, fmt.Errorf("YAML key %s: tenant %q is listed twice", where, t.Name))
		}
		names[t.Name] = true
		if b, err := hex.DecodeString(t.KeySHA256); err != nil || len(b) != sha256.Size {
			errs = append(errs, fmt.Errorf("YAML key %s.key_sha256: must be the 64-hex-digit SHA-256 of the tenant's API key (aquiferd hash-key prints it)", where))
		} else if other, dup := keys[t.KeySHA256]; dup {
			errs = append(errs, fmt.Errorf("YAML key %s.key_sha256: the same key as tenant %q", where, other))
		} else {
			keys[t.KeySHA256] = t.Name
		}
		out = append(out, t)
	}
	return out, errors.Join(errs...)
}

func toAnyMap(m map[string]any) any { return m }

// decodeWebhookSecrets reads a tenant's webhook_secret: one secret (or
// several separated by spaces or commas) or a list of them.
func decodeWebhookSecrets(node yaml.Node) ([]string, error) {
	var list []string
	switch node.Kind {
	case yaml.ScalarNode:
		var one string
		if err := node.Decode(&one); err != nil {
			return nil, errors.New("must be a whsec_ secret or a list of them")
		}
		list = []string{one}
	case yaml.SequenceNode:
		if err := node.Decode(&list); err != nil {
			return nil, errors.New("must be a whsec_ secret or a list of them")
		}
	default:
		return nil, errors.New("must be a whsec_ secret or a list of them")
	}
	secrets, err := parseWebhookSecrets(strings.Join(list, ","))
	if err == nil && len(secrets) == 0 {
		err = errors.New("is empty; leave it out to use AQUIFER_WEBHOOK_SECRET")
	}
	return secrets, err
}
