package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/aquiferhq/aquifer/internal/config"
)

// examplePath is the documented example configuration shipped in deploy/.
const examplePath = "../../deploy/aquifer.example.yml"

// commentedKey matches a commented-out key in the example: "# key:" (or a
// list item "# - key:"), with the key's indentation either before the "#" or
// after "# " (inside a commented-out section). Keys are lower-case setting
// names or host names (host:port included); prose comments never start with
// one followed by a colon.
var commentedKey = regexp.MustCompile(`(?m)^([ \t]*)# ([ \t]*(?:- )?[a-z0-9][a-z0-9_.:-]*:(?:[ \t]|$))`)

// uncommentExample turns every commented-out key of the example into a real
// one, so that the loader checks those keys too.
func uncommentExample(raw string) string {
	return commentedKey.ReplaceAllString(raw, "$1$2")
}

// loadExample loads the file at path through config.Load, with CONFIG_PATH
// as the only environment variable.
func loadExample(path string) (*config.Config, error) {
	return config.Load(func(k string) (string, bool) {
		if k == "CONFIG_PATH" {
			return path, true
		}
		return "", false
	})
}

// flattenYAML maps every key of a YAML document to its dotted path and its
// value (nil for a key without a value or with a nested map; lists are not
// descended into).
func flattenYAML(prefix string, node map[string]any, out map[string]any) {
	for k, v := range node {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		if m, ok := v.(map[string]any); ok {
			out[path] = nil
			flattenYAML(path, m, out)
			continue
		}
		out[path] = v
	}
}

// TestExampleConfigLoads keeps deploy/aquifer.example.yml honest: it loads
// as it stands and with every commented-out key uncommented, and it shows
// every setting with its built-in default — so a new setting without an
// entry in the example fails here.
func TestExampleConfigLoads(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}

	// (a) The file as shipped is accepted, keys and values.
	if cfg, err := loadExample(examplePath); err != nil {
		t.Errorf("config.Load(%s): %v", examplePath, err)
	} else if len(cfg.Rates.Hosts) == 0 {
		t.Error("the example's upstreams section configures no upstream")
	}

	// (b) With the commented-out keys uncommented it is still accepted: a
	// misspelt or misplaced commented-out key would be an unknown key.
	uncommented := uncommentExample(string(raw))
	if uncommented == string(raw) {
		t.Fatal("the example has no commented-out keys; the secrets should be commented out")
	}
	path := filepath.Join(t.TempDir(), "aquifer.example.uncommented.yml")
	if err := os.WriteFile(path, []byte(uncommented), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadExample(path); err != nil {
		t.Errorf("config.Load(%s with its commented-out keys uncommented): %v", examplePath, err)
	}

	// (c) Every setting appears, commented out or not, with its default.
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(uncommented), &doc); err != nil {
		t.Fatalf("uncommented example: %v", err)
	}
	keys := map[string]any{}
	flattenYAML("", doc, keys)
	for _, s := range config.Settings {
		v, ok := keys[s.Key]
		if !ok {
			t.Errorf("%s has no key %s (%s): document it there, with its default %q", examplePath, s.Key, s.Env, s.Default)
			continue
		}
		got := ""
		if v != nil {
			got = fmt.Sprint(v)
		}
		if got != s.Default {
			t.Errorf("%s: %s is %q, but its default is %q (the example shows the defaults)", examplePath, s.Key, got, s.Default)
		}
	}
}

// TestExampleCommentsOutOnlySecrets pins which settings the example leaves
// commented out — the secrets — so that no other setting is hidden there by
// accident. (Whole opt-in sections such as tenants: may be commented out.)
func TestExampleCommentsOutOnlySecrets(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	var asShipped, uncommented map[string]any
	if err := yaml.Unmarshal(raw, &asShipped); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(uncommentExample(string(raw))), &uncommented); err != nil {
		t.Fatal(err)
	}
	shipped, all := map[string]any{}, map[string]any{}
	flattenYAML("", asShipped, shipped)
	flattenYAML("", uncommented, all)
	var got []string
	for _, s := range config.Settings {
		if _, in := all[s.Key]; in {
			if _, on := shipped[s.Key]; !on {
				got = append(got, s.Key)
			}
		}
	}
	sort.Strings(got)
	want := []string{"l8.private_key", "pools.token", "store.postgres_dsn", "webhooks.secret"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("settings commented out in %s = %v, want %v (the secrets only)", examplePath, got, want)
	}
}
