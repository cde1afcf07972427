package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"sort"

	"github.com/go-chi/chi/v5"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// What operators do over REST: list jobs (GET /jobs), retry one (POST
// /jobs/{id}/retry), retry or cancel a filtered set in bulk (POST
// /jobs/retry, /jobs/cancel) and watch the operation (GET /operations).
// Lanes are in lanes.go.

// OpenModeWarning is the Aquifer-Warning of every operator endpoint's
// response while no API keys are configured.
const OpenModeWarning = "open mode: no API keys are configured; anyone who can reach this address can list, retry, cancel and pause"

// warnOpen marks the responses of operator endpoints in open mode, so a
// client (the CLI, a script) can say that the instance is unprotected.
func (h *Handler) warnOpen(next http.Handler) http.Handler {
	if h.opts.Auth.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Aquifer-Warning", OpenModeWarning)
		next.ServeHTTP(w, r)
	})
}

// jobListJSON is the answer of GET /jobs.
type jobListJSON struct {
	Jobs       []httpkit.JobSummary `json:"jobs"`
	NextCursor *string              `json:"next_cursor"`
	Counts     *httpkit.CountsView  `json:"counts,omitempty"`
}

// listJobs serves GET /jobs: a page of the jobs the query parameters
// select, newest first.
func (h *Handler) listJobs(w http.ResponseWriter, r *http.Request) {
	q, err := jobQuery(r.URL.Query())
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	page, err := h.core.ListJobs(r.Context(), q)
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	out := jobListJSON{Jobs: make([]httpkit.JobSummary, len(page.Jobs)), Counts: httpkit.NewCountsView(page.Counts)}
	for i, j := range page.Jobs {
		out.Jobs[i] = httpkit.NewJobSummary(j)
	}
	if page.NextCursor != "" {
		out.NextCursor = &page.NextCursor
	}
	writeJSON(w, http.StatusOK, out)
}

// listParams are GET /jobs's query parameters; status alone may repeat.
var listParams = map[string]bool{"status": true, "tenant": true, "user_id": true, "destination": true, "pool_id": true,
	"created_after": true, "created_before": true, "response_status": true, "q": true, "limit": true, "cursor": true}

// jobQuery reads GET /jobs's query parameters. An unknown parameter, or
// one given twice, is an error naming it: a misspelt filter must not
// silently list everything.
func jobQuery(v url.Values) (*app.JobQuery, error) {
	names := make([]string, 0, len(v))
	for k := range v {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		switch {
		case !listParams[k]:
			return nil, domain.Invalid(k, "unknown query parameter %q (GET /jobs takes status, tenant, user_id, destination, pool_id, created_after, created_before, response_status, q, limit, cursor)", k)
		case k != "status" && len(v[k]) > 1:
			return nil, domain.Invalid(k, "query parameter %s is given %d times; give it once", k, len(v[k]))
		}
	}
	q := &app.JobQuery{Tenant: v.Get("tenant"), UserID: v.Get("user_id"), Destination: v.Get("destination"),
		PoolID: v.Get("pool_id"), Q: v.Get("q"), Cursor: v.Get("cursor")}
	for _, s := range v["status"] {
		for _, one := range httpkit.SplitList(s) {
			q.Statuses = append(q.Statuses, domain.Status(one))
		}
	}
	var err error
	if q.CreatedAfter, err = httpkit.ParseTime("created_after", v.Get("created_after")); err != nil {
		return nil, err
	}
	if q.CreatedBefore, err = httpkit.ParseTime("created_before", v.Get("created_before")); err != nil {
		return nil, err
	}
	if s := v.Get("response_status"); s != "" {
		if q.ResponseStatus, err = httpkit.Int("response_status", s); err != nil {
			return nil, err
		}
		if q.ResponseStatus == 0 {
			return nil, domain.Invalid("response_status", "response_status must be an HTTP status, 100–599")
		}
	}
	if s := v.Get("limit"); s != "" {
		if q.Limit, err = httpkit.Int("limit", s); err != nil {
			return nil, err
		}
		if q.Limit == 0 {
			return nil, domain.Invalid("limit", "limit must be 1–%d", app.MaxListLimit)
		}
	}
	return q, nil
}

