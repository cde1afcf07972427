package aquifer_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

func testDatabaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// openPostgres opens the built-in Postgres store in a schema of its own,
// dropped when the test ends.
func openPostgres(t *testing.T) aquifer.Store {
	t.Helper()
	if os.Getenv("AQUIFER_TEST_POSTGRES") == "skip" {
		t.Skip("AQUIFER_TEST_POSTGRES=skip")
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "aqfacade_" + hex.EncodeToString(b)
	s, err := aquifer.OpenPostgres(t.Context(), aquifer.PostgresOptions{DSN: testDatabaseURL(), Schema: schema, InstanceID: "facade-1"})
	if err != nil {
		t.Fatalf("OpenPostgres (run scripts/test-deps.sh, or set TEST_DATABASE_URL): %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, testDatabaseURL()); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			conn.Close(ctx)
		}
	})
	return s
}

// TestClusterModeIsExplicit: a Postgres store is shared, so New asks for its
// cluster roles instead of guessing; with them, jobs run.
func TestClusterModeIsExplicit(t *testing.T) {
	t.Parallel()
	store := openPostgres(t)
	if _, err := aquifer.New(aquifer.Options{Store: store}); err == nil || !strings.Contains(err.Error(), "PostgresPeers") {
		t.Fatalf("New with a Postgres store and no Cluster.Peers: %v, want an error naming PostgresPeers", err)
	}
	if _, err := aquifer.PostgresPeers(aquifer.NewMemoryStore()); err == nil {
		t.Fatal("PostgresPeers accepted a memory store")
	}
	peers, err := aquifer.PostgresPeers(store)
	if err != nil {
		t.Fatal(err)
	}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer target.Close()
	aq, err := aquifer.New(aquifer.Options{Store: store, Cluster: aquifer.ClusterOptions{Peers: peers}})
	if err != nil {
		t.Fatal(err)
	}
	if err := aq.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = aq.Stop(context.Background()) }()
	res, err := aq.Enqueue(t.Context(), &aquifer.JobRequest{UserID: "u", IdempotentKey: "k", URL: target.URL + "/x", Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	j, err := aq.Wait(ctx, res.JobID)
	if err != nil || j.Status != aquifer.StatusCompleted {
		t.Fatalf("Wait = %+v, %v", j, err)
	}
	if h := aq.Health(t.Context()); h.Cluster == nil || h.Cluster.InstanceID != "facade-1" {
		t.Fatalf("health shows no cluster: %+v", h.Cluster)
	}
}
