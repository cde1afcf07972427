package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aquiferhq/aquifer/internal/config"
)

// The client mode: `aquiferd jobs …`, `aquiferd lanes …` and `aquiferd
// operations …` talk to a running instance over its REST API, the same
// operator API curl and the dashboards use (docs/API.md). Nothing here
// opens a store or reads the daemon's settings: an operator can run it from
// any machine that reaches the instance. Tables are for people; -o json
// prints the API's own JSON for scripts.

// defaultClientURL is where the daemon listens by default (AQUIFER_HOST
// 127.0.0.1, PORT 8080).
const defaultClientURL = "http://127.0.0.1:8080"

// terminal is the client's standard input: where a confirmation is read
// from, and whether a person is there to give it.
type terminal struct {
	in  io.Reader
	tty bool
}

// stdinTerminal is the process's standard input; it is a terminal when it
// is a character device (not a pipe, a file or /dev/null).
func stdinTerminal() terminal {
	st, err := os.Stdin.Stat()
	return terminal{in: os.Stdin, tty: err == nil && st.Mode()&os.ModeCharDevice != 0}
}

// client is one client-mode command: where to reach the API, how to print,
// and the process's streams.
type client struct {
	lookup config.LookupEnv
	term   terminal
	stdout io.Writer
	stderr io.Writer
	now    func() time.Time
	// poll is how often --wait reads an operation's progress.
	poll time.Duration

	api    *apiClient
	output string // table or json
}

// runClient runs `aquiferd <group> <command> …` (group is jobs, lanes or
// operations).
func runClient(ctx context.Context, group string, args []string, lookup config.LookupEnv, term terminal, stdout, stderr io.Writer) error {
	c := &client{lookup: lookup, term: term, stdout: stdout, stderr: stderr, now: time.Now, poll: time.Second}
	return c.run(ctx, group, args)
}

// clientCommand is one command of a group.
type clientCommand struct {
	usage string // arguments and flags, after "aquiferd <group> <name>"
	doc   string
	run   func(c *client, ctx context.Context, fs *flag.FlagSet, args []string) error
}

// clientGroups are the client mode's commands, by group and name.
var clientGroups = map[string]map[string]clientCommand{
	"jobs": {
		"list": {"[filters] [--limit N] [--cursor C] [--all]", "list jobs, newest first, with each status's count",
			(*client).jobsList},
		"get":    {"ID", "show one job: its request, result, webhook and attempt history", (*client).jobsGet},
		"retry":  {"ID | [filters] [--dry-run] [--yes] [--wait]", "re-queue a finished job, or every finished job a filter selects", (*client).jobsRetry},
		"cancel": {"ID | [filters] [--dry-run] [--yes] [--wait]", "cancel a job not sent yet, or every queued job a filter selects", (*client).jobsCancel},
	},
	"lanes": {
		"list":   {"", "list the destinations: pace and why, backlog, in flight, oldest waiting, pause, circuit", (*client).lanesList},
		"get":    {"DEST", "show one destination (scheme://host[:port] or pool:ID) with its queues", (*client).lanesGet},
		"pause":  {"DEST [--reason TEXT]", "stop dispatching to a destination (jobs are still accepted); admin keys only", (*client).lanesPause},
		"resume": {"DEST", "dispatch to a paused destination again; admin keys only", (*client).lanesResume},
	},
	"operations": {
		"list": {"", "list bulk retries and cancels, newest first", (*client).operationsList},
		"get":  {"ID [--wait]", "show a bulk operation's progress (--wait: until it ends)", (*client).operationsGet},
	},
}

// clientOrder is the order commands are listed in.
var clientOrder = map[string][]string{
	"jobs":       {"list", "get", "retry", "cancel"},
	"lanes":      {"list", "get", "pause", "resume"},
	"operations": {"list", "get"},
}