// retryJob serves POST /jobs/{id}/retry: 200 with the job queued again, 409
// when it has not finished (or its webhook is still being delivered), 404
// when unknown.
func (h *Handler) retryJob(w http.ResponseWriter, r *http.Request) {
	j, err := h.core.Retry(r.Context(), domain.JobID(chi.URLParam(r, "id")))
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, httpkit.NewJobView(j))
}

// bulkJSON is the body of POST /jobs/retry and /jobs/cancel.
type bulkJSON struct {
	// Filter selects the jobs; required, so that acting on every job is
	// asked for ({}), never the result of a body that lost its filter.
	Filter *httpkit.FilterJSON `json:"filter"`
	DryRun bool                `json:"dry_run"`
}

// bulkBodyLimit bounds bulk bodies, which are small.
const bulkBodyLimit = 64 << 10

func (h *Handler) bulkRetry(w http.ResponseWriter, r *http.Request) {
	h.bulk(w, r, domain.OpKindRetry)
}

func (h *Handler) bulkCancel(w http.ResponseWriter, r *http.Request) {
	h.bulk(w, r, domain.OpKindCancel)
}

// bulk starts a bulk operation of kind: a dry run answers 200 with the
// count, a real run 202 with the operation and its Location.
func (h *Handler) bulk(w http.ResponseWriter, r *http.Request, kind domain.OperationKind) {
	var in bulkJSON
	if !httpkit.DecodeStrictBody(w, r, &in, bulkBodyLimit, false) {
		return
	}
	if in.Filter == nil {
		writeJSON(w, http.StatusBadRequest, httpkit.ErrorBody{Field: "filter",
			Error: "filter is required: the jobs to " + string(kind) + " ({} selects every one)"})
		return
	}
	q, err := in.Filter.Query("filter.")
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	res, err := h.core.StartOperation(r.Context(), kind, q, in.DryRun)
	if err != nil {
		h.writeDomainError(w, r, inFilter(err))
		return
	}
	if res.DryRun {
		writeJSON(w, http.StatusOK, struct {
			DryRun bool  `json:"dry_run"`
			Count  int64 `json:"count"`
		}{true, res.Count})
		return
	}
	w.Header().Set("Location", "/operations/"+url.PathEscape(res.Operation.ID))
	writeJSON(w, http.StatusAccepted, struct {
		Operation httpkit.OperationView `json:"operation"`
	}{httpkit.NewOperationView(res.Operation)})
}

// filterFields are the fields of a bulk body's filter.
var filterFields = map[string]bool{"status": true, "tenant": true, "user_id": true, "destination": true, "pool_id": true,
	"created_after": true, "created_before": true, "response_status": true, "q": true}

// inFilter names a field of the filter the core found wrong by its place
// in the body: "status" is "filter.status".
func inFilter(err error) error {
	var de *domain.Error
	if !errors.As(err, &de) || !filterFields[de.Field] {
		return err
	}
	c := *de
	c.Field = "filter." + de.Field
	return &c
}

func (h *Handler) getOperation(w http.ResponseWriter, r *http.Request) {
	op, err := h.core.GetOperation(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, httpkit.NewOperationView(op))
}

func (h *Handler) listOperations(w http.ResponseWriter, r *http.Request) {
	ops, err := h.core.Operations(r.Context())
	if err != nil {
		h.writeDomainError(w, r, err)
		return
	}
	out := make([]httpkit.OperationView, len(ops))
	for i, op := range ops {
		out[i] = httpkit.NewOperationView(op)
	}
	writeJSON(w, http.StatusOK, map[string]any{"operations": out})
}
