package aquifer

import (
	"encoding/base64"

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
	var key string
	if o.PrivateKey != nil {
		key = base64.StdEncoding.EncodeToString(o.PrivateKey)
	}
	id, source, err := l8.LoadIdentity(key, o.KeyPath)
	if err != nil {
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
	if source != l8.FromEnv {
		fields = append(fields, zap.String("key_path", o.KeyPath))
	}
	log.Info("L8 identity loaded", fields...)
	return cfg, nil
}
