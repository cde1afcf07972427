// Package postgres is a JobStore on PostgreSQL (pgx/v5) that several aquiferd
// processes can share. It also implements ports.Cluster, through which those
// processes split the dispatcher's lanes between them (lane leases), hear
// each other (LISTEN/NOTIFY) and share pool membership.
//
// # Schema
//
// The SQL migrations in migrations/ are embedded and applied by Open, all in
// one transaction that first takes pg_advisory_xact_lock(migrationLockKey):
// processes starting at once queue on the lock, and the later ones find the
// versions already recorded in aquifer_schema_migrations. A database at a
// newer version than this binary knows is refused. With Options.Schema set,
// the schema is created if missing and put first on every connection's
// search_path. Version 2 replaced per-job claims (version 1) by lane leases;
// processes of both versions must not share a database. Versions 3 and 4
// add what operators need (see Operator reads): version 3's Go step fills
// the new derived columns of the jobs already stored, and version 4 then
// builds the listing indexes, so migrating a large table takes a while
// (23 s for 1,000,000 jobs on 2 busy cores: 15 s to fill, 8 s for the
// indexes), bounded by Options.MigrationTimeout, while other processes'
// Opens wait; processes of version 2 insert jobs without the derived
// columns and must be stopped first. Version 5 adds the job options (see
// Job options): four columns whose defaults are what the stored jobs are
// (no schedule, no deadline, normal priority, no options), added without
// rewriting the table, and it rebuilds the ready index with the priority
// and builds two partial indexes, which takes a scan of the table (seconds
// per million jobs) while other processes' Opens wait. Processes of
// version 4 would insert every job as normal priority with no options and
// read lanes without regard to priority: stop them first.
//
// Each job is one row for its whole lifecycle (request, result, webhook
// delivery), as in the SQLite store. Job times are Unix milliseconds from the
// application's clock; leases use the database clock, because they are
// compared between processes.
//
// # Group commit
//
// Writes go through a single writer goroutine per store. It takes every
// operation waiting (yielding the processor GatherYields times so more can
// join), and sends the whole group as one pipelined pgx batch, which
// PostgreSQL runs as one implicit transaction committed at the batch's end:
// one round trip and one WAL flush for the group. New jobs of a group go in
// as a single multi-row INSERT ... ON CONFLICT (user_id, idempotent_key) DO
// NOTHING RETURNING, so the unique index decides idempotency atomically,
// against this process and every other. Likewise the group's marks in
// flight, requeues (of each phase), finishes and delivery outcomes go in
// as one UPDATE ... FROM unnest(...) per kind, each returning the ids it
// changed (and a Finish's new ready_seq), from which every caller gets
// the answer its own statement would have given: not found where its row
// did not match, and for a Finish whose row did not match, a lookup of
// the job tells gone (not found) from already terminal (left alone). Only
// ops on a job no other op of the group names are merged, and an op that
// acts on jobs it does not name (RecoverInFlight, ResetStale, PromoteDue,
// a bulk operation's batch ...) is a barrier no op is moved across, so
// every job sees the group's ops in their order (merge.go). The rows of a
// merged statement are looked up by primary key in id order, under
// planner settings local to the group (sqlPlanByID): left to itself the
// planner may plan it, on a small or unanalyzed table, as a scan of the
// table, and keep that generic plan as the table grows. Each caller waits
// for its own operation's commit (MarkInFlight is fire-and-forget); a
// failed transaction fails every operation in it; MarkInFlight operations
// superseded by a Finish of the same job in the same group are skipped. Inserts whose key turned out
// to be taken are settled afterwards, each in a transaction of its own: the
// live holder is returned, an expired holder is deleted and the insert tried
// again. A group PostgreSQL refuses for its data is re-run one operation per
// transaction, so one bad value fails one caller; a deadlock with another
// process's group is retried. Every operation is bounded by Options.Timeout,
// and any backend failure is returned as domain.Unavailable: while the
// database is unreachable operations fail promptly, and once it is back the
// pool reconnects by itself. The operations themselves, submitting them and
// waiting, the skipping of superseded marks and the JobStore methods that
// only submit an operation are internal/storekit's, shared with the other
// durable stores; this package applies a group (writer.go).
//
// # Processes
//
// Each process (Options.Owner, its instance id, which must be unique among
// the processes sharing the database) has a liveness lease: a row of
// aquifer_owners valid until a database-clock time that the process renews
// every Lease/3. A process is alive while that time lies ahead; Instances
// lists the live ones. Close ends the lease at once; a process that dies
// without closing is alive until one Lease after its last renewal.
//
// # Lane leases
//
// The app's unit of dispatch is the upstream (domain.UpstreamKey: a URL's
// scheme://host:port, "pool:<id>", a webhook receiver), which covers the
// upstream's shared store lane (named like the upstream) and its tenant
// lanes ("<upstream>|<tenant>"). At most one process at a time holds an
// upstream's lease, a row of aquifer_lanes (owner, until on the database
// clock), and it alone dispatches the upstream's ready jobs, whichever
// process inserted them, so the upstream's pace is global. The holder saves
// the pacing state it learned with the lease; the next holder gets it.
//
// SyncLeases is one transaction of three statements sent as one pipelined
// batch, whatever the number of jobs: create the (free) rows of wanted lanes
// never seen before; renew the held leases whose owner is still this process
// (until = now() + TTL, or the later until already there, saving their
// state); take free or expired wanted leases (until < now(), or a stray
// lease of this process's), up to Max in all, returning the state saved
// with them. Exclusivity rests on row locks, on READ COMMITTED's re-check
// of a locked row and on until never moving back except on release:
//
//   - Taking locks its candidates FOR UPDATE SKIP LOCKED. A row another
//     transaction is taking or renewing is skipped, not waited for. A row
//     another process took after this statement's snapshot is locked in its
//     newest version and the WHERE clause re-evaluated: its until now lies
//     ahead and its owner is another process, so it is left out (and LIMIT
//     moves on to the next candidate). Of two processes racing for a lane,
//     one takes it; the other either skips it while locked or finds it taken.
//   - Renewing locks the held rows (in upstream order, so overlapping
//     renewals cannot deadlock) with the same re-check of owner = this
//     process: a lease that ran out and was taken by another process is
//     neither renewed nor returned, and the caller must stop dispatching
//     that lane at once. A lease that ran out but was not taken is renewed:
//     nobody else dispatched the lane meanwhile.
//   - Leases are compared with the database's now(), the start of the
//     taking transaction. A holder should treat its lease as ending at the
//     start of the SyncLeases call that granted it plus the TTL, by its own
//     clock: that is never later than the lease's end on the database, so
//     its view of the lease ends before another process can take it (up to
//     the skew between the two machines' clocks).
//   - Renewing and taking write the later of now() + TTL and the until
//     already there. Two transactions of one process (concurrent calls, or
//     a call its caller gave up on that the database still runs) may write
//     a lease in the opposite order of their starts; the earlier one, with
//     the earlier now(), passes the owner re-check, and writing its own
//     now() + TTL would cut short the lease the later call returned, so
//     that another process could take the lane while its holder still
//     dispatches it.
//
// ReleaseLeases saves the state and sets until to -infinity, so the lanes
// are free at once; Close frees the leases this process still holds, and
// Open frees those a previous run under the same instance id left.
//
// A holder cut off from the database for longer than the TTL loses its
// lanes to peers while it may still run attempts it started; both may then
// dispatch a job. Delivery is at-least-once, so this is allowed, and a short
// TTL with frequent syncs keeps it to real outages.
//
// # Job ownership
//
// The owner column of a job names the process that ran or last touched its
// attempt: the inserting process, then whichever process marks it in
// flight, requeues it or finishes it (MarkInFlight, Requeue, Finish,
// FinishDelivery set owner = this process). It decides nothing about who
// dispatches the job; recovery uses it to tell running attempts from
// abandoned ones:
//
//   - ListReady returns every unexpired ready job of the lane after the
//     cursor, in ReadySeq order, and claims nothing: the app calls it only
//     for lanes whose lease it holds.
//   - A dead process's lanes are taken over through SyncLeases, not job by
//     job.
//   - RecoverInFlight (start-up) resets this process's own in-flight jobs (a
//     previous run under the same id left them) and dead processes'.
//   - ResetStale resets in-flight jobs older than the cut-off that are this
//     process's or a dead process's (a live peer's attempt is its own
//     business).
//   - RecoverLane(upstream), which the app calls when it takes a lane over,
//     resets the upstream's in-flight jobs (shared and tenant lanes, matched
//     by an index range on ready_lane) whose owner is not alive. A process
//     that died is not alive until its liveness lease runs out: with
//     Options.Lease longer than the lane lease TTL, a takeover may come
//     before that, and the dead process's in-flight jobs are found by a
//     later RecoverLane or ResetStale. Keep Options.Lease close to the TTL.
//
// # ReadySeq and commit order
//
// Lanes page their queue with "ReadySeq > cursor". The writer draws
// ReadySeq (and Seq) from the sequence jobs_seq inside its transaction, and
// one process has one writer that commits one transaction at a time, so
// within one process commit order is ReadySeq order and a holder never
// misses its own inserts. Across processes it is not: process A may draw
// 100, B draw 101 and commit first; the holder of the lane may read 101,
// move its cursor past 100, and only then see 100 commit. The store cannot
// prevent that without serializing every insert of the cluster. The app
// handles it: the inserting process broadcasts a WorkNotice{Lane, ReadySeq}
// after its commit (and so does Finish for a delivery it makes due in
// another process's lane), and the holder re-reads the lane from
// ReadySeq-1; since messages are best effort, the holder also re-reads each
// of its lanes from the start now and then. A new holder reads its lanes
// from the start, after RecoverLane. Jobs that become ready again with an
// old ReadySeq (RecoverLane, ResetStale, RecoverInFlight) are found the
// same ways.
//
// # Messages
//
// Broadcast and Listen use LISTEN/NOTIFY on one channel per database and
// schema ("aquifer", or "aquifer_<schema>"). Broadcast never blocks: it
// copies the message (without event results; readers load the job) into a
// buffer of Options.NotifyBuffer messages, or drops it and counts it
// (Stats.Dropped) when the buffer is full. A notifier goroutine, woken by
// the first message, waits Options.NotifyInterval for more, merges what it
// has (events in order, one work notice per lane with the smallest
// ReadySeq, each pool once, whether the lane pauses changed) into compact
// JSON payloads under PostgreSQL's 8000-byte limit, and sends them with
// pg_notify in one transaction; Close
// sends what is left. Listen holds a connection of its own, LISTENs, skips
// this process's own messages and delivers the others; after a connection
// error, or a check that fails after a quiet spell, it reconnects with
// backoff until its context ends. Messages sent while it reconnects are
// lost; peers catch up through their periodic re-reads.
//
// # Operator reads
//
// ListJobs and CountJobs (ports.OperatorStore) select the jobs
// domain.JobFilter.Matches does, exactly. What the filters compare is
// computed once, when a job is inserted, by the domain's own functions
// (derive): tenant (domain.Unscope of user_id, empty when unscoped), upstream
// (QueueKey.Upstream of the job's queue, so a destination covers its
// tenant queues) and url_path (domain.URLPath, without the query). A tenant
// filter is tenant = $t; user_id, destination and pool_id are equalities;
// creation bounds are integer comparisons rounded so that sub-millisecond
// bounds select what Matches does; q compares bytes, ASCII letters lowered
// on both sides (lower under the C collation lowers ASCII only), with
// position(bytea in bytea), so any q, even invalid UTF-8, is domain
// ContainsFold.
//
// Four B-tree indexes serve the listings (migration 4):
//
//	jobs_list          (status, seq)
//	jobs_list_upstream (upstream, status, seq) INCLUDE (expires_at) WHERE status <> 'in_flight'
//	jobs_list_user     (user_id, status, seq) INCLUDE (expires_at) WHERE status <> 'in_flight'
//	jobs_list_tenant   (tenant, status, seq) INCLUDE (expires_at) WHERE tenant <> '' AND status <> 'in_flight'
//
// The filtered indexes leave out in-flight jobs, so that marking a job in
// flight, once per attempt, adds one index entry rather than four; in-flight
// jobs are few (the lanes' concurrency), and a listing's in_flight branch
// reads them through jobs_list's in_flight range, newest first, testing the
// filter on each.
//
// A listing is one branch per status the filter lets through (all four
// when it names none; only terminal ones with a response_status filter),
// the status a literal of the branch:
//
//	SELECT <job> FROM ((SELECT <job> FROM jobs WHERE status = 'queued' AND <filter>
//	    AND seq < $before ORDER BY seq DESC LIMIT $n) UNION ALL (... 'in_flight' ...) ...)
//	  AS b ORDER BY seq DESC LIMIT $n
//
// Each branch is a backward range scan of the index that leads with the
// filter's equality (the status alone when there is none), from the
// cursor, stopping at the page's size; Merge Append interleaves them. A
// first page costs about a page of index entries and of heap rows, whatever
// the table holds, and so does every later page (the cursor is in the
// index condition). Plans on a table of 1,000,000 jobs (seedListing: 80%
// completed, 5% failed, 14% queued, 1% in flight, 199 destinations, 997
// users, 2 jobs in 11 in 7 tenants), generic plans of the prepared
// statements as pgx runs them (TestOperatorQueriesUseIndexes; custom plans
// are the same or a bitmap scan and sort of a few rows):
//
//	ListJobs ?status=failed
//	Limit (actual time=0.011..0.042 rows=100)
//	  -> Index Scan Backward using jobs_list on jobs (rows=100)
//	       Index Cond: ((status = 'failed'::text) AND (seq < $2))
//	       Filter: (expires_at > $1)
//	Execution Time: 0.052 ms
//
//	ListJobs ?destination=http://up7.test:80
//	Limit (actual time=0.063..0.305 rows=100)
//	  -> Merge Append  Sort Key: jobs.seq DESC
//	       -> Limit -> Index Scan Backward using jobs_list_upstream on jobs (rows=15)
//	            Index Cond: ((upstream = $2) AND (status = 'queued'::text) AND (seq < $3))
//	       -> Limit -> Index Scan Backward using jobs_list on jobs jobs_1 (rows=2)
//	            Index Cond: ((status = 'in_flight'::text) AND (seq < $3))
//	            Filter: ((expires_at > $1) AND (upstream = $2))  Rows Removed by Filter: 232
//	       -> Limit -> Index Scan Backward using jobs_list_upstream on jobs jobs_2 (rows=81)
//	            Index Cond: ((upstream = $2) AND (status = 'completed'::text) AND (seq < $3))
//	       -> Limit -> Index Scan Backward using jobs_list_upstream on jobs jobs_3 (rows=5)
//	            Index Cond: ((upstream = $2) AND (status = 'failed'::text) AND (seq < $3))
//	Execution Time: 0.337 ms
//
//	ListJobs ?user_id=u42: the same shape on jobs_list_user; its in_flight
//	branch is a BitmapAnd of jobs_idempotency (user_id) and jobs_list
//	(the 10,000 in flight), 1.4 of its 1.6 ms
//
//	ListJobs ?status=failed, a tenant's key
//	Limit (actual time=0.013..0.081 rows=100)
//	  -> Index Scan Backward using jobs_list_tenant on jobs (rows=100)
//	       Index Cond: ((tenant = $2) AND (status = 'failed'::text) AND (seq < $3))
//	Execution Time: 0.092 ms
//
// (The condition that tenant is not empty goes with tenant = $t so generic
// plans may use the partial index.) Other filters (pool_id, creation
// bounds, response_status, q) are conditions on the rows one of these
// ranges yields: a page costs what it takes to find a page of matches in
// that range, so a rare match may read much of it. q in particular tests
// every row it reads; 100 failed jobs whose path holds "items/4", out of
// 50,000 failed ones, took 54 ms, and a q that matches nothing reads the
// whole range. A listing's in_flight branch reads at most the jobs in
// flight (a seed of 1% in flight, far more than the lanes' concurrency
// usually allows, makes that 10,000).
//
// CountJobs is SELECT status, count(*) FROM jobs WHERE <filter> GROUP BY
// status; the filter's statuses play no part in counts. With a
// destination, user or tenant it is an index-only scan of that range of
// its listing index (the index holds status and expires_at; heap fetches
// only for pages autovacuum has not marked all-visible), and the matching
// in-flight jobs, which that index leaves out, are counted apart (UNION
// ALL ... WHERE status = 'in_flight'), among all jobs in flight:
//
//	CountJobs ?destination=... (4,975 jobs, 51 of them in flight)
//	Append (actual time=0.598..12.251 rows=4)
//	  -> GroupAggregate
//	       -> Index Only Scan using jobs_list_upstream on jobs (rows=4975)
//	            Index Cond: (upstream = $2)  Filter: (expires_at > $1)  Heap Fetches: 0
//	          (0.73 ms)
//	  -> Aggregate  Filter: (count(*) > 0)
//	       -> Index Scan using jobs_in_flight on jobs jobs_1 (rows=51)
//	            Filter: ((expires_at > $1) AND (upstream = $2))  Rows Removed by Filter: 9949
//	Execution Time: 12.289 ms
//	CountJobs for a user (813 jobs): Index Only Scan using jobs_list_user, 0.9 ms
//	CountJobs for a tenant (25,714 jobs): Index Only Scan using jobs_list_tenant, 8.8 ms,
//	  and the in-flight ones as above
//
// (With a realistic number of jobs in flight, a few hundred, their part is
// well under a millisecond.)
//
// Counting every job reads every job: the planner takes a parallel
// sequential scan of a large table (an index-only scan of a listing index,
// which it takes for smaller ones, is no faster once the table is cached);
// 1,000,000 jobs take 0.1 s (cached, idle machine) to 0.4 s. Exact counts
// that cost less would need counters every write updates, which would
// serialize the writers of every process and could not leave out jobs that
// expired but were not purged yet. Counts with the other filters read like
// their listing, every row of the range.
//
// The indexes cost the writer: an insert adds an entry to each (the tenant
// index only for tenants' jobs), and so does each write that changes
// status (those were not HOT updates anyway: jobs_in_flight's predicate
// reads status), but marking a job in flight adds one, to jobs_list. In
// WAL, 1,000 inserts went from 4,056 records (715 kB) to 7,075 (1,000 kB),
// 1,000 marks in flight from 5,924 records to 7,026 (8,968 if those three
// indexes kept in-flight jobs). bench_test.go measures the time.
//
// Reads never block the writer: PostgreSQL's readers take no lock a writer
// waits for, and listings and counts are limited to Options.MaxConns/4 at a
// time (scan), so that slow ones (q, large counts) cannot hold every pooled
// connection while the writer needs one. Each is bounded by
// Options.Timeout.
//
// # Operator writes
//
// Retry, SaveOperation, RunBatch, PauseLane and ResumeLane are ops of the
// single writer (storekit.OperatorWrites), in the same group commits as the
// dispatcher's writes. Operations (aquifer_operations) and lane pauses
// (aquifer_lane_pauses) are tables every process reads, so a pause holds
// for every instance and any instance can resume an operation. RunBatch is
// one statement of data-modifying CTEs: the first locks the operation's row
// (SELECT ... FOR UPDATE) only where processed is still the runner's
// PrevProcessed; the job changes and the update of the operation (its
// changed and skipped counts increased by what the batch did) are
// conditioned on that row having been selected, so they commit together or
// not at all. The lock makes two runners of one operation, in one process
// or two, take turns; under READ COMMITTED the second re-reads the
// committed row, finds processed moved on, changes nothing and gets
// ports.ErrOperationConflict. Retried and cancelled jobs get a new
// ready_seq and are owned by the process that changed them, as after
// Finish.
//
// # Job options
//
// A job's options (domain.JobOptions) are four columns (migration 5):
// not_before and deadline (Unix ms, 0: none), priority (-1 low, 0 normal,
// 1 high; a CHECK keeps it to those) and options, the rest (retry policy,
// timeout, trace context) as storekit.EncodeOptions's small JSON, empty for
// most jobs. Every read returns them (jobColumns). What each index holds,
// and so what it costs the writer:
//
//	jobs_ready     (ready_lane, priority, ready_seq) WHERE ready_lane <> ''
//	jobs_scheduled (not_before, seq) INCLUDE (expires_at)
//	                 WHERE ready_lane = '' AND status = 'queued' AND not_before <> 0
//	jobs_deadline  (deadline, seq) WHERE deadline <> 0 AND status = 'queued'
//
// jobs_ready replaces version 1's (ready_lane, ready_seq): every job in a
// queue was in it already, and its entries are a few bytes longer (the
// smallint). A plain job — due at once, no deadline — never enters
// jobs_scheduled or jobs_deadline, at insert or at any later write, so it
// costs what it did (TestPlainJobsCostNoOptionIndexes holds them to their
// empty size through a plain job's lifecycle). A scheduled job has an entry
// in jobs_scheduled from insert until it is promoted (ready_lane set) or
// finished, cancelled included (status no longer queued); a job with a
// deadline has one in jobs_deadline whenever it is queued (marking it in
// flight takes it out, a requeue puts it back). Retry and RunBatch's retry
// clear both, so a retried job is in neither. In WAL, a plain job's insert
// went from 1,080 to 1,105 bytes (the four columns, about 20 bytes of the
// row, and jobs_ready's priority), its mark in flight and finish from 969
// to 985 bytes, and 4,000 finished jobs' indexes from 2,661 to 2,704 kB.
//
// A scheduled job is inserted with an empty ready_lane and ready_seq 0: it is in
// no queue, and ListReady, ReadyQueues and Position, which read jobs_ready,
// never see it. Counts counts it as queued (an index-only count of
// jobs_scheduled beside the count of the queues). The writer's insert sets
// ready_seq = seq only for jobs that are ready at once.
//
// PromoteDue is one op of the writer, one statement in its group commit:
// a CTE selects the due jobs from jobs_scheduled in (not_before, seq)
// order, LIMIT n, FOR UPDATE SKIP LOCKED; the next draws a ready_seq from
// jobs_seq for each in that order; the update sets ready_lane to the job's
// queue and owner to this process. Several processes may promote at once:
// a job another process's statement holds locked is skipped, not waited
// for, and one it promoted after this statement's snapshot is re-checked
// in its newest version (READ COMMITTED), no longer scheduled, and left out,
// so each job is promoted exactly once (TestPromoteDueAcrossProcesses).
// Within one call the ready_seqs follow (not_before, seq); across
// processes, as with inserts, commit order need not be ready_seq order,
// and the app's work notices for other processes' lanes cover that (see
// ReadySeq and commit order). NextDue is the first entry of
// jobs_scheduled. Overdue reads jobs_deadline from its start up to now,
// leaving out expired jobs, and stops after its limit.
//
// ListReady reads one priority of a lane, a range of jobs_ready from the
// cursor as before. Position counts the jobs ahead of every priority as
// three ranges of the same index (priority IN (-1, 0, 1), the CHECK
// makes that every job).
//
// InsertBatch is one op, three statements of the group's transaction, so
// the batch commits with its group or not at all: the expired holders of
// its keys are deleted; one INSERT ... ON CONFLICT DO NOTHING takes the
// first job of each key (DISTINCT ON, in the batch's order), draws seq and
// ready_seq for them in the batch's order and inserts them in key order
// (the lock order of every insert here, so two processes' groups cannot
// deadlock on keys within one statement); a third statement, with a
// snapshot of its own that sees a holder the insert waited for, reads the
// live holders of the keys found taken. A job is then fresh, a duplicate
// of a stored job, or of an earlier job of the batch. A group holding a
// batch and single inserts takes their keys in two statements, so two
// processes' groups may deadlock on them; PostgreSQL breaks that and the
// writer runs the group again (see Group commit). If a holder the insert
// saw is deleted (by another process) before the third statement reads it,
// the op fails as unavailable while the rest of the batch stays stored;
// run again, the batch answers those jobs as duplicates.
//
// Plans on TestQueriesUseIndexes's table (AQUIFER_EXPLAIN_ROWS=300000:
// 90% unfinished in 40 lanes and their tenant lanes, a seventh of the jobs
// high priority and a seventh low, one in 50 scheduled, one in 30 with a
// deadline), generic plans of the prepared statements (custom plans are
// the same); the test holds each to its index and to no sequential scan:
//
//	ListReady (one priority of a lane, 100 after the cursor)
//	Limit (actual time=0.030..0.216 rows=100)
//	  -> Index Scan using jobs_ready on jobs (rows=100)
//	       Index Cond: ((ready_lane = $1) AND (priority = $5) AND (ready_seq > $2))
//	       Filter: ((status <> 'in_flight'::text) AND (expires_at > $3))  Rows Removed by Filter: 2
//	Execution Time: 0.256 ms
//
//	PromoteDue (100 of the 1,500 due)
//	Update on jobs (actual time=0.798..5.878 rows=100)
//	  CTE due -> Limit -> LockRows
//	       -> Index Scan using jobs_scheduled on jobs jobs_1 (rows=100)
//	            Index Cond: (not_before <= $1)
//	  CTE numbered -> Subquery Scan -> Sort (due.not_before, due.seq) -> CTE Scan on due
//	  -> Nested Loop -> CTE Scan on numbered
//	       -> Index Scan using jobs_pkey on jobs (loops=100)
//	Execution Time: 5.951 ms
//
//	NextDue
//	Limit -> Index Only Scan using jobs_scheduled on jobs (rows=1)
//	Execution Time: 0.026 ms
//
//	Overdue (100 of the 5,000 past their deadline)
//	Limit (actual time=0.019..0.160 rows=100)
//	  -> Index Scan using jobs_deadline on jobs (rows=100)
//	       Index Cond: (deadline <= $1)  Filter: (expires_at > $1)
//	Execution Time: 0.186 ms
//
//	Position (3,712 jobs ahead, all priorities)
//	Aggregate (actual time=9.141..9.144 rows=1)
//	  -> Bitmap Heap Scan on jobs (rows=3712)  Heap Blocks: exact=3680
//	       -> Bitmap Index Scan on jobs_ready (rows=3750)
//	            Index Cond: ((ready_lane = $1) AND (priority = ANY ('{-1,0,1}')) AND (ready_seq < $2))
//	Execution Time: 9.184 ms
//
// InsertBatch's two reads are a nested loop over the batch's keys, an index
// scan of jobs_idempotency per key. Counts reads the queues as before (a
// parallel sequential scan when, as here, they are most of the table;
// 90 ms for 264,000 waiting jobs) plus an index-only count of
// jobs_scheduled (10 ms for 6,000 scheduled jobs, heap fetches included
// before autovacuum marks the pages visible).
//
// # Pools
//
// aquifer_pool_members holds every pool's members. Any process registers a
// member or records its heartbeat (PutMember: last_seen is the database's
// now(), reputation and counters are kept); the holder of the pool's lane
// lease saves the state it keeps (SaveMemberStates, which updates existing
// rows only, so a member deleted meanwhile stays deleted).
package postgres
