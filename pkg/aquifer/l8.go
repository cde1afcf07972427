package aquifer

import (
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// loadL8 loads (or creates) the signing identity o asks for and opens the
// trust directory; the zero L8Options turn signing off.
func loadL8(o L8Options, log *zap.Logger) (app.L8Config, error) {
	if !o.enabled() {
		return app.L8Config{}, nil
	}
	var id *l8.Identity
	var source l8.KeySource
	var err error
	if o.PrivateKey != nil {
		id, source = l8.NewIdentity(o.PrivateKey), l8.FromOptions // checked by Options.validate
	} else if id, source, err = l8.LoadIdentity("", o.KeyPath); err != nil {
		return app.L8Config{}, err
	}
	cfg := app.L8Config{Identity: id, MissTTL: o.MissTTL}
	if o.TrustDir != "" {
		trust, err := l8.NewFileTrust(o.TrustDir)
		if err != nil {
			return app.L8Config{}, err
		}
		cfg.Trust = trust
	}
	fields := []zap.Field{zap.String("source", string(source)), zap.String("public_key", id.PublicKeyBase64()), zap.String("trust_dir", o.TrustDir)}
	if source != l8.FromOptions {
		fields = append(fields, zap.String("key_path", o.KeyPath))
	}
	log.Info("L8 identity loaded", fields...)
	return cfg, nil
}

// logSigning says in the log which Standard Webhooks signatures deliveries
// carry, counting secrets, never showing them.
func logSigning(o Options) {
	own := 0
	for _, t := range o.Tenants {
		if len(t.WebhookSecrets) > 0 {
			own++
		}
	}
	if len(o.WebhookSecrets) > 0 || own > 0 {
		o.Logger.Info("Standard Webhooks v1 signing on (shared secrets)", zap.Int("secrets", len(o.WebhookSecrets)),
			zap.Int("tenants_with_own_secrets", own), zap.Bool("v1a", o.L8.enabled()))
	}
}
