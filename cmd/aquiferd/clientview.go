package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// What the client mode reads of the API's answers, to print them as
// tables. Only what a table shows is decoded; -o json prints the answer
// itself, so a field added to the API reaches scripts without a change
// here.

// apiTime is a time in an answer: unix milliseconds (as GET /jobs/{id}
// has always sent them) or an RFC 3339 string; null, 0 and "" are none.
type apiTime struct{ time.Time }

func (t *apiTime) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	switch {
	case s == "null" || s == `""` || s == "0":
		t.Time = time.Time{}
		return nil
	case strings.HasPrefix(s, `"`):
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		v, err := time.Parse(time.RFC3339Nano, str)
		if err != nil {
			return fmt.Errorf("time %q is not RFC 3339", str)
		}
		t.Time = v
		return nil
	}
	ms, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("time %s is neither unix milliseconds nor RFC 3339", s)
	}
	t.Time = time.UnixMilli(int64(ms))
	return nil
}

// attemptView is one entry of a job's history.
type attemptView struct {
	At         apiTime `json:"at"`
	DurationMS float64 `json:"duration_ms"`
	Status     int     `json:"status"`
	Error      string  `json:"error"`
	Signal     string  `json:"signal"`
	Member     string  `json:"member"`
}

// jobView is a job of GET /jobs/{id}, or a summary of GET /jobs.
type jobView struct {
	JobID          string  `json:"job_id"`
	Status         string  `json:"status"`
	URL            string  `json:"url"`
	Method         string  `json:"method"`
	CreatedAt      apiTime `json:"created_at"`
	UpdatedAt      apiTime `json:"updated_at"`
	Tenant         string  `json:"tenant"`
	UserID         string  `json:"user_id"`
	PoolID         string  `json:"pool_id"`
	WebhookURL     string  `json:"webhook_url"`
	Attempts       int     `json:"attempts"`
	ResponseStatus *int    `json:"response_status"`
	Body           *string `json:"body"`
	BodyEncoding   string  `json:"body_encoding"`
	BodyTruncated  bool    `json:"body_truncated"`
	ContentType    string  `json:"content_type"`
	Reason         string  `json:"reason"`
	Webhook        *struct {
		Status         string `json:"status"`
		Attempts       int    `json:"attempts"`
		ResponseStatus int    `json:"response_status"`
		Reason         string `json:"reason"`
	} `json:"webhook"`
	History     []attemptView `json:"history"`
	LastAttempt *attemptView  `json:"last_attempt"`

	// Job options (RFC 3339 times; omitted when the job has none).
	Scheduled      bool    `json:"scheduled"`
	NotBefore      string  `json:"not_before"`
	Deadline       string  `json:"deadline"`
	Priority       string  `json:"priority"`
	TimeoutSeconds float64 `json:"timeout_seconds"`
	Retry          *struct {
		MaxAttempts       int     `json:"max_attempts"`
		BackoffSeconds    float64 `json:"backoff_seconds"`
		MaxBackoffSeconds float64 `json:"max_backoff_seconds"`
	} `json:"retry"`
	TraceParent string `json:"traceparent"`
}

// options describes a job's options for printJob, a field each.
func (c *client) options(j *jobView, field func(k, v string)) {
	at := func(s string) string {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return s
		}
		return c.when(t)
	}
	if j.NotBefore != "" {
		field("not before", at(j.NotBefore))
	}
	if j.Deadline != "" {
		field("deadline", at(j.Deadline))
	}
	if j.Priority != "" && j.Priority != "normal" {
		field("priority", j.Priority)
	}
	if r := j.Retry; r != nil {
		var parts []string
		if r.MaxAttempts > 0 {
			parts = append(parts, strconv.Itoa(r.MaxAttempts)+" attempts")
		}
		if r.BackoffSeconds > 0 {
			parts = append(parts, fmt.Sprintf("backoff %gs doubling up to %gs", r.BackoffSeconds, r.MaxBackoffSeconds))
		}
		field("retry", strings.Join(parts, ", "))
	}
	if j.TimeoutSeconds > 0 {
		field("timeout", fmt.Sprintf("%gs per attempt", j.TimeoutSeconds))
	}
	if len(j.TraceParent) == 55 {
		field("trace", j.TraceParent[3:35])
	}
}

