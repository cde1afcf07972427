package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/aquiferhq/aquifer/internal/config"
)

// hostAccepted reports whether aquiferd takes v as AQUIFER_HOST.
func hostAccepted(t *testing.T, v string) bool {
	t.Helper()
	_, err := config.Load(func(k string) (string, bool) {
		if k == "AQUIFER_HOST" {
			return v, true
		}
		return "", false
	})
	return err == nil
}

// TestImageListensAndChecksItsHealth keeps deploy/Dockerfile consistent:
// the image sets AQUIFER_HOST to all interfaces (aquiferd's default is
// loopback, which nothing outside a container reaches), and its
// HEALTHCHECK runs `probe` with the binary the image installs.
func TestImageListensAndChecksItsHealth(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := strings.ReplaceAll(string(raw), "\\\n", " ")
	copyTo := regexp.MustCompile(`(?m)^COPY --from=build /out/aquiferd (\S+)$`).FindStringSubmatch(df)
	if copyTo == nil {
		t.Fatal("no COPY of the binary in deploy/Dockerfile")
	}
	bin := copyTo[1]
	if !regexp.MustCompile(`(?m)^ENV .*\bAQUIFER_HOST=0\.0\.0\.0\b`).MatchString(df) {
		t.Error("deploy/Dockerfile does not set AQUIFER_HOST=0.0.0.0")
	}
	if !regexp.MustCompile(`(?m)^HEALTHCHECK .*CMD \["` + regexp.QuoteMeta(bin) + `", "probe"\]$`).MatchString(df) {
		t.Errorf("deploy/Dockerfile has no HEALTHCHECK CMD [%q, \"probe\"]", bin)
	}
	if !strings.Contains(df, `ENTRYPOINT ["`+bin+`"]`) {
		t.Errorf("the ENTRYPOINT is not %s", bin)
	}

	// compose.yaml: the same binary as its health check, all interfaces.
	raw, err = os.ReadFile("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Daemon struct {
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"x-aquiferd"`
		Env map[string]string `yaml:"x-aquiferd-env"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatal(err)
	}
	if want := []string{"CMD", bin, "probe"}; !slices.Equal(compose.Daemon.Healthcheck.Test, want) {
		t.Errorf("compose healthcheck %q, want %q", compose.Daemon.Healthcheck.Test, want)
	}
	if h := compose.Env["AQUIFER_HOST"]; h != "0.0.0.0" || !hostAccepted(t, h) {
		t.Errorf("compose AQUIFER_HOST %q, want 0.0.0.0", h)
	}
}

// TestManifestsListenOnThePod: the kubelet's probes and the Service reach
// the pod's IP, so each manifest sets AQUIFER_HOST to all interfaces.
func TestManifestsListenOnThePod(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"../../deploy/kubernetes/sqlite/deployment.yaml", "../../deploy/kubernetes/postgres/statefulset.yaml"} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name string `yaml:"name"`
							Env  []struct {
								Name  string `yaml:"name"`
								Value string `yaml:"value"`
							} `yaml:"env"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := yaml.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		host := "(unset)"
		for _, c := range m.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if c.Name == "aquiferd" && e.Name == "AQUIFER_HOST" {
					host = e.Value
				}
			}
		}
		if host != "0.0.0.0" || !hostAccepted(t, host) {
			t.Errorf("%s: AQUIFER_HOST %s, want 0.0.0.0", path, host)
		}
	}
}

// TestSystemdSetsTheHost: the unit and its environment file say where the
// service listens, with a value aquiferd accepts.
func TestSystemdSetsTheHost(t *testing.T) {
	t.Parallel()
	for path, re := range map[string]*regexp.Regexp{
		"../../deploy/systemd/aquiferd.service": regexp.MustCompile(`(?m)^Environment=AQUIFER_HOST=(\S+)$`),
		"../../deploy/systemd/aquiferd.env":     regexp.MustCompile(`(?m)^AQUIFER_HOST=(\S+)$`),
	} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindStringSubmatch(string(raw))
		if m == nil || !hostAccepted(t, m[1]) {
			t.Errorf("%s: no valid AQUIFER_HOST (%v)", path, m)
		}
	}
}