func (c *client) run(ctx context.Context, group string, args []string) error {
	cmds := clientGroups[group]
	if len(args) == 0 {
		c.groupUsage(group, c.stderr)
		return fmt.Errorf("%s: name a command (%s)", group, strings.Join(clientOrder[group], ", "))
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		c.groupUsage(group, c.stdout)
		return nil
	}
	name := args[0]
	cmd, ok := cmds[name]
	if !ok {
		return fmt.Errorf("%s: unknown command %q (commands: %s; see aquiferd %s -help)", group, name, strings.Join(clientOrder[group], ", "), group)
	}
	full := "aquiferd " + group + " " + name
	fs := flag.NewFlagSet(full, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	c.commonFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: %s %s\n\n%s.\n\nFlags:\n", full, cmd.usage, upperFirst(cmd.doc))
		fs.PrintDefaults()
	}
	return cmd.run(c, ctx, fs, args[1:])
}

func (c *client) groupUsage(group string, w io.Writer) {
	fmt.Fprintf(w, "Usage: aquiferd %s <command> [flags]\n\nCommands:\n", group)
	for _, name := range clientOrder[group] {
		cmd := clientGroups[group][name]
		fmt.Fprintf(w, "  %-7s %s\n          %s\n", name, cmd.usage, cmd.doc)
	}
	fmt.Fprintf(w, "\nEvery command takes --url (default $AQUIFER_URL, else %s), --api-key (default $AQUIFER_API_KEY)\n"+
		"and -o table|json. Run aquiferd %s <command> -help for its flags.\n", defaultClientURL, group)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// commonFlags are every command's: where the API is, the key, the output.
func (c *client) commonFlags(fs *flag.FlagSet) {
	base, _ := c.lookup("AQUIFER_URL")
	if base == "" {
		base = defaultClientURL
	}
	key, _ := c.lookup("AQUIFER_API_KEY")
	c.api = &apiClient{base: base, key: key, stderr: c.stderr}
	fs.Func("url", "the instance's base URL (default $AQUIFER_URL, else "+defaultClientURL+")", func(s string) error {
		c.api.base = s
		return nil
	})
	fs.Func("api-key", "an API key, sent as Authorization: Bearer (default $AQUIFER_API_KEY)", func(s string) error {
		c.api.key = s
		return nil
	})
	c.output = "table"
	fs.Func("o", "output: table (for people) or json (the API's JSON as is)", func(s string) error {
		if s != "table" && s != "json" {
			return fmt.Errorf("want table or json, not %q", s)
		}
		c.output = s
		return nil
	})
}

// parseArgs parses flags wherever they stand among the arguments (`jobs
// get ID -o json` as well as `jobs get -o json ID`) and returns the
// arguments that are not flags. Then it checks the base URL.
func (c *client) parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return pos, c.api.check()
}

// wantArgs checks the number of positional arguments.
func wantArgs(fs *flag.FlagSet, pos []string, n int, what string) error {
	switch {
	case len(pos) < n:
		return fmt.Errorf("%s: %s is required", fs.Name(), what)
	case len(pos) > n:
		return fmt.Errorf("%s: unexpected argument %q", fs.Name(), pos[n])
	}
	return nil
}

// helpOK is a parse error, or nil when -help was asked for: the usage has
// been printed and the command succeeds.
func helpOK(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// filterFlags select jobs, for jobs list and the bulk retry and cancel.
type filterFlags struct {
	statuses       []string
	destination    string
	user, tenant   string
	pool, q        string
	since, before  string
	responseStatus int
}

func (f *filterFlags) add(fs *flag.FlagSet) {
	fs.Func("status", "queued, in_flight, completed or failed; repeat it, or separate with commas, for several", func(s string) error {
		for part := range strings.SplitSeq(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				f.statuses = append(f.statuses, part)
			}
		}
		return nil
	})
	fs.StringVar(&f.destination, "destination", "", "jobs sent to this destination: scheme://host[:port], or pool:ID")
	fs.StringVar(&f.user, "user", "", "jobs of this user_id")
	fs.StringVar(&f.tenant, "tenant", "", "jobs of this tenant (admin keys; a tenant's key sees only its own)")
	fs.StringVar(&f.pool, "pool", "", "jobs sent to this pool_id")
	fs.StringVar(&f.q, "q", "", "text in the URL's path or in the failure reason")
	fs.StringVar(&f.since, "since", "", "created after: a duration back from now (90s, 15m, 2h, 3d) or a time (RFC 3339, or 2006-01-02[T15:04] local)")
	fs.StringVar(&f.before, "before", "", "created before: a duration back from now or a time, as for --since")
	fs.IntVar(&f.responseStatus, "response-status", 0, "jobs whose destination answered this HTTP status")
}