// listPage is GET /jobs.
type listPage struct {
	Jobs       []jobView        `json:"jobs"`
	NextCursor *string          `json:"next_cursor"`
	Counts     map[string]int64 `json:"counts"`
}

// rateView is a pace: requests per second and concurrent requests.
type rateView struct {
	RPS           float64 `json:"rps"`
	MaxConcurrent int     `json:"max_concurrent"`
	PacedBy       string  `json:"paced_by"`
	Since         apiTime `json:"since"`
}

// laneView is a destination of GET /lanes.
type laneView struct {
	Destination            string   `json:"destination"`
	Ceiling                rateView `json:"ceiling"`
	Pace                   rateView `json:"pace"`
	HeldUntil              apiTime  `json:"held_until"`
	Backlog                int64    `json:"backlog"`
	InFlight               int      `json:"in_flight"`
	Buffered               int      `json:"buffered"`
	OldestQueuedAt         apiTime  `json:"oldest_queued_at"`
	OldestQueuedAgeSeconds float64  `json:"oldest_queued_age_seconds"`
	LastError              string   `json:"last_error"`
	LastErrorAt            apiTime  `json:"last_error_at"`
	AccountQueues          bool     `json:"account_queues"`
	Queues                 []struct {
		Queue            string  `json:"queue"`
		Buffered         int     `json:"buffered"`
		Running          int     `json:"running"`
		PausedUntil      apiTime `json:"paused_until"`
		PausedBy         string  `json:"paused_by"`
		CapRPS           float64 `json:"cap_rps"`
		CapMaxConcurrent int     `json:"cap_max_concurrent"`
	} `json:"queues"`
	Paused *struct {
		Since  apiTime `json:"since"`
		Reason string  `json:"reason"`
	} `json:"paused"`
	Circuit struct {
		State               string `json:"state"`
		ConsecutiveFailures int    `json:"consecutive_failures"`
		LastError           string `json:"last_error"`
	} `json:"circuit"`
	Live   bool   `json:"live"`
	HeldBy string `json:"held_by"`
}

// operationView is a bulk operation of GET /operations/{id}.
type operationView struct {
	ID        string         `json:"id"`
	Kind      string         `json:"kind"`
	State     string         `json:"state"`
	Filter    map[string]any `json:"filter"`
	Total     int64          `json:"total"`
	Processed int64          `json:"processed"`
	Changed   int64          `json:"changed"`
	Skipped   int64          `json:"skipped"`
	Progress  float64        `json:"progress"`
	CreatedAt apiTime        `json:"created_at"`
	UpdatedAt apiTime        `json:"updated_at"`
	Error     string         `json:"error"`
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0) }

// row writes cells as one tab-separated line.
func row(w io.Writer, cells ...string) { fmt.Fprintln(w, strings.Join(cells, "\t")) }

// statusOrder is the order of the statuses in counts.
var statusOrder = []string{"queued", "in_flight", "completed", "failed"}

// printJobs prints a listing: one job a line, then the counts.
func (c *client) printJobs(p *listPage, all bool) {
	if len(p.Jobs) == 0 {
		fmt.Fprintln(c.stdout, "no jobs match")
	} else {
		tenants := false
		for _, j := range p.Jobs {
			tenants = tenants || j.Tenant != ""
		}
		tw := newTable(c.stdout)
		head := []string{"JOB", "STATUS", "DESTINATION", "USER", "CREATED", "ATTEMPTS", "RESULT"}
		if tenants {
			head = append(head[:3], append([]string{"TENANT"}, head[3:]...)...)
		}
		row(tw, head...)
		for _, j := range p.Jobs {
			cells := []string{j.JobID, j.Status, truncate(target(&j), 48), dash(j.UserID), c.when(j.CreatedAt.Time),
				strconv.Itoa(j.Attempts), truncate(outcome(&j, c.now()), 60)}
			if tenants {
				cells = append(cells[:3], append([]string{dash(j.Tenant)}, cells[3:]...)...)
			}
			row(tw, cells...)
		}
		tw.Flush()
	}
	if p.Counts != nil {
		parts := make([]string, 0, len(statusOrder))
		for _, s := range statusOrder {
			parts = append(parts, s+" "+humanInt(p.Counts[s]))
		}
		fmt.Fprintf(c.stdout, "\nmatching, by status: %s\n", strings.Join(parts, " · "))
	}
	if !all && p.NextCursor != nil && *p.NextCursor != "" {
		fmt.Fprintf(c.stdout, "more: add --cursor %s for the next page, or --all for every page\n", *p.NextCursor)
	}
}

