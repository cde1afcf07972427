package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/aquiferhq/aquifer/internal/app/tenant"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// The YAML file's tenants: list is read into tenant.Tenant, the type the
// facade and the core use too, and checked by tenant.Check. When any is
// configured, every job, pool and stream endpoint requires
// "Authorization: Bearer <key>", and each tenant sees only its own jobs and
// pools — except a tenant with role: admin, an operator's key, which sees
// and acts on every tenant's jobs and may pause lanes.

// tenantKeys are the YAML keys of a tenant, by the Go field tenant.Check
// names.
var tenantKeys = map[string]string{"Name": "name", "KeySHA256": "key_sha256", "MaxQueued": "max_queued",
	"Rates": "upstreams", "Destinations": "destinations", "WebhookSecrets": "webhook_secret", "Role": "role"}

// HashKey returns the hex SHA-256 of an API key, as key_sha256 holds it.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// loadTenants reads the tenants: list of the YAML file at path. It is read
// directly (not through viper, which lower-cases keys).
func loadTenants(path string) ([]tenant.Tenant, error) {
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
		out  []tenant.Tenant
		errs []error
	)
	for i, entry := range doc.Tenants {
		t, err := decodeTenant(fmt.Sprintf("tenants[%d]", i), entry)
		errs = append(errs, err)
		out = append(out, t)
	}
	// Once a tenant has a name, it is named by it.
	where := func(i int, field string) string {
		if out[i].Name == "" {
			return fmt.Sprintf("YAML key tenants[%d].%s", i, tenantKeys[field])
		}
		return fmt.Sprintf("YAML key tenants.%s.%s", out[i].Name, tenantKeys[field])
	}
	for i, t := range out {
		if t.KeySHA256 == "" {
			// The daemon's tenants authenticate at its HTTP front doors.
			errs = append(errs, fmt.Errorf("%s: is required (aquiferd hash-key prints it)", where(i, "KeySHA256")))
		}
	}
	for _, p := range tenant.Check(out) {
		err := fmt.Errorf("%s: %s", where(p.Index, p.Field), p.Reason)
		if p.Field == "KeySHA256" {
			err = fmt.Errorf("%w (aquiferd hash-key prints it)", err)
		}
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// decodeTenant reads one entry of the list (found at YAML key where):
// values that do not decode, unknown keys and pace caps or destination
// rules that do not parse are reported and left out; what the values mean
// together is tenant.Check's.
func decodeTenant(where string, entry map[string]yaml.Node) (tenant.Tenant, error) {
	var (
		t    tenant.Tenant
		errs []error
	)
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
		case "upstreams":
			var m map[string]any
			if err = node.Decode(&m); err == nil {
				var rerr error
				t.Rates, rerr = parseUpstreams(where+".upstreams", m, domain.DefaultRate)
				errs = append(errs, rerr, tenantAdaptive(where+".upstreams", t.Rates))
			}
		case "destinations":
			var m map[string]any
			if err = node.Decode(&m); err == nil {
				rules, derr := parseDestinationRules(where+".destinations", m)
				if derr == nil {
					t.Destinations = rules
				}
				errs = append(errs, derr)
			}
		case "webhook_secret":
			t.WebhookSecrets, err = decodeWebhookSecrets(node)
		case "role":
			err = node.Decode(&t.Role)
		default:
			err = errors.New("unknown setting")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("YAML key %s.%s: %w", where, field, err))
		}
	}
	return t, errors.Join(errs...)
}

// decodeWebhookSecrets reads a tenant's webhook_secret: one secret (or
// several separated by spaces or commas) or a list of them.
func decodeWebhookSecrets(node yaml.Node) ([]l8.Secret, error) {
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

// tenantAdaptive refuses adaptive: true in a tenant's upstreams: adaptive
// concurrency belongs to the whole lane (the destination's capacity is
// shared by every tenant), so it is set in the global upstreams or
// defaults, and a tenant's entry caps only its own queue.
func tenantAdaptive(where string, rates map[string]domain.Rate) error {
	var errs []error
	for host, r := range rates {
		if r.Adaptive {
			errs = append(errs, fmt.Errorf("YAML key %s.%s.adaptive: set adaptive in the global upstreams or defaults; a tenant's entry caps only its own queue", where, host))
		}
	}
	return errors.Join(errs...)
}