// empty reports whether no filter was given.
func (f *filterFlags) empty() bool {
	return len(f.statuses) == 0 && f.destination == "" && f.user == "" && f.tenant == "" && f.pool == "" &&
		f.q == "" && f.since == "" && f.before == "" && f.responseStatus == 0
}

// times resolves --since and --before against now, as the API takes them.
func (f *filterFlags) times(now time.Time) (after, before string, err error) {
	if f.since != "" {
		if after, err = parseWhen(f.since, now); err != nil {
			return "", "", fmt.Errorf("--since: %w", err)
		}
	}
	if f.before != "" {
		if before, err = parseWhen(f.before, now); err != nil {
			return "", "", fmt.Errorf("--before: %w", err)
		}
	}
	return after, before, nil
}

// query is the filter as GET /jobs's parameters.
func (f *filterFlags) query(now time.Time) (url.Values, error) {
	after, before, err := f.times(now)
	if err != nil {
		return nil, err
	}
	v := url.Values{}
	for _, s := range f.statuses {
		v.Add("status", s)
	}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("destination", f.destination)
	set("user_id", f.user)
	set("tenant", f.tenant)
	set("pool_id", f.pool)
	set("q", f.q)
	set("created_after", after)
	set("created_before", before)
	if f.responseStatus != 0 {
		v.Set("response_status", strconv.Itoa(f.responseStatus))
	}
	return v, nil
}

// filterJSON is the filter of POST /jobs/retry and /jobs/cancel.
type filterJSON struct {
	Status         []string `json:"status,omitempty"`
	UserID         string   `json:"user_id,omitempty"`
	Tenant         string   `json:"tenant,omitempty"`
	Destination    string   `json:"destination,omitempty"`
	PoolID         string   `json:"pool_id,omitempty"`
	CreatedAfter   string   `json:"created_after,omitempty"`
	CreatedBefore  string   `json:"created_before,omitempty"`
	ResponseStatus int      `json:"response_status,omitempty"`
	Q              string   `json:"q,omitempty"`
}

func (f *filterFlags) body(now time.Time) (*filterJSON, error) {
	after, before, err := f.times(now)
	if err != nil {
		return nil, err
	}
	return &filterJSON{Status: f.statuses, UserID: f.user, Tenant: f.tenant, Destination: f.destination, PoolID: f.pool,
		CreatedAfter: after, CreatedBefore: before, ResponseStatus: f.responseStatus, Q: f.q}, nil
}

// parseWhen reads a point in time as --since takes it: a duration back from
// now ("15m", "2h30m", "3d"), an RFC 3339 time, or a local date or date and
// time. The answer is RFC 3339 in UTC, with milliseconds.
func parseWhen(s string, now time.Time) (string, error) {
	if d, err := parseAgo(s); err == nil {
		return now.Add(-d).UTC().Format(rfc3339Milli), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC().Format(rfc3339Milli), nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t.UTC().Format(rfc3339Milli), nil
		}
	}
	return "", fmt.Errorf("%q is neither a duration (15m, 2h, 3d) nor a time (2006-01-02T15:04:05Z, 2006-01-02)", s)
}

const rfc3339Milli = "2006-01-02T15:04:05.000Z07:00"

// parseAgo is time.ParseDuration that also takes whole days ("3d").
func parseAgo(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return 0, errors.New("bad day count")
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		return 0, errors.New("negative")
	}
	return d, err
}

