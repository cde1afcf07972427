package config_test

import (
	"testing"

	"github.com/aquiferhq/aquifer/internal/config"
)

func TestOTelDefaultsOff(t *testing.T) {
	t.Parallel()
	// Off, no endpoint is resolved: the SDK variables are not even read.
	cfg := mustLoad(t, envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}))
	if cfg.OTelExporter != "off" || cfg.OTelEndpoint != "" || cfg.OTelServiceName != "aquiferd" {
		t.Errorf("exporter %q endpoint %q service %q, want off, none, aquiferd", cfg.OTelExporter, cfg.OTelEndpoint, cfg.OTelServiceName)
	}
}

func TestOTelEndpointResolution(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"nothing set", nil, config.DefaultOTLPEndpoint},
		{"base URL gets the traces path", map[string]string{"AQUIFER_OTEL_ENDPOINT": "http://collector:4318"}, "http://collector:4318/v1/traces"},
		{"root path gets the traces path", map[string]string{"AQUIFER_OTEL_ENDPOINT": "https://collector:4318/"}, "https://collector:4318/v1/traces"},
		{"a path is kept", map[string]string{"AQUIFER_OTEL_ENDPOINT": "https://otlp.example.com/api/traces"}, "https://otlp.example.com/api/traces"},
		{"traces variable as it is", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom"}, "http://c:4318/custom"},
		{"generic variable plus v1/traces", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/otlp/"}, "http://c:4318/otlp/v1/traces"},
		{"traces variable wins over the generic one", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/v1/traces"}, "http://b:4318/v1/traces"},
		{"Aquifer's setting wins over both", map[string]string{"AQUIFER_OTEL_ENDPOINT": "http://mine:4318",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/v1/traces"},
			"http://mine:4318/v1/traces"},
	} {
		env := map[string]string{"AQUIFER_OTEL_EXPORTER": "otlp"}
		for k, v := range c.env {
			env[k] = v
		}
		cfg := mustLoad(t, envOf(env))
		if cfg.OTelEndpoint != c.want {
			t.Errorf("%s: endpoint %q, want %q", c.name, cfg.OTelEndpoint, c.want)
		}
	}
}

func TestOTelSettingsFromYAML(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, "otel:\n  exporter: otlp\n  endpoint: http://jaeger:4318\n  service_name: aquiferd-eu\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OTelExporter != "otlp" || cfg.OTelEndpoint != "http://jaeger:4318/v1/traces" || cfg.OTelServiceName != "aquiferd-eu" {
		t.Errorf("got %q %q %q", cfg.OTelExporter, cfg.OTelEndpoint, cfg.OTelServiceName)
	}
}

func TestOTelErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"AQUIFER_OTEL_EXPORTER": "jaeger"}, []string{"AQUIFER_OTEL_EXPORTER", `"jaeger" is not one of off, otlp`}},
		{map[string]string{"AQUIFER_OTEL_ENDPOINT": "collector:4318"}, []string{"AQUIFER_OTEL_ENDPOINT", "must be an absolute http or https URL"}},
		{map[string]string{"AQUIFER_OTEL_ENDPOINT": "grpc://collector:4317"}, []string{"AQUIFER_OTEL_ENDPOINT", "absolute http or https URL"}},
		{map[string]string{"AQUIFER_OTEL_ENDPOINT": "http://c:4318/v1/traces?x=1"}, []string{"AQUIFER_OTEL_ENDPOINT", "without query or fragment"}},
		{map[string]string{"AQUIFER_OTEL_SERVICE_NAME": ""}, []string{"AQUIFER_OTEL_SERVICE_NAME", "must not be empty"}},
		{map[string]string{"AQUIFER_OTEL_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"},
			[]string{"OTEL_EXPORTER_OTLP_ENDPOINT (read because AQUIFER_OTEL_EXPORTER=otlp and AQUIFER_OTEL_ENDPOINT is unset)", "absolute http or https URL"}},
		{map[string]string{"AQUIFER_OTEL_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "://"},
			[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "absolute http or https URL"}},
	} {
		cfg, err := config.Load(envOf(c.env))
		wantErr(t, cfg, err, c.want...)
	}
}
