// Command webhook-receiver is a minimal webhook receiver for Aquifer that
// checks every delivery's signature and speaks L8, so Aquifer completes the
// handshake with it and signs deliveries with both header sets.
//
//	go run ./examples/webhook-receiver -aquifer http://127.0.0.1:8080 -listen 127.0.0.1:9000
//
// then submit a job with "webhook_url": "http://127.0.0.1:9000/hook".
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/aquiferhq/aquifer/pkg/aquifer/webhookverify"
)

func main() {
	aquifer := flag.String("aquifer", "http://127.0.0.1:8080", "Aquifer's base URL, to fetch its public key from /.well-known/l8")
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	keyPath := flag.String("key", "receiver.key", "this receiver's Ed25519 key file (created, mode 0600, if missing)")
	flag.Parse()

	aquiferKey, err := fetchKey(*aquifer)
	if err != nil {
		log.Fatalf("fetching Aquifer's public key: %v", err)
	}
	priv, err := loadOrCreateKey(*keyPath)
	if err != nil {
		log.Fatal(err)
	}
	h, err := newHandler(aquiferKey, priv, func(format string, args ...any) { log.Printf(format, args...) })
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s; Aquifer key %s", *listen, aquiferKey)
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// newHandler serves the L8 endpoints and POST /hook, which accepts only
// deliveries signed by aquiferKey.
func newHandler(aquiferKey string, priv ed25519.PrivateKey, logf func(string, ...any)) (http.Handler, error) {
	verifier, err := webhookverify.New(aquiferKey, webhookverify.Options{})
	if err != nil {
		return nil, err
	}
	receiver, err := webhookverify.NewReceiver(priv, webhookverify.ReceiverOptions{SenderKey: aquiferKey})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	receiver.Mount(mux)
	mux.HandleFunc("POST /hook", func(w http.ResponseWriter, r *http.Request) {
		body, d, err := verifier.VerifyRequest(r, 1<<20)
		if err != nil {
			logf("rejected delivery: %v", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var result struct {
			JobID  string `json:"job_id"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal(body, &result); err != nil {
			http.Error(w, "not a job result", http.StatusBadRequest)
			return
		}
		logf("job %s %s (verified by %s, delivery %s)", result.JobID, result.Status, d.Scheme, d.ID)
		w.WriteHeader(http.StatusNoContent)
	})
	return mux, nil
}

func fetchKey(base string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/.well-known/l8", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var meta struct {
		PublicKey string `json:"public_key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&meta); err != nil || resp.StatusCode != http.StatusOK || meta.PublicKey == "" {
		return "", fmt.Errorf("%s/.well-known/l8 answered %d", base, resp.StatusCode)
	}
	return meta.PublicKey, nil
}

func loadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	raw, err := os.ReadFile(path)
	if err == nil {
		if len(raw) != ed25519.PrivateKeySize {
			return nil, fmt.Errorf("%s holds %d bytes, want %d", path, len(raw), ed25519.PrivateKeySize)
		}
		return ed25519.PrivateKey(raw), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return priv, os.WriteFile(path, priv, 0o600)
}