// jobsList is `aquiferd jobs list`.
func (c *client) jobsList(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var f filterFlags
	f.add(fs)
	limit := fs.Int("limit", 0, "jobs per page (1–500; default the server's, 50; with --all, 500)")
	cursor := fs.String("cursor", "", "the page after this cursor (a previous page's next_cursor)")
	all := fs.Bool("all", false, "follow the cursors: every matching job, page after page")
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 0, ""); err != nil {
		return err
	}
	q, err := f.query(c.now())
	if err != nil {
		return err
	}
	switch {
	case *limit != 0:
		q.Set("limit", strconv.Itoa(*limit))
	case *all:
		q.Set("limit", "500")
	}
	var pages []json.RawMessage
	var shown listPage
	for next := *cursor; ; {
		if next != "" {
			q.Set("cursor", next)
		}
		raw, err := c.api.get(ctx, "/jobs", q)
		if err != nil {
			return err
		}
		var p listPage
		if err := json.Unmarshal(raw, &p); err != nil {
			return c.api.notAquifer("/jobs", err)
		}
		pages = append(pages, raw)
		shown.Jobs = append(shown.Jobs, p.Jobs...)
		if shown.Counts == nil {
			shown.Counts = p.Counts
		}
		shown.NextCursor = p.NextCursor
		if !*all || p.NextCursor == nil || *p.NextCursor == "" {
			break
		}
		next = *p.NextCursor
	}
	if c.output == "json" {
		return c.printJSON(mergePages(pages))
	}
	c.printJobs(&shown, *all)
	return nil
}

// mergePages joins the pages --all read into one page of the API's shape:
// every job as the API sent it, the first page's counts, no next cursor.
func mergePages(pages []json.RawMessage) json.RawMessage {
	if len(pages) == 1 {
		return pages[0]
	}
	var jobs []json.RawMessage
	var first map[string]json.RawMessage
	for i, raw := range pages {
		var p map[string]json.RawMessage
		_ = json.Unmarshal(raw, &p) // each decoded as a listPage already
		var js []json.RawMessage
		_ = json.Unmarshal(p["jobs"], &js)
		jobs = append(jobs, js...)
		if i == 0 {
			first = p
		}
	}
	if jobs == nil {
		jobs = []json.RawMessage{}
	}
	first["jobs"], _ = json.Marshal(jobs)
	first["next_cursor"] = json.RawMessage("null")
	out, _ := json.Marshal(first)
	return out
}

// jobsGet is `aquiferd jobs get ID`.
func (c *client) jobsGet(ctx context.Context, fs *flag.FlagSet, args []string) error {
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 1, "a job id"); err != nil {
		return err
	}
	raw, err := c.api.get(ctx, "/jobs/"+url.PathEscape(pos[0]), nil)
	if err != nil {
		return err
	}
	return c.showJob(raw, "")
}

// showJob prints a job view, after a line saying what was done to it.
func (c *client) showJob(raw json.RawMessage, done string) error {
	if c.output == "json" {
		return c.printJSON(raw)
	}
	var j jobView
	if err := json.Unmarshal(raw, &j); err != nil {
		return c.api.notAquifer("the job", err)
	}
	if done != "" {
		fmt.Fprintln(c.stdout, done)
	}
	c.printJob(&j)
	return nil
}

// bulkFlags are the flags of a bulk retry or cancel.
type bulkFlags struct {
	filterFlags
	dryRun, yes, wait bool
}

func (b *bulkFlags) add(fs *flag.FlagSet) {
	b.filterFlags.add(fs)
	fs.BoolVar(&b.dryRun, "dry-run", false, "only count the jobs the filter selects; change nothing")
	fs.BoolVar(&b.yes, "yes", false, "go ahead without asking (needed when standard input is not a terminal)")
	fs.BoolVar(&b.wait, "wait", false, "follow the operation's progress until it ends")
}

