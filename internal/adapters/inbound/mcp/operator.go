package mcp

import (
	"context"
	"errors"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// The operator's tools: find jobs (aquifer_list_jobs), replay one
// (aquifer_retry_job), see the destinations (aquifer_lanes) and pause or
// resume one. They answer in the shapes of the REST API's GET /jobs, POST
// /jobs/{id}/retry and GET /lanes, and are scoped as REST is: a tenant's
// key sees and retries only its own jobs and may not pause; an admin key,
// open mode and stdio (the operator's own channel) see everything.
//
// Pausing and resuming are tools of their own rather than an action of
// aquifer_lanes: a client may let an agent call read-only tools freely and
// ask before the others, and that works only when reading and changing are
// different tools.

// OpenModeWarning is the warning operator tools carry when they are called
// over streamable HTTP with no API keys configured (the REST API's
// Aquifer-Warning says the same).
const OpenModeWarning = "open mode: no API keys are configured; anyone who can reach this address can list, retry, cancel and pause"

type httpCallKey struct{}

// overHTTP reports whether ctx is a call that came over streamable HTTP.
func overHTTP(ctx context.Context) bool { return ctx.Value(httpCallKey{}) != nil }

// openWarning is the open-mode warning for the call in ctx, "" when it does
// not apply: with API keys configured every HTTP call carries a tenant, and
// over stdio nobody else can reach the server.
func openWarning(ctx context.Context) string {
	if overHTTP(ctx) && app.TenantFrom(ctx) == "" {
		return OpenModeWarning
	}
	return ""
}

// listJobsInput has the query parameters of GET /jobs.
type listJobsInput struct {
	Status         []string `json:"status,omitempty" jsonschema:"Only jobs in these statuses: queued, in_flight, completed, failed (none: every status). The failed jobs are the dead letters."`
	Tenant         string   `json:"tenant,omitempty" jsonschema:"Only this API-key tenant's jobs. An admin key may name any tenant; a tenant's key sees only its own jobs anyway."`
	UserID         string   `json:"user_id,omitempty" jsonschema:"Only jobs submitted with this user_id."`
	Destination    string   `json:"destination,omitempty" jsonschema:"Only jobs sent to this destination: scheme://host[:port] (e.g. https://api.example.com), or pool:<pool_id>."`
	PoolID         string   `json:"pool_id,omitempty" jsonschema:"Only jobs sent to this pool."`
	CreatedAfter   string   `json:"created_after,omitempty" jsonschema:"Only jobs created after this time: RFC 3339 (2026-05-01T12:00:00Z) or Unix milliseconds."`
	CreatedBefore  string   `json:"created_before,omitempty" jsonschema:"Only jobs created before this time: RFC 3339 or Unix milliseconds."`
	ResponseStatus int      `json:"response_status,omitempty" jsonschema:"Only finished jobs whose destination answered this HTTP status."`
	Q              string   `json:"q,omitempty" jsonschema:"Text to find in the URL's path or in the failure reason (case-insensitive)."`
	Cursor         string   `json:"cursor,omitempty" jsonschema:"A previous answer's next_cursor: the page after it."`
	Limit          int      `json:"limit,omitempty" jsonschema:"Jobs per page, 1 to 500; default 50."`
}

// listJobsOutput is GET /jobs's answer.
type listJobsOutput struct {
	Jobs       []httpkit.JobSummary `json:"jobs" jsonschema:"The jobs, newest first."`
	NextCursor *string              `json:"next_cursor" jsonschema:"Pass it as cursor for the next page; null on the last page."`
	Counts     *httpkit.CountsView  `json:"counts,omitempty" jsonschema:"How many jobs match the other filters in each status (whatever status says). On the first page only."`
	Warning    string               `json:"warning,omitempty" jsonschema:"Present in open mode (no API keys configured): anyone who can reach this server can list, retry, cancel and pause."`
}

// retryInput names the job to retry.
type retryInput struct {
	JobID string `json:"job_id" jsonschema:"The id of a finished (failed or completed) job."`
}

// retryOutput is the job queued again.
type retryOutput struct {
	httpkit.JobView
	Warning string `json:"warning,omitempty" jsonschema:"Present in open mode (no API keys configured): anyone who can reach this server can list, retry, cancel and pause."`
}

// lanesInput names at most one destination.
type lanesInput struct {
	Destination string `json:"destination,omitempty" jsonschema:"One destination to show: scheme://host[:port] or pool:<pool_id>. Absent: every destination with a lane, a backlog or a pause."`
}

// lanesOutput is GET /lanes's answer.
type lanesOutput struct {
	Lanes   []httpkit.LaneJSON `json:"lanes" jsonschema:"The destinations, in order."`
	Warning string             `json:"warning,omitempty" jsonschema:"Present in open mode (no API keys configured): anyone who can reach this server can list, retry, cancel and pause."`
}

// pauseInput names the destination to pause.
type pauseInput struct {
	Destination string `json:"destination" jsonschema:"The destination: scheme://host[:port] (e.g. https://api.example.com) or pool:<pool_id>."`
	Reason      string `json:"reason,omitempty" jsonschema:"Why, for whoever looks next (at most 500 characters); shown in the lane and in health."`
}

// resumeInput names the destination to resume.
type resumeInput struct {
	Destination string `json:"destination" jsonschema:"The paused destination: scheme://host[:port] or pool:<pool_id>."`
}

// laneOutput is one destination after a pause or resume.
type laneOutput struct {
	httpkit.LaneJSON
	Warning string `json:"warning,omitempty" jsonschema:"Present in open mode (no API keys configured): anyone who can reach this server can list, retry, cancel and pause."`
}

// jobStatuses are the statuses a listing can filter on.
var jobStatuses = []any{string(domain.StatusQueued), string(domain.StatusInFlight), string(domain.StatusCompleted), string(domain.StatusFailed)}

func (s *Server) addOperatorTools() {
	list := schemaFor[listJobsInput]()
	list.Properties["status"].Items.Enum = jobStatuses
	list.Properties["limit"].Minimum, list.Properties["limit"].Maximum = ptr(1.0), ptr(float64(app.MaxListLimit))
	list.Properties["response_status"].Minimum, list.Properties["response_status"].Maximum = ptr(100.0), ptr(599.0)
	addTool(s, &sdk.Tool{
		Name:  "aquifer_list_jobs",
		Title: "Find jobs",
		Description: "List jobs, newest first, with filters: status (failed jobs are the dead letters: what exhausted its " +
			"retries or was canceled), destination, user_id, tenant, pool_id, created_after/created_before, the " +
			"destination's response_status, and q (text in the URL's path or the failure reason). Each job comes " +
			"without its response body, with its last attempt (when, how long, what answered, which pacing signal) " +
			"and how many attempts its history holds; read one in full with aquifer_get_job. The first page also " +
			"counts the matching jobs in each status. Pages hold up to limit jobs (default 50, at most 500): pass " +
			"next_cursor as cursor for the next one, until it is null.",
		InputSchema: list,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, s.listJobs)

	addTool(s, &sdk.Tool{
		Name:  "aquifer_retry_job",
		Title: "Retry a finished job",
		Description: "Re-queue a finished job (failed, or completed) as a new attempt cycle with its original request " +
			"(as POST /jobs/{id}/retry): it keeps its id and its attempt history, is sent again at its destination's " +
			"pace, and delivers a new webhook when it ends. Returns the job, now queued; wait for it with " +
			"aquifer_get_job. Errors: the job is still queued or running, or its webhook is still being delivered " +
			"(it cannot be retried yet), or the id is unknown or expired.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: false, OpenWorldHint: ptr(true)},
	}, s.retryJob)

	addTool(s, &sdk.Tool{
		Name:  "aquifer_lanes",
		Title: "Destinations and their pace",
		Description: "Show the destinations (lanes) Aquifer sends to, or one of them: the configured ceiling, the pace " +
			"now and which signal set it (x-aqueduct, orca, retry-after, rate-limit, tenant-cap) since when, a " +
			"Retry-After hold, the backlog, attempts in flight, the oldest waiting job's age, the last error, account " +
			"queues, an operator's pause and the outage circuit. Pause one with aquifer_pause_lane.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, s.lanes)

	addTool(s, &sdk.Tool{
		Name:  "aquifer_pause_lane",
		Title: "Pause a destination",
		Description: "Pause a destination during an incident: its jobs are still accepted and stored, but none is sent " +
			"(nor any webhook delivered to it) until aquifer_resume_lane. Attempts already running finish. The pause " +
			"is durable: it survives a restart and holds for every instance sharing the store. Only an admin key may " +
			"pause. Returns the destination's lane.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.pauseLane)

	addTool(s, &sdk.Tool{
		Name:  "aquifer_resume_lane",
		Title: "Resume a paused destination",
		Description: "End a destination's pause: its waiting jobs are sent again, at its pace. Resuming a destination " +
			"that is not paused changes nothing. Only an admin key may resume. Returns the destination's lane.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.resumeLane)
}

func (s *Server) listJobs(ctx context.Context, _ *sdk.CallToolRequest, in listJobsInput) (*sdk.CallToolResult, listJobsOutput, error) {
	q := &app.JobQuery{Tenant: in.Tenant, UserID: in.UserID, PoolID: in.PoolID, Destination: in.Destination,
		ResponseStatus: in.ResponseStatus, Q: in.Q, Cursor: in.Cursor, Limit: in.Limit}
	for _, st := range in.Status {
		q.Statuses = append(q.Statuses, domain.Status(st))
	}
	var err error
	if q.CreatedAfter, err = httpkit.ParseTime("created_after", in.CreatedAfter); err != nil {
		return nil, listJobsOutput{}, s.toolError("aquifer_list_jobs", err)
	}
	if q.CreatedBefore, err = httpkit.ParseTime("created_before", in.CreatedBefore); err != nil {
		return nil, listJobsOutput{}, s.toolError("aquifer_list_jobs", err)
	}
	page, err := s.core.ListJobs(ctx, q)
	if err != nil {
		return nil, listJobsOutput{}, s.toolError("aquifer_list_jobs", err)
	}
	out := listJobsOutput{Jobs: make([]httpkit.JobSummary, len(page.Jobs)), Counts: httpkit.NewCountsView(page.Counts),
		Warning: openWarning(ctx)}
	for i, j := range page.Jobs {
		out.Jobs[i] = httpkit.NewJobSummary(j)
	}
	if page.NextCursor != "" {
		out.NextCursor = &page.NextCursor
	}
	return nil, out, nil
}

func (s *Server) retryJob(ctx context.Context, _ *sdk.CallToolRequest, in retryInput) (*sdk.CallToolResult, retryOutput, error) {
	if in.JobID == "" {
		return nil, retryOutput{}, errors.New("invalid job_id: job_id is required")
	}
	j, err := s.core.Retry(ctx, domain.JobID(in.JobID))
	if err != nil {
		return nil, retryOutput{}, s.toolError("aquifer_retry_job", err)
	}
	return nil, retryOutput{JobView: httpkit.NewJobView(j), Warning: openWarning(ctx)}, nil
}

func (s *Server) lanes(ctx context.Context, _ *sdk.CallToolRequest, in lanesInput) (*sdk.CallToolResult, lanesOutput, error) {
	var views []*app.LaneView
	if dest := strings.TrimSpace(in.Destination); dest != "" {
		v, err := s.core.Lane(ctx, dest)
		if err != nil {
			return nil, lanesOutput{}, s.toolError("aquifer_lanes", err)
		}
		views = []*app.LaneView{v}
	} else {
		var err error
		if views, err = s.core.Lanes(ctx); err != nil {
			return nil, lanesOutput{}, s.toolError("aquifer_lanes", err)
		}
	}
	caller, now := app.TenantFrom(ctx), time.Now()
	out := lanesOutput{Lanes: make([]httpkit.LaneJSON, len(views)), Warning: openWarning(ctx)}
	for i, v := range views {
		out.Lanes[i] = httpkit.NewLaneJSON(v, caller, now)
	}
	return nil, out, nil
}

func (s *Server) pauseLane(ctx context.Context, _ *sdk.CallToolRequest, in pauseInput) (*sdk.CallToolResult, laneOutput, error) {
	return s.laneChange(ctx, "aquifer_pause_lane", in.Destination, func(dest string) (*app.LaneView, error) {
		return s.core.PauseLane(ctx, dest, in.Reason)
	})
}

func (s *Server) resumeLane(ctx context.Context, _ *sdk.CallToolRequest, in resumeInput) (*sdk.CallToolResult, laneOutput, error) {
	return s.laneChange(ctx, "aquifer_resume_lane", in.Destination, func(dest string) (*app.LaneView, error) {
		return s.core.ResumeLane(ctx, dest)
	})
}

func (s *Server) laneChange(ctx context.Context, tool, dest string, change func(string) (*app.LaneView, error)) (*sdk.CallToolResult, laneOutput, error) {
	if dest = strings.TrimSpace(dest); dest == "" {
		return nil, laneOutput{}, errors.New("invalid destination: destination is required (scheme://host[:port] or pool:<pool_id>)")
	}
	v, err := change(dest)
	if err != nil {
		return nil, laneOutput{}, s.toolError(tool, err)
	}
	return nil, laneOutput{LaneJSON: httpkit.NewLaneJSON(v, app.TenantFrom(ctx), time.Now()), Warning: openWarning(ctx)}, nil
}
