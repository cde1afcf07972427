package config_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/config"
)

// TestConfigurationDocMatchesSettings keeps docs/CONFIGURATION.md honest:
// every setting is documented with its YAML key and default, and every
// variable the doc mentions exists.
func TestConfigurationDocMatchesSettings(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	known := map[string]bool{"CONFIG_PATH": true}
	for _, s := range config.Settings {
		known[s.Env] = true
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(s.Env) + "` \\| `" + regexp.QuoteMeta(s.Key) + "` \\| ([^|]*) \\|")
		m := row.FindStringSubmatch(doc)
		if m == nil {
			t.Errorf("docs/CONFIGURATION.md has no table row for %s (YAML key %s)", s.Env, s.Key)
			continue
		}
		def := strings.TrimSpace(m[1])
		if want := "`" + s.Default + "`"; s.Default != "" && def != want {
			t.Errorf("%s: documented default %s, code default %s", s.Env, def, want)
		}
		if s.Default == "" && def != "(empty)" {
			t.Errorf("%s: documented default %s, code default is empty", s.Env, def)
		}
	}
	for _, v := range regexp.MustCompile("`((?:AQUIFER|L8)_[A-Z0-9_]+|PORT|DB_PATH|CONFIG_PATH)`").FindAllStringSubmatch(doc, -1) {
		if !known[v[1]] {
			t.Errorf("docs/CONFIGURATION.md documents %s, which no setting reads", v[1])
		}
	}
}
