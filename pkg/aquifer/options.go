package aquifer

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/postgres"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/app/tenant"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Options configure New. Store is required; every other field has a
// default, stated with it. The defaults are aquiferd's.
type Options struct {
	// Store holds the jobs: a built-in one (OpenSQLite, OpenPebble,
	// OpenPostgres, NewMemoryStore) or any value implementing Store.
	// Required.
	//
	// The caller owns the store and closes it after Stop, unless
	// CloseStore is set.
	Store Store
	// CloseStore hands the store to Aquifer: Stop closes it after the core
	// has stopped, and so do New and Start when they fail. Default false.
	CloseStore bool

	// Logger receives Aquifer's logs (components are named: "app",
	// "http", …). Default: no logs.
	Logger *zap.Logger
	// Metrics receives Aquifer's counts. Default NopMetrics; see
	// NewPrometheusMetrics.
	Metrics Metrics
	// Tracer continues each submitter's W3C trace through its job (the
	// traceparent the target and the webhook receiver get) and may emit
	// spans. Default NopTracer: the trace context is passed on, no spans.
	Tracer Tracer

	// Rates gives each destination its pace ceiling. Default: DefaultRate
	// (2 requests per second, one at a time) everywhere. Aquifer slows
	// below the ceiling when a destination signals overload
	// (docs/PACING.md).
	Rates RateTable
	// Retry is the retry policy for 5xx answers and transport errors.
	// Default 5 attempts, 1s, 2s, 4s, 8s apart.
	Retry RetryPolicy
	// RequestTimeout bounds one outbound attempt, body included.
	// Default 30s.
	RequestTimeout time.Duration
	// MaxBodyBytes is the request body limit the HTTP front door enforces
	// (and Health reports); 0 means none.
	MaxBodyBytes int64
	// MaxResponseBytes is how much of a destination's response is kept as
	// the job's result. Default 1 MiB.
	MaxResponseBytes int64
	// LaneWindow is how many ready jobs each destination keeps in memory;
	// the rest wait in the store. Default 256.
	LaneWindow int
	// FailedRetention is how long a failed job — the dead-letter set that
	// ListJobs finds and Retry replays — is kept once nothing is left to
	// do for it (its webhook delivered or given up). Default 2h.
	FailedRetention time.Duration

	// JobBounds limit what a job's Options may ask for (how far ahead it
	// may be scheduled, its retry policy, its timeout); a job asking for
	// more is refused with CodeInvalid naming the field. Zero fields:
	// DefaultOptionBounds.
	JobBounds OptionBounds
	// PriorityAging is how much earlier a job counts as having arrived per
	// priority class above PriorityLow: a high job passes normal jobs that
	// became due less than this before it (low ones: twice this), and no
	// job waits behind higher-priority work longer than that. Default 60s.
	PriorityAging time.Duration
	// MaxBatchBytes is the body limit of the HTTP front door's POST
	// /jobs/batch (each job in it is limited by MaxBodyBytes). 0: 16 MiB;
	// negative: none.
	MaxBatchBytes int64

	// Admission sets the limits above which new jobs are refused
	// (CodeRejected, HTTP 429). Default: none.
	Admission AdmissionLimits
	// Destinations restrict where jobs may point, checked when a job is
	// submitted and, by the default Doer, again when connecting (so DNS
	// cannot be used to get around them). Default: only link-local and
	// cloud metadata addresses are refused.
	Destinations DestinationRules
	// Doer sends every outbound request (to destinations, pool members and
	// webhooks). Default: Aquifer's hardened client, which enforces
	// Destinations at dial time, ignores proxy environment variables and
	// does not decompress responses. A Doer of your own gets the
	// submission-time checks only.
	Doer Doer
	// NetHTTPForPlainHTTP makes the default Doer send http:// requests with
	// Go's net/http Transport, as it sends https://, instead of Aquifer's
	// own HTTP/1.1 client (the default, which costs less CPU per request).
	NetHTTPForPlainHTTP bool

	// L8 signs webhook deliveries with an Ed25519 key (Standard Webhooks
	// v1a, and L8 for receivers that prove their own key). Default: off.
	L8 L8Options
	// WebhookSecrets are Standard Webhooks shared secrets (published form
	// "whsec_" + standard base64 of 24 to 64 bytes; NewWebhookSecret makes
	// one, WebhookSecrets wraps them). With any, every webhook delivery
	// (and drain page) carries one v1 (HMAC-SHA256) signature per secret in
	// its webhook-signature header, which the official Standard Webhooks
	// libraries verify; list the old and the new secret while rotating. A
	// tenant's own Tenant.WebhookSecrets replace them for its jobs.
	// Independent of L8. New reports every secret whose form is bad.
	// Default: none (no v1 signatures; deliveries are unsigned unless L8
	// is on).
	WebhookSecrets []WebhookSecret

	// Tenants are API-key tenants: each sees only its own jobs and pools,
	// within its quota and pace caps; one with Role RoleAdmin is an
	// operator's key, which sees and acts on every tenant's jobs and may
	// pause lanes. None means open mode: every caller sees everything.
	// Front doors authenticate a caller and name its tenant with
	// WithTenant (an admin with WithAdmin).
	Tenants []Tenant

	// Outage tunes the outage circuits: a destination that fails for
	// several jobs in a row has its work held and probed. Default: on,
	// 3 jobs, probes 1s doubling to 5m, jobs held up to 24h.
	Outage OutageOptions

	// Proxy tunes edge-proxy mode; Drain turns on drain mode; Cluster
	// tunes lane leases on a shared (Postgres) store. Zero values use the
	// defaults.
	Proxy   ProxyOptions
	Drain   DrainOptions
	Cluster ClusterOptions

	// Adapters are the front doors Start starts, in order, after the core;
	// Stop stops them in reverse order before the core. See Adapter.
	Adapters []Adapter
}