// jobsRetry is `aquiferd jobs retry ID` and the bulk retry.
func (c *client) jobsRetry(ctx context.Context, fs *flag.FlagSet, args []string) error {
	return c.jobsAct(ctx, fs, args, "retry", func(id string) (json.RawMessage, string, error) {
		raw, err := c.api.do(ctx, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/retry", nil)
		return raw, "job " + id + " queued again: a new attempt cycle, the same id and history", err
	})
}

// jobsCancel is `aquiferd jobs cancel ID` (DELETE /jobs/{id}) and the bulk
// cancel.
func (c *client) jobsCancel(ctx context.Context, fs *flag.FlagSet, args []string) error {
	return c.jobsAct(ctx, fs, args, "cancel", func(id string) (json.RawMessage, string, error) {
		raw, err := c.api.do(ctx, http.MethodDelete, "/jobs/"+url.PathEscape(id), nil)
		return raw, "job " + id + " canceled: its request will not be sent", err
	})
}

// jobsAct runs a retry or cancel: of the one job named, or in bulk over a
// filter.
func (c *client) jobsAct(ctx context.Context, fs *flag.FlagSet, args []string, kind string, one func(id string) (json.RawMessage, string, error)) error {
	var b bulkFlags
	b.add(fs)
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if len(pos) > 1 {
		return fmt.Errorf("%s: unexpected argument %q (name one job id, or a filter for many)", fs.Name(), pos[1])
	}
	if len(pos) == 1 {
		if !b.empty() || b.dryRun || b.wait {
			return fmt.Errorf("%s: name a job id or a filter, not both (--dry-run, --wait and the filters are for a bulk %s)", fs.Name(), kind)
		}
		raw, done, err := one(pos[0])
		if err != nil {
			return err
		}
		return c.showJob(raw, done)
	}
	if b.empty() {
		statuses := "failed,completed"
		if kind == "cancel" {
			statuses = "queued"
		}
		return fmt.Errorf("%s: name a job id, or a filter for a bulk %s (--status, --destination, --user, --tenant, --pool, --q, --since, --before, --response-status); every job it may take: --status %s",
			fs.Name(), kind, statuses)
	}
	return c.bulk(ctx, &b, kind)
}

// bulk runs a bulk retry or cancel: the dry run first, then, once
// confirmed, the real run (and with --wait, its progress until it ends).
func (c *client) bulk(ctx context.Context, b *bulkFlags, kind string) error {
	filter, err := b.body(c.now())
	if err != nil {
		return err
	}
	path := "/jobs/" + kind
	dry, err := c.api.do(ctx, http.MethodPost, path, bulkRequest{Filter: filter, DryRun: true})
	if err != nil {
		return err
	}
	var count struct {
		Count int64 `json:"count"`
	}
	if err := json.Unmarshal(dry, &count); err != nil {
		return c.api.notAquifer(path, err)
	}
	verb := map[string]string{"retry": "retried", "cancel": "canceled"}[kind]
	if b.dryRun {
		if c.output == "json" {
			return c.printJSON(dry)
		}
		fmt.Fprintf(c.stdout, "%s jobs would be %s (dry run: nothing was changed)\n", humanInt(count.Count), verb)
		return nil
	}
	if count.Count == 0 {
		fmt.Fprintf(c.stderr, "no jobs match: nothing to %s\n", kind)
		return nil
	}
	if !b.yes {
		if err := c.confirm(kind, count.Count); err != nil {
			return err
		}
	}
	raw, err := c.api.do(ctx, http.MethodPost, path, bulkRequest{Filter: filter})
	if err != nil {
		return err
	}
	var started struct {
		Operation operationView `json:"operation"`
	}
	if err := json.Unmarshal(raw, &started); err != nil || started.Operation.ID == "" {
		return c.api.notAquifer(path, fmt.Errorf("no operation in the answer: %v", err))
	}
	if !b.wait {
		if c.output == "json" {
			return c.printJSON(raw)
		}
		op := &started.Operation
		fmt.Fprintf(c.stdout, "operation %s started: %s of %s jobs\n", op.ID, op.Kind, humanInt(op.Total))
		fmt.Fprintf(c.stdout, "follow it: aquiferd operations get %s --wait\n", op.ID)
		return nil
	}
	return c.waitOperation(ctx, started.Operation.ID)
}

// bulkRequest is the body of POST /jobs/retry and /jobs/cancel.
type bulkRequest struct {
	Filter *filterJSON `json:"filter"`
	DryRun bool        `json:"dry_run"`
}

// errNotConfirmed is a bulk action the operator declined.
var errNotConfirmed = errors.New("not confirmed: nothing was changed")

// confirm asks the person at the terminal to confirm a bulk action on n
// jobs; without a terminal it refuses (a script must say --yes).
func (c *client) confirm(kind string, n int64) error {
	if !c.term.tty {
		return fmt.Errorf("%s of %s jobs not confirmed: standard input is not a terminal, so nobody can answer; run with --dry-run to count, or --yes to go ahead",
			kind, humanInt(n))
	}
	fmt.Fprintf(c.stderr, "%s %s jobs? [y/N] ", upperFirst(kind), humanInt(n))
	line, err := bufio.NewReader(c.term.in).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(c.stderr)
		return errNotConfirmed
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errNotConfirmed
}

// operationsList is `aquiferd operations list`.
func (c *client) operationsList(ctx context.Context, fs *flag.FlagSet, args []string) error {
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 0, ""); err != nil {
		return err
	}
	raw, err := c.api.get(ctx, "/operations", nil)
	if err != nil {
		return err
	}
	if c.output == "json" {
		return c.printJSON(raw)
	}
	var doc struct {
		Operations []operationView `json:"operations"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return c.api.notAquifer("/operations", err)
	}
	c.printOperations(doc.Operations)
	return nil
}

// operationsGet is `aquiferd operations get ID [--wait]`.
func (c *client) operationsGet(ctx context.Context, fs *flag.FlagSet, args []string) error {
	wait := fs.Bool("wait", false, "follow the operation's progress until it ends")
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 1, "an operation id"); err != nil {
		return err
	}
	if *wait {
		return c.waitOperation(ctx, pos[0])
	}
	raw, op, err := c.operation(ctx, pos[0])
	if err != nil {
		return err
	}
	if c.output == "json" {
		return c.printJSON(raw)
	}
	c.printOperation(op)
	return nil
}

func (c *client) operation(ctx context.Context, id string) (json.RawMessage, *operationView, error) {
	path := "/operations/" + url.PathEscape(id)
	raw, err := c.api.get(ctx, path, nil)
	if err != nil {
		return nil, nil, err
	}
	var op operationView
	if err := json.Unmarshal(raw, &op); err != nil {
		return nil, nil, c.api.notAquifer(path, err)
	}
	return raw, &op, nil
}

// waitOperation polls an operation, printing its progress on stderr each
// time it moves, until it ends; then it prints the operation. A failed
// operation is an error.
func (c *client) waitOperation(ctx context.Context, id string) error {
	var last string
	for {
		raw, op, err := c.operation(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				break // interrupted: say so below
			}
			return err
		}
		if line := progressLine(op); line != last {
			fmt.Fprintln(c.stderr, line)
			last = line
		}
		if op.State != "running" {
			if c.output == "json" {
				if err := c.printJSON(raw); err != nil {
					return err
				}
			} else {
				c.printOperation(op)
			}
			if op.State == "failed" {
				return fmt.Errorf("operation %s failed: %s", op.ID, op.Error)
			}
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(c.poll):
			continue
		}
		break
	}
	return fmt.Errorf("stopped waiting; operation %s goes on (aquiferd operations get %s --wait)", id, id)
}

// lanesList is `aquiferd lanes list`.
func (c *client) lanesList(ctx context.Context, fs *flag.FlagSet, args []string) error {
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 0, ""); err != nil {
		return err
	}
	raw, err := c.api.get(ctx, "/lanes", nil)
	if err != nil {
		return err
	}
	if c.output == "json" {
		return c.printJSON(raw)
	}
	var doc struct {
		Lanes []laneView `json:"lanes"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return c.api.notAquifer("/lanes", err)
	}
	c.printLanes(doc.Lanes)
	return nil
}

