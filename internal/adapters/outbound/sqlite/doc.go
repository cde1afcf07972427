// Package sqlite is Aquifer's default JobStore: one embedded SQLite database
// (pure Go, modernc.org/sqlite) in WAL mode. It also implements
// ports.OperatorStore (listing, counting, retrying and bulk-acting on jobs,
// lane pauses), ports.LedgerStore and ports.TenantCounter.
//
// # Group commit
//
// Writes go through a single writer goroutine that gathers every operation
// waiting at the moment it starts a transaction and commits them together:
// group commit. With synchronous=FULL each commit is one fsync of the WAL, so
// N concurrent inserts cost one fsync instead of N, and every caller still
// returns only after its own row is durable (the operations, submitting them
// and waiting are internal/storekit's, shared with the other durable
// stores). The operator's writes (a retry, a bulk batch, saving an operation,
// a pause) are operations of the same writer, committed in the same groups.
// Reads use a separate pool of read-only connections, which WAL lets run
// beside the writer: listing and counting never hold it, however long they
// take.
//
// The writer's connection is its own for the store's life (wconn.go): each
// group is one sql.Conn.Raw in which BEGIN IMMEDIATE, the group's
// statements and COMMIT run on the driver's connection, every statement
// prepared there once at Open, so no exec pays database/sql's per-call work
// (Tx.StmtContext, argument conversion, locking, result wrapping). A failed
// statement or COMMIT rolls the transaction back before the group's callers
// are told. What an insert, a finish or a requeue binds that takes work to
// compute (headers, history and options as JSON, the derived columns) is
// made on the caller's goroutine before the op is queued (encode.go,
// storekit.Config.Encode). Stats counts the pages the commits write to the
// WAL.
//
// # Schema
//
// Each job is one row for its whole lifecycle (request, result, webhook
// delivery, and its last domain.MaxHistory attempts as JSON in history); see
// schema.sql. Three columns exist for the operator's filters and are derived
// once, at insert, from values that never change: upstream (the upstream of
// the job's queue, what the destination filter compares), tenant (the tenant
// scoping user_id, empty when unscoped) and url_path (the URL's path, which the
// q filter searches; the query string is left out). A job's options
// (domain.JobOptions) are four columns: not_before and deadline (Unix ms, 0
// for none) and priority (-1, 0, 1), which indexes read, and options, the
// rest (retry policy, timeout, trace context) as storekit.EncodeOptions's
// JSON, empty for a plain job. Bulk operations and lane pauses have a small
// table each. Older databases are migrated at open, one version per
// transaction (migrate.go); version 3 fills the derived columns of existing
// rows a thousand at a time before it builds their indexes; version 4 adds
// the options' columns with their defaults (no row is rewritten), rebuilds
// jobs_ready from the waiting jobs and builds the two new, empty, indexes
// (a read of the table each); version 5 rebuilds jobs_ready with status and
// expires_at in it (a read of the table: about 4 s at a million queued
// 1 KiB jobs on the 2-core development machine); version 6 adds job_bodies
// and the apart column, copying nothing (see Bodies).
//
// # Bodies
//
// SQLite rewrites a whole row at every UPDATE, and a row that changes size
// (a finish adds the response, the end of a delivery shortens
// delivery_status) is rewritten with its overflow pages. A request body
// kept in the row was therefore written three times, and a response twice:
// with 16 KiB bodies a job wrote 2.7 times their pages to the WAL. A body
// of sideBodyMin (256) bytes or more is now written once, to job_bodies
// under key seq*2 (the request's) or seq*2+1 (the response's), and the row
// keeps NULL and a bit in apart. jobColumns reads such a body back with a
// lookup by key (EXPLAIN QUERY PLAN shows a CORRELATED SCALAR SUBQUERY per
// body under every plan that reads whole jobs; it runs only for a row whose
// bit is set). A retry or a cancel clears the response's bit, a later small
// response goes back into the row, and the trigger job_bodies_follow
// deletes a job's bodies with the job, whichever statement deletes it.
// Rows written by version 5 keep their bodies inline (apart = 0) and read
// as before. BenchmarkLifecycleBodies measures it: WAL pages per job with
// 16 KiB bodies 21.7 -> 10.0, with 64 KiB 81.6 -> 34.1; at 64 bytes
// nothing changes.
//
// # Scheduled jobs
//
// A scheduled job (domain.Job.Scheduled) is a queued row with a not_before
// and an empty ready_lane, and ready_seq 0: durable at Insert, in no lane's
// queue, but in jobs_scheduled. PromoteDue is one writer operation: it
// reads up to Limit due rows from jobs_scheduled in (not_before, seq) order,
// then gives each ready_lane = lane and the next ready_seq from the
// writer's counter, in that order, all in the group's transaction. Each
// UPDATE repeats the index's condition, so a job no longer scheduled (a
// cancel committed first) is left alone, and a second PromoteDue, even in
// the same group, cannot find a job the first one promoted. Finishing or
// cancelling a scheduled job changes its status, which takes it out of
// jobs_scheduled. InsertBatch is one writer operation too: its jobs are
// inserted in order in the group's transaction, so the unique index
// answers a duplicate of an earlier job of the batch as it answers one of
// a stored job, and a failure stores none of them.
//
// # Indexes, and what each costs a job
//
//	jobs (rowid = seq)                            newest first: walk the table backwards
//	jobs_idempotency (user_id, idempotent_key)    unique: insert-if-absent, Lookup
//	jobs_ready (ready_lane, priority, ready_seq,  partial (ready_lane != ''): lanes page their queues;
//	            status, expires_at)               Counts and Position read it alone
//	jobs_scheduled (not_before, seq)              partial (ready_lane = '', queued, not_before > 0): PromoteDue, NextDue
//	jobs_deadline (deadline, seq)                 partial (deadline > 0, queued): Overdue
//	jobs_status (status, seq, expires_at)         listing by status; counts read it alone
//	jobs_upstream (upstream, seq)                 listing by destination
//	jobs_user (user_id, seq)                      listing by user
//	jobs_tenant (tenant, seq)                     partial (tenant != ''): listing by tenant
//
// A plain job (no options) costs what it cost before the options came:
// priority widens its jobs_ready entry by one byte, and it is in neither
// jobs_scheduled nor jobs_deadline (TestPlainJobsWriteNoOptionIndexes
// counts the entries). A scheduled job has one jobs_scheduled entry until
// it is promoted (then its jobs_ready entry is written) or finished. A job
// with a deadline has one jobs_deadline entry while it is queued: marking
// it in flight deletes the entry and requeueing it writes it again, the
// price of Overdue reading waiting jobs only. Measured against version 3
// (the same session, before and after interleaved, on a loaded 2-core
// machine), BenchmarkInsertParallel and BenchmarkLifecycle of plain jobs
// show no difference beyond the noise, and the process's CPU time for
// 20,000 of each is the same within a few percent.
//
// jobs_upstream, jobs_user and jobs_tenant are written once, at insert, and
// never again: none of their columns changes. jobs_status is rewritten with
// every change of status or expiry (mark in flight, requeue, finish, the
// end of a delivery); expires_at rides along in it so that counting by
// status needs no row. A deployment without tenants writes nothing to
// jobs_tenant. There is no index led by expires_at (every status change
// would pay for it); the purge's once-a-minute scan reads jobs_status, the
// narrowest thing holding expires_at. A job's history is a column of its
// row, rewritten by the Requeue or Finish that brings a new one, and no
// index holds it.
//
// The three entries an insert now writes besides the row are its price: on
// the 2-core development machine BenchmarkInsertParallel spends about a
// quarter more of the writer's time per insert than with the version-2
// schema, and BenchmarkLifecycle about a fifth more per job. Carrying status
// and expires_at in jobs_upstream, jobs_user and jobs_tenant too would make
// their counts read the index alone, but every change of status would then
// rewrite four indexes instead of one; they are left narrow, and counting by
// them reads rows (see Counting).
//
// In pages written to the WAL (Stats.Pages; a page is a 4 KiB frame), with
// about fifty operations a commit, an insert costs 0.56 pages, a finish
// that makes a delivery due 0.36 and the end of the delivery 0.22: a job
// with a webhook writes about 1.1 pages, 4.7 KB, of WAL. The row, its id
// and its idempotency key are 0.29 of the insert's; each of the other
// indexes (jobs_ready, jobs_status, jobs_upstream, jobs_user), whose new
// entries land at the end of their ranges, adds about 0.07 pages to each
// write that changes it. Every one of them is read by something a plain
// job needs (a lane's queue, listing by status, destination and user), so
// none is left out for plain jobs; the partial ones (jobs_scheduled,
// jobs_deadline, jobs_tenant) already cost a plain job nothing.
//
// # Listing
//
// ListJobs is one SELECT newest first (ORDER BY seq DESC LIMIT n) whose
// WHERE holds the filter exactly as domain.JobFilter.Matches states it
// (operator.go: filterWhere). SQLite picks the index of the filter's
// equality, reads its range from the cursor (seq < BeforeSeq) backwards and
// stops when the page is full, checking the other conditions on each row;
// it never sorts. A filter of several statuses is one arm per status joined
// by UNION ALL, which SQLite merges by seq. The plans, as EXPLAIN QUERY PLAN
// prints them for a first page (TestQueryPlans pins every one; each also
// shows the two body lookups of jobColumns, see Bodies):
//
//	(no filter)               SCAN jobs
//	status=failed             SEARCH jobs USING INDEX jobs_status (status=?)
//	 ... next page            SEARCH jobs USING INDEX jobs_status (status=? AND seq<?)
//	status=queued&in_flight   MERGE (UNION ALL)
//	                            LEFT
//	                              SEARCH jobs USING INDEX jobs_status (status=?)
//	                            RIGHT
//	                              SEARCH jobs USING INDEX jobs_status (status=?)
//	destination               SEARCH jobs USING INDEX jobs_upstream (upstream=?)
//	destination&status        SEARCH jobs USING INDEX jobs_upstream (upstream=?)
//	user_id                   SEARCH jobs USING INDEX jobs_user (user_id=?)
//	tenant                    SEARCH jobs USING INDEX jobs_tenant (tenant=?)
//	tenant&status             SEARCH jobs USING INDEX jobs_tenant (tenant=?)
//	tenant&user_id            SEARCH jobs USING INDEX jobs_user (user_id=?)
//	q (alone)                 SCAN jobs
//
// A first page reads about as many rows as it returns when the filter's
// jobs are common among the newest. A filter combining an index's equality
// with a rare status (failed jobs of one destination) walks that index until
// it has a page; filters with no indexed equality (pool_id, created_after or
// created_before, response_status, q) walk the table newest first the same
// way. The worst case — a page that is never filled — reads every row the
// index (or the table) holds for it.
//
// # Counting
//
// CountJobs is one SELECT status, count(*) ... GROUP BY status over the
// filter but its statuses:
//
//	(no filter, or statuses only)  SCAN jobs USING COVERING INDEX jobs_status
//	destination                    SEARCH jobs USING INDEX jobs_upstream (upstream=?)
//	                               USE TEMP B-TREE FOR GROUP BY
//	user_id                        SEARCH jobs USING INDEX jobs_user (user_id=?)
//	                               USE TEMP B-TREE FOR GROUP BY
//	tenant                         SEARCH jobs USING INDEX jobs_tenant (tenant=?)
//	                               USE TEMP B-TREE FOR GROUP BY
//	q, pool_id, created_*, ...     SCAN jobs (NOT INDEXED: the table in order)
//	                               USE TEMP B-TREE FOR GROUP BY
//
// Without a filter the count reads jobs_status alone, a few bytes a job. By
// destination, user or tenant it reads the index range and the rows in it
// (for status and expiry), so it costs in proportion to that destination's,
// user's or tenant's jobs. A q filter (or one with no indexed equality)
// reads the whole table: it is the one count that scans.
//
// # The other reads
//
// ListReady reads one priority's range of jobs_ready (ready_lane=? AND
// priority=? AND ready_seq>?); Position counts the jobs ahead in all three
// ranges (priority IN (1, 0, -1): three range reads, where leaving priority
// out would read the lane's whole queue), so Insert stores a priority
// outside the three as the nearest one. Their SQL repeats the index's
// condition, that ready_lane is not empty, next to "ready_lane = ?":
// without it SQLite cannot tell that the partial index holds every row
// asked for, and scans the table. The scheduler's reads repeat their
// indexes' conditions the same way and name the index (INDEXED BY): with
// no statistics SQLite would rather take the equality on status through
// jobs_status, reading every queued job and sorting them.
//
//	ListReady    SEARCH jobs USING INDEX jobs_ready (ready_lane=? AND priority=? AND ready_seq>?)
//	Position     SEARCH jobs USING COVERING INDEX jobs_ready (ready_lane=? AND priority=? AND ready_seq<?)
//	ReadyQueues  SCAN jobs USING COVERING INDEX jobs_ready
//	Counts       SCAN jobs USING COVERING INDEX jobs_ready
//	             SCALAR SUBQUERY 1
//	               SEARCH jobs USING INDEX jobs_scheduled (not_before>?)
//	NextDue      SEARCH jobs USING INDEX jobs_scheduled (not_before>?)       (LIMIT 1: the first entry)
//	PromoteDue   SEARCH jobs USING INDEX jobs_scheduled (not_before>? AND not_before<?)
//	Overdue      SEARCH jobs USING INDEX jobs_deadline (deadline>? AND deadline<?)
//
// Each reads the entries it returns (or counts) and, where the plan says
// INDEX rather than COVERING INDEX, their rows, and nothing else: Counts
// the entries of the jobs in lanes and the scheduled jobs with their rows,
// PromoteDue the due ones, Overdue the waiting ones past their deadline.
// jobs_ready carries status and expires_at for Counts and Position: the
// load gauge counts every lane's jobs once a second, and reading their rows
// instead (a gigabyte with a million queued 1 KiB jobs) took 1.3–1.6 s per
// count there, against 0.4 s for the index (BenchmarkBacklog). A job in a
// lane with a finished status is one whose delivery is pending (finishing
// puts a job in the receiver's lane only with its delivery due, and the
// end of the delivery takes it out), so Counts needs no delivery_status.
// The price is a wider entry: status changes of a job in its lane (marked
// in flight, requeued) rewrite it, and an insert writes about 2 % more WAL
// pages (BenchmarkInsertParallel, 0.64–0.66 against 0.63–0.65). The new
// indexes serve the maintenance reads too: ResetStale finds the in-flight
// jobs through jobs_status, DeleteFinished the finished ones, the purge
// scans jobs_status alone (SCAN jobs USING COVERING INDEX jobs_status), and
// CountUnfinished, a tenant's quota, reads the tenant's range of jobs_user
// (its SQL keeps SQLite off jobs_status, which would visit every tenant's
// unfinished jobs).
//
// # Bulk operations
//
// RunBatch is one writer operation: it compares the stored operation's
// processed count with PrevProcessed (a mismatch writes nothing and returns
// ports.ErrOperationConflict), re-queues or cancels each listed job still in
// a state to be acted on (the condition is in the UPDATE's WHERE, so a job
// that moved on is left alone and none is changed twice), and saves the
// operation's new progress, all in the group's transaction: after a crash
// the jobs' changes and the progress are both there or both absent.
package sqlite