// Doer sends an outbound HTTP request; *http.Client is one.
type Doer = ports.Doer

// L8Options set Aquifer's signing identity (docs/L8.md). With a key, every
// webhook delivery carries a Standard Webhooks signature, and receivers
// that prove their own key also get L8 signatures. Set PrivateKey or
// KeyPath to turn signing on.
type L8Options struct {
	// PrivateKey is the 64-byte Ed25519 private key to sign with. It takes
	// precedence over KeyPath.
	PrivateKey ed25519.PrivateKey
	// KeyPath is a file holding the raw 64-byte private key; when it does
	// not exist, a new key is generated and saved there (mode 0600).
	KeyPath string
	// TrustDir keeps the receivers that proved their identity, so trust
	// survives restarts. Default: kept in memory only.
	TrustDir string
	// MissTTL is how long a receiver that does not speak L8 is left alone
	// before it is probed again. Default 10m.
	MissTTL time.Duration
}

func (o L8Options) enabled() bool { return o.PrivateKey != nil || o.KeyPath != "" }

// Tenant is an API-key tenant: Name (required, unique; 1–64 letters,
// digits, '.', '_' or '-'), KeySHA256 (the hex SHA-256 of its API key, which
// callers send as "Authorization: Bearer <key>" to the built-in HTTP front
// door; custom front doors may authenticate tenants their own way),
// MaxQueued (its unfinished jobs; 0 = no cap), Rates (its own pace per
// destination, within the destination's shared ceiling; keys as in
// RateTable.Hosts), Destinations (narrowing Options.Destinations for its
// jobs) and WebhookSecrets (signing its deliveries instead of
// Options.WebhookSecrets; none: the global ones). It is the core's own
// type, and aquiferd's YAML tenants: list is read into it.
type Tenant = app.Tenant

// WebhookSecret is a Standard Webhooks shared secret. Printing it never
// shows the key. Make them with WebhookSecrets.
type WebhookSecret = l8.Secret

// WebhookSecrets wraps secrets given in their published form ("whsec_" +
// standard base64 of 24 to 64 bytes) for Options.WebhookSecrets and
// Tenant.WebhookSecrets. It does not fail: New reports each one whose form
// is bad, with where it was given, never its value.
func WebhookSecrets(published ...string) []WebhookSecret {
	if len(published) == 0 {
		return nil
	}
	out := make([]WebhookSecret, len(published))
	for i, s := range published {
		out[i] = l8.SecretFrom(s)
	}
	return out
}

// NewWebhookSecret returns a new random Standard Webhooks shared secret:
// "whsec_" + standard base64 of 32 bytes from crypto/rand. Give it to
// Options.WebhookSecrets (or a Tenant's) and to the receiver.
func NewWebhookSecret() (string, error) { return l8.NewSecret() }

// WithTenant returns ctx acting for the named tenant: Enqueue, Get,
// Subscribe, Wait, Cancel and the operator calls (ListJobs, Retry, …)
// then see only that tenant's jobs, and its quota and caps apply. A front door calls it after authenticating a
// caller. Without it (or with ""), calls act as the operator and see every
// job.
func WithTenant(ctx context.Context, name string) context.Context {
	return app.WithTenant(ctx, name)
}

// RoleAdmin is the Tenant.Role of an operator's key: it sees and acts on
// every tenant's jobs and may pause lanes.
const RoleAdmin = app.RoleAdmin

// WithAdmin returns ctx acting for the named tenant as an admin (a Tenant
// with Role RoleAdmin): its own submissions are scoped to its name like any
// tenant's, but it sees and acts on every tenant's jobs, operations and
// lanes. A front door calls it after authenticating an admin's key.
func WithAdmin(ctx context.Context, name string) context.Context {
	return app.WithAdmin(ctx, name)
}

// validate reports every problem Options has before anything is built.
// Each check is the one its setting has (l8's key and secret checks,
// tenant.Check); validate only says where, in Options' names.
func (o *Options) validate() error {
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("aquifer: Options.Store is required (NewMemoryStore, OpenSQLite, OpenPebble, OpenPostgres, or your own Store)"))
	}
	if o.L8.PrivateKey != nil {
		if err := l8.CheckPrivateKey(o.L8.PrivateKey); err != nil {
			errs = append(errs, fmt.Errorf("aquifer: L8.PrivateKey %w", err))
		}
	}
	errs = append(errs, checkSecrets("aquifer: WebhookSecrets", o.WebhookSecrets)...)
	for _, p := range tenant.Check(o.Tenants) {
		errs = append(errs, fmt.Errorf("aquifer: Tenants[%d]: %s %s", p.Index, p.Field, p.Reason))
	}
	for i, t := range o.Tenants {
		errs = append(errs, checkSecrets(fmt.Sprintf("aquifer: Tenants[%d].WebhookSecrets", i), t.WebhookSecrets)...)
	}
	if _, shared := o.Store.(*postgres.Store); shared && !o.Cluster.Peers.Complete() {
		errs = append(errs, errors.New("aquifer: the Postgres store is shared by every process on its database: set Options.Cluster.Peers to PostgresPeers(store)"))
	}
	for i, a := range o.Adapters {
		if a == nil {
			errs = append(errs, fmt.Errorf("aquifer: Adapters[%d] is nil", i))
		}
	}
	return errors.Join(errs...)
}

// checkSecrets reports each secret of a list that cannot sign as
// where[i], with what is wrong and never the value.
func checkSecrets(where string, secrets []WebhookSecret) []error {
	var errs []error
	for i, s := range secrets {
		if err := s.Check(); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", where, i, err))
		}
	}
	return errs
}