// lanePath is a destination's URL path: one segment, escaped, colons and
// slashes included.
func lanePath(dest string) string {
	return "/lanes/" + strings.ReplaceAll(url.PathEscape(dest), ":", "%3A")
}

// lanesGet is `aquiferd lanes get DEST`.
func (c *client) lanesGet(ctx context.Context, fs *flag.FlagSet, args []string) error {
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 1, "a destination (scheme://host[:port] or pool:ID)"); err != nil {
		return err
	}
	raw, err := c.api.get(ctx, lanePath(pos[0]), nil)
	if err != nil {
		return err
	}
	return c.showLane(raw, "")
}

// lanesPause is `aquiferd lanes pause DEST [--reason TEXT]`.
func (c *client) lanesPause(ctx context.Context, fs *flag.FlagSet, args []string) error {
	reason := fs.String("reason", "", "why, for whoever looks next (shown in the lane view and /health)")
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 1, "a destination (scheme://host[:port] or pool:ID)"); err != nil {
		return err
	}
	var body any
	if *reason != "" {
		body = map[string]string{"reason": *reason}
	}
	raw, err := c.api.do(ctx, http.MethodPost, lanePath(pos[0])+"/pause", body)
	if err != nil {
		return err
	}
	return c.showLane(raw, "paused: jobs to it are accepted and stored, none is sent until it is resumed")
}

