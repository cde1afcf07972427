// Package postgres is a JobStore on PostgreSQL (pgx/v5) that several aquiferd
// processes can share.
//
// # Schema
//
// The SQL migrations in migrations/ are embedded and applied by Open, all in
// one transaction that first takes pg_advisory_xact_lock(migrationLockKey):
// processes starting at once queue on the lock, and the later ones find the
// versions already recorded in aquifer_schema_migrations. A database at a
// newer version than this binary knows is refused. With Options.Schema set,
// the schema is created if missing and put first on every connection's
// search_path.
//
// Each job is one row for its whole lifecycle (request, result, webhook
// delivery), as in the SQLite store. Job times are Unix milliseconds from the
// application's clock; ownership leases use the database clock.
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
// against this process and every other. Each caller waits for its own
// operation's commit (MarkInFlight is fire-and-forget); a failed transaction
// fails every operation in it; MarkInFlight operations superseded by a Finish
// of the same job in the same group are skipped. Inserts whose key turned out
// to be taken are settled afterwards, each in a transaction of its own: the
// live holder is returned, an expired holder is deleted and the insert tried
// again. A group PostgreSQL refuses for its data is re-run one operation per
// transaction, so one bad value fails one caller; a deadlock with another
// process's group is retried. Every operation is bounded by Options.Timeout,
// and any backend failure is returned as domain.Unavailable: while the
// database is unreachable operations fail promptly, and once it is back the
// pool reconnects by itself.
//
// # Ownership
//
// Every job has an owner: the process (Options.Owner, which must be unique
// among the processes sharing the database) that dispatches its next action.
// Liveness is per process, not per job: aquifer_owners holds one lease row
// per process, valid until a database-clock time that the process renews
// every Lease/3. Work whose owner's lease has run out is orphaned. Keeping
// the lease on the process makes a renewal one row write however many jobs
// the process holds (renewing an owner_until column on every job would
// rewrite the whole backlog every few seconds, and its row locks would make
// the claims' SKIP LOCKED pass over the renewer's own jobs).
//
//   - Insert makes the new job the inserting process's (it hands the job
//     straight to its own lane). A duplicate insert leaves the existing job
//     and its owner alone.
//   - ListReady claims what it returns. In one statement it takes over
//     (UPDATE ... SET owner = me, rows chosen FOR UPDATE SKIP LOCKED) the
//     first orphaned jobs after the cursor, reads the process's own jobs
//     after the cursor, and returns the first Limit of both in ReadySeq
//     order. Jobs a live peer owns are invisible. Two processes claiming the
//     same orphaned rows at once get disjoint sets: a row locked by one
//     claimer is skipped by the other, and a row claimed since the
//     statement's snapshot fails the re-check after the lock.
//   - Requeue and Finish make the job the writing process's (it keeps the
//     retry, or gets the delivery Finish makes due). A Finish without
//     delivery and FinishDelivery end ownership (the job leaves its lane).
//   - OrphanedLanes lists the lanes of dead owners' ready work, so the app
//     wakes those lanes and re-reads them from the start.
//   - RecoverInFlight and ResetStale only touch this process's jobs and
//     orphaned ones, never a live peer's in-flight work. An orphaned in-flight
//     job is reset by a peer's ResetStale once its attempt is older than the
//     stale cut-off (its owner may only have lost the database, not died), or
//     at once by a RecoverInFlight at a peer's start-up.
//   - Close releases the process's lease (after committing pending writes),
//     so peers take over its remaining work at their next orphan check
//     instead of a lease later. A process that dies without closing loses
//     its work to peers one lease after its last renewal.
//
// A process whose lease ran out while it still runs (it could not reach the
// database for longer than the lease) may find that peers took over some of
// the work it holds in memory; both may then dispatch it. Aquifer's delivery
// is at-least-once, so this is allowed, and the lease (default 30s) keeps it
// to real outages.
//
// # ReadySeq and commit order
//
// Lanes page their queue with "ReadySeq > cursor" and must never miss a job
// committed later with a smaller ReadySeq. The writer draws ReadySeq (and
// Seq) from the sequence jobs_seq inside its transaction, and one process
// has one writer that commits one transaction at a time, so within one
// process commit order is ReadySeq order. Across processes it is not: A may
// draw 100, B draw 101 and commit first. That is harmless because a process
// only ever reads work it owns or orphaned work. Its own jobs got their
// ReadySeq from its own writer (Insert, Finish), or were claimed, and a
// claim happens in one of two ways: the orphan lies after the cursor and
// the read returns it, or it lies before the cursor, stays orphaned, and is
// reported by OrphanedLanes, whereupon the app re-reads the lane from the
// start. A peer's job with a smaller ReadySeq that commits late is not this
// process's to read until its owner dies, and then it is found the same way.
package postgres