// target is where a job goes: its (redacted) URL, or its pool.
func target(j *jobView) string {
	if j.PoolID != "" && j.URL == "" {
		return "pool:" + j.PoolID
	}
	return j.URL
}

// outcome says in a few words how a job stands: its result once finished,
// else its last attempt.
func outcome(j *jobView, now time.Time) string {
	var parts []string
	if j.ResponseStatus != nil && *j.ResponseStatus != 0 {
		parts = append(parts, "HTTP "+strconv.Itoa(*j.ResponseStatus))
	}
	if j.Reason != "" {
		parts = append(parts, j.Reason)
	}
	if len(parts) == 0 && j.LastAttempt != nil {
		parts = append(parts, "last attempt "+ago(now.Sub(j.LastAttempt.At.Time))+": "+attemptOutcome(j.LastAttempt))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// attemptOutcome is what one attempt met.
func attemptOutcome(a *attemptView) string {
	s := a.Error
	if a.Status != 0 {
		s = "HTTP " + strconv.Itoa(a.Status)
	}
	if s == "" {
		s = "no answer"
	}
	if a.Signal != "" {
		s += " (" + a.Signal + ")"
	}
	return s
}

// printJob prints one job, field by field, then its history.
func (c *client) printJob(j *jobView) {
	tw := newTable(c.stdout)
	field := func(k, v string) {
		if v != "" {
			row(tw, k, v)
		}
	}
	field("job", j.JobID)
	status := j.Status
	if j.Scheduled {
		status += " (scheduled)"
	}
	field("status", status)
	field("url", j.URL)
	if j.PoolID != "" {
		field("pool", j.PoolID)
	}
	field("method", j.Method)
	field("tenant", j.Tenant)
	field("user", j.UserID)
	field("created", c.when(j.CreatedAt.Time))
	field("updated", c.when(j.UpdatedAt.Time))
	c.options(j, field)
	field("attempts", strconv.Itoa(j.Attempts))
	if j.ResponseStatus != nil {
		resp := "no response"
		if *j.ResponseStatus != 0 {
			resp = "HTTP " + strconv.Itoa(*j.ResponseStatus)
		}
		if j.ContentType != "" {
			resp += ", " + j.ContentType
		}
		field("response", resp)
	}
	field("reason", j.Reason)
	if j.Body != nil {
		field("body", bodyPreview(j))
	}
	if j.WebhookURL != "" {
		field("webhook", j.WebhookURL)
	}
	if w := j.Webhook; w != nil {
		d := w.Status + " after " + plural(w.Attempts, "attempt")
		if w.ResponseStatus != 0 {
			d += ", HTTP " + strconv.Itoa(w.ResponseStatus)
		}
		if w.Reason != "" {
			d += ": " + w.Reason
		}
		field("delivery", d)
	}
	tw.Flush()
	if len(j.History) == 0 {
		return
	}
	fmt.Fprintf(c.stdout, "\nattempt history, oldest first (%s; a job keeps its last 10):\n", plural(len(j.History), "attempt"))
	tw = newTable(c.stdout)
	row(tw, "AT", "TOOK", "ANSWER", "SIGNAL", "MEMBER")
	for i := range j.History {
		a := &j.History[i]
		answer := a.Error
		if a.Status != 0 {
			answer = "HTTP " + strconv.Itoa(a.Status)
		}
		row(tw, c.when(a.At.Time), humanDuration(time.Duration(a.DurationMS*float64(time.Millisecond))),
			dash(answer), dash(a.Signal), dash(a.Member))
	}
	tw.Flush()
}

// bodyPreview is the start of a response body, on one line.
func bodyPreview(j *jobView) string {
	b := *j.Body
	if j.BodyEncoding == "base64" {
		return fmt.Sprintf("%d characters of base64 (not UTF-8; -o json shows it)", len(b))
	}
	if b == "" {
		return "(empty)"
	}
	s := strings.Join(strings.Fields(b), " ")
	s = truncate(s, 100)
	if j.BodyTruncated {
		s += " (truncated by Aquifer)"
	}
	return s
}

// printLanes prints one destination a line.
func (c *client) printLanes(lanes []laneView) {
	if len(lanes) == 0 {
		fmt.Fprintln(c.stdout, "no lanes: nothing is queued, running or paused")
		return
	}
	tw := newTable(c.stdout)
	row(tw, "DESTINATION", "STATE", "PACE", "CEILING", "PACED BY", "BACKLOG", "IN FLIGHT", "OLDEST WAITING", "LAST ERROR")
	for i := range lanes {
		l := &lanes[i]
		row(tw, l.Destination, c.laneState(l), paceText(l.Pace), paceText(l.Ceiling), dash(l.Pace.PacedBy), humanInt(l.Backlog),
			strconv.Itoa(l.InFlight), c.oldest(l), dash(truncate(l.LastError, 40)))
	}
	tw.Flush()
}

// laneState says in a word or two why a lane sends, or does not.
func (c *client) laneState(l *laneView) string {
	switch {
	case l.Paused != nil:
		return "paused"
	case !l.HeldUntil.IsZero() && l.HeldUntil.After(c.now()):
		return "held " + ago(c.now().Sub(l.HeldUntil.Time))
	case l.Circuit.State == "open" || l.Circuit.State == "half_open":
		return "circuit " + strings.ReplaceAll(l.Circuit.State, "_", "-")
	case l.HeldBy != "":
		return "on " + l.HeldBy
	case l.Live:
		return "active"
	}
	return "idle"
}

func (c *client) oldest(l *laneView) string {
	switch {
	case !l.OldestQueuedAt.IsZero():
		return ago(c.now().Sub(l.OldestQueuedAt.Time))
	case l.OldestQueuedAgeSeconds > 0:
		return ago(time.Duration(l.OldestQueuedAgeSeconds * float64(time.Second)))
	}
	return "-"
}

// printLane prints one destination, field by field, then its queues.
func (c *client) printLane(l *laneView) {
	tw := newTable(c.stdout)
	field := func(k, v string) {
		if v != "" {
			row(tw, k, v)
		}
	}
	field("destination", l.Destination)
	field("state", c.laneState(l))
	if p := l.Paused; p != nil {
		d := "since " + c.when(p.Since.Time)
		if p.Reason != "" {
			d += ": " + p.Reason
		}
		field("paused", d)
	}
	field("pace", paceText(l.Pace))
	field("ceiling", paceText(l.Ceiling))
	if l.Pace.PacedBy != "" {
		field("paced by", l.Pace.PacedBy+" since "+c.when(l.Pace.Since.Time))
	}
	if !l.HeldUntil.IsZero() {
		field("held until", c.when(l.HeldUntil.Time)+" (Retry-After)")
	}
	field("backlog", humanInt(l.Backlog)+" queued")
	field("in flight", strconv.Itoa(l.InFlight))
	field("buffered", strconv.Itoa(l.Buffered)+" in memory")
	field("oldest waiting", c.oldest(l))
	if l.LastError != "" {
		field("last error", l.LastError+", "+c.when(l.LastErrorAt.Time))
	}
	circuit := l.Circuit.State
	if l.Circuit.ConsecutiveFailures > 0 {
		circuit += ", " + plural(l.Circuit.ConsecutiveFailures, "failure") + " in a row"
	}
	field("circuit", circuit)
	if l.AccountQueues {
		field("account queues", "on")
	}
	field("dispatched by", l.HeldBy)
	tw.Flush()
	if len(l.Queues) == 0 {
		return
	}
	fmt.Fprintln(c.stdout, "\nqueues:")
	tw = newTable(c.stdout)
	row(tw, "QUEUE", "BUFFERED", "RUNNING", "WAITING UNTIL", "CAP")
	for _, q := range l.Queues {
		wait := "-"
		if !q.PausedUntil.IsZero() {
			wait = c.when(q.PausedUntil.Time)
			if q.PausedBy != "" {
				wait += " (" + q.PausedBy + ")"
			}
		}
		limit := "-"
		if q.CapRPS > 0 || q.CapMaxConcurrent > 0 {
			limit = paceText(rateView{RPS: q.CapRPS, MaxConcurrent: q.CapMaxConcurrent})
		}
		row(tw, q.Queue, strconv.Itoa(q.Buffered), strconv.Itoa(q.Running), wait, limit)
	}
	tw.Flush()
}

// paceText is "12.5 rps, 8 at once".
func paceText(r rateView) string {
	if r.RPS == 0 && r.MaxConcurrent == 0 {
		return "-"
	}
	return humanRate(r.RPS) + " rps, " + strconv.Itoa(r.MaxConcurrent) + " at once"
}

// printOperations prints one bulk operation a line.
func (c *client) printOperations(ops []operationView) {
	if len(ops) == 0 {
		fmt.Fprintln(c.stdout, "no operations")
		return
	}
	tw := newTable(c.stdout)
	row(tw, "OPERATION", "KIND", "STATE", "PROGRESS", "CHANGED", "SKIPPED", "STARTED", "FILTER")
	for i := range ops {
		op := &ops[i]
		row(tw, op.ID, op.Kind, op.State, progress(op), humanInt(op.Changed), humanInt(op.Skipped), c.when(op.CreatedAt.Time),
			truncate(filterText(op.Filter), 60))
	}
	tw.Flush()
}

// printOperation prints one bulk operation, field by field.
func (c *client) printOperation(op *operationView) {
	tw := newTable(c.stdout)
	row(tw, "operation", op.ID)
	row(tw, "kind", op.Kind)
	row(tw, "state", op.State)
	row(tw, "filter", filterText(op.Filter))
	row(tw, "progress", progress(op))
	row(tw, "changed", humanInt(op.Changed))
	row(tw, "skipped", humanInt(op.Skipped)+" (their state had moved on)")
	row(tw, "started", c.when(op.CreatedAt.Time))
	row(tw, "updated", c.when(op.UpdatedAt.Time))
	if op.Error != "" {
		row(tw, "error", op.Error)
	}
	tw.Flush()
}

// progress is "1,200 of 5,000 (24%)".
func progress(op *operationView) string {
	return fmt.Sprintf("%s of %s (%d%%)", humanInt(op.Processed), humanInt(op.Total), int(math.Floor(op.Progress*100)))
}

// progressLine is --wait's line for each step of an operation.
func progressLine(op *operationView) string {
	return fmt.Sprintf("%s %s: %s, %s changed, %s skipped — %s", op.Kind, op.ID, progress(op), humanInt(op.Changed),
		humanInt(op.Skipped), op.State)
}

// filterText shows an operation's filter as key=value pairs.
func filterText(f map[string]any) string {
	keys := make([]string, 0, len(f))
	for k, v := range f {
		if !zeroJSON(v) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := f[k]
		if ms, ok := v.(float64); ok && strings.HasPrefix(k, "created_") { // Unix milliseconds
			v = time.UnixMilli(int64(ms)).Local().Format("2006-01-02T15:04:05Z07:00")
		}
		if list, ok := v.([]any); ok {
			s := make([]string, len(list))
			for i, x := range list {
				s[i] = fmt.Sprint(x)
			}
			v = strings.Join(s, ",")
		}
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	if len(parts) == 0 {
		return "(every job)"
	}
	return strings.Join(parts, " ")
}

func zeroJSON(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case float64:
		return x == 0
	case []any:
		return len(x) == 0
	case bool:
		return !x
	}
	return false
}

// when is a time for people: local, the date left out when it is today,
// and how long ago.
func (c *client) when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	now := c.now()
	local := t.Local()
	layout := "2006-01-02 15:04:05"
	if y, m, d := local.Date(); now.Local().Year() == y && now.Local().Month() == m && now.Local().Day() == d {
		layout = "15:04:05"
	}
	return local.Format(layout) + " (" + ago(now.Sub(t)) + ")"
}

// ago is how long ago d was: "3m ago", or for a time to come "in 30s".
func ago(d time.Duration) string {
	if d < 0 {
		return "in " + roughDuration(-d)
	}
	if d < time.Second {
		return "just now"
	}
	return roughDuration(d) + " ago"
}

// roughDuration is d in its largest whole unit: 45s, 3m, 5h, 2d.
func roughDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}

// humanDuration is a short duration: 850ms, 1.2s, 3m10s.
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return "<1ms"
	case d < time.Second:
		return strconv.Itoa(int(d.Milliseconds())) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// humanInt is n with thousands separators: 1,234,567.
func humanInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// humanRate is a rate with the digits that matter: 2, 12.5, 0.25, 1,500.
func humanRate(r float64) string {
	if r >= 100 || r == math.Trunc(r) {
		return humanInt(int64(math.Round(r)))
	}
	return strconv.FormatFloat(r, 'g', 3, 64)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to n characters, marking the cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