// lanesResume is `aquiferd lanes resume DEST`.
func (c *client) lanesResume(ctx context.Context, fs *flag.FlagSet, args []string) error {
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := wantArgs(fs, pos, 1, "a destination (scheme://host[:port] or pool:ID)"); err != nil {
		return err
	}
	raw, err := c.api.do(ctx, http.MethodPost, lanePath(pos[0])+"/resume", nil)
	if err != nil {
		return err
	}
	return c.showLane(raw, "resumed: its waiting jobs are dispatched again")
}

func (c *client) showLane(raw json.RawMessage, done string) error {
	if c.output == "json" {
		return c.printJSON(raw)
	}
	var l laneView
	if err := json.Unmarshal(raw, &l); err != nil {
		return c.api.notAquifer("the lane", err)
	}
	if done != "" {
		fmt.Fprintf(c.stdout, "%s %s\n", l.Destination, done)
	}
	c.printLane(&l)
	return nil
}

// printJSON prints the API's JSON as it came, on one line.
func (c *client) printJSON(raw json.RawMessage) error {
	_, err := fmt.Fprintln(c.stdout, strings.TrimRight(string(raw), "\r\n"))
	return err
}

// apiClient calls the REST API.
type apiClient struct {
	base   string
	key    string
	stderr io.Writer
	http   *http.Client
	warned bool // the open-mode warning was shown
}

// check validates the base URL.
func (a *apiClient) check() error {
	u, err := url.Parse(a.base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q: want the instance's base URL, like %s", a.base, defaultClientURL)
	}
	a.base = strings.TrimRight(a.base, "/")
	a.http = &http.Client{Timeout: 30 * time.Second}
	return nil
}

func (a *apiClient) get(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return a.do(ctx, http.MethodGet, path, nil)
}

// maxAnswer bounds what the client reads of one answer.
const maxAnswer = 64 << 20

// do sends one request and returns the body of a 2xx answer; any other
// answer is an *apiError with the API's message.
func (a *apiClient) do(ctx context.Context, method, path string, body any) (json.RawMessage, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "aquiferd/"+Version)
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, a.unreachable(err)
	}
	defer resp.Body.Close()
	if w := resp.Header.Get("Aquifer-Warning"); w != "" && !a.warned {
		fmt.Fprintln(a.stderr, "warning: "+w)
		a.warned = true
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, a.base+path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, newAPIError(resp, raw)
	}
	return raw, nil
}

// unreachable says why the instance could not be asked, naming the URL.
func (a *apiClient) unreachable(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot reach Aquifer at %s: connection refused (is it running there? set --url or AQUIFER_URL)", a.base)
	case errors.Is(err, context.Canceled):
		return errors.New("canceled")
	}
	return fmt.Errorf("cannot reach Aquifer at %s: %v", a.base, err)
}

// notAquifer is an answer that is not the API's JSON.
func (a *apiClient) notAquifer(what string, err error) error {
	return fmt.Errorf("%s: the answer from %s is not Aquifer's (%v); is --url right?", what, a.base, err)
}

// apiError is an answer outside 2xx, with the API's {"error", "field"}.
type apiError struct {
	status int
	msg    string
	field  string
}

func newAPIError(resp *http.Response, raw []byte) *apiError {
	e := &apiError{status: resp.StatusCode}
	var body struct {
		Error string `json:"error"`
		Field string `json:"field"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		e.msg, e.field = body.Error, body.Field
	} else {
		e.msg = strings.TrimSpace(string(raw))
		if len(e.msg) > 200 || e.msg == "" {
			e.msg = "the server answered " + resp.Status
		}
	}
	if resp.StatusCode == http.StatusUnauthorized {
		e.msg += " (set --api-key or AQUIFER_API_KEY)"
	}
	return e
}

func (e *apiError) Error() string {
	s := e.msg
	if e.field != "" && !strings.Contains(s, e.field) {
		s = e.field + ": " + s
	}
	return fmt.Sprintf("%s (HTTP %d)", s, e.status)
}
