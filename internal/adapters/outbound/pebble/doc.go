// Package pebble is a JobStore on Pebble (github.com/cockroachdb/pebble/v2),
// an embedded LSM key-value store. Only one process can open a Pebble
// directory (Pebble holds a lock file), so nothing is ever orphaned.
//
// # Writes
//
// Every write goes through one writer goroutine, as in the sqlite store;
// the operations, submitting them and the JobStore methods that only submit
// one are internal/storekit's, and this package applies a group. The
// writer takes every operation waiting (up to Options.MaxBatch, yielding the
// processor Options.GatherYields times so goroutines about to submit can join),
// applies them in order to one indexed batch (pebble.DB.NewIndexedBatch), and
// commits the batch with pebble.Sync: one WAL write and fsync for the group.
// Reads inside a group go through the indexed batch, so they see the group's
// own earlier writes: two inserts of one idempotency key in one group find
// each other. Because nothing else writes, the read-check-write of each
// operation (insert-if-absent, "only if still in flight", ...) is atomic
// without locks or conflict retries. Seq and ReadySeq come from one counter
// the writer owns and assigns while it applies a group, so they follow commit
// order; the counter is stored (m/seq) in every batch that advances it, so it
// never goes back, not even after the job holding the highest value is
// purged and the store reopened.
//
// A caller returns only once the commit holding its operation is synced
// (MarkInFlight excepted: it does not wait, as the JobStore contract allows).
// The writer waits for each commit before it starts the next group, as the
// sqlite writer does; ops that arrive meanwhile form the next group. (Letting
// the writer apply the next group while the previous one syncs, with
// pebble.DB.ApplyNoSyncWait, measured no faster here, with real or with
// 1 ms-slower fsyncs: Pebble puts every pending WAL write in one fsync either
// way.)
//
// A commit that fails fails every operation in its group. Pebble treats a
// failed commit as fatal to the database (it calls Logger.Fatalf; the
// store's logger panics and the writer recovers it), so the writer closes
// that database and opens the directory read-only: reads go on from what
// is durable, without the failed group that Pebble had already made
// visible. Writes fail as unavailable until the disk takes writes again —
// the writer tries, at most every 250 ms, to write and sync a 1 MiB probe
// file — and then the database is reopened for writing from disk. Nothing
// acknowledged is lost (every commit synced the WAL) and no restart is
// needed. A fatal error outside a commit (a MANIFEST write in a background
// flush) still ends the process; a restart recovers from the WAL. The
// writer remembers its latest commit error until the next success
// (CheckWrites), probing when idle. An operation's own outcome (not found, a record it cannot
// decode) fails that operation alone. MarkInFlight operations made moot by a
// Finish of the same job later in the same group are skipped.
//
// Pebble makes a batch visible to readers once it is applied to the memtable,
// before its WAL fsync finishes: a concurrent reader can see a write whose
// caller has not been answered yet (and which a crash in that window would
// lose).
//
// # Reads
//
// Get, Lookup, ListReady, Position, ReadyQueues, Counts, NextDue and Overdue
// read the database directly with point lookups and bounded iterators, never
// through the writer. Position reads only the ready index, never a record.
// Every read that returns a job reads its request body too, if it is under
// b/ (below). Get, Lookup and Overdue make a second point read after the
// record's; no snapshot is needed for the two to agree, as a body never
// changes while its record lives and its key goes only with the record: a
// body missing after its record was read means the job was deleted in
// between (it reads as gone), unless the record is still there (a corrupt
// store). ListReady and ListJobs read a page in one snapshot, its records
// through one iterator over j/ and its bodies through one over b/, in
// about id order, so that each seek moves forward from the last
// (bodyReader); for ListReady, which made a point read per record before,
// that more than pays for the bodies (BenchmarkListReadyBody1KiB: a page
// of 100 jobs at random places in a lane of 200,000, 0.91–1.11 ms before
// layout 6, 0.62–0.80 ms after). Reads that only look at
// jobs — Counts, CountJobs, the ledger, DeleteFinished's and ResetStale's
// candidates, RecoverInFlight, Purge — read no body.
// Counts reads three counters (c/ below) and the w/ range up to now, in
// one snapshot: the counters count a job until it is purged, so the
// waiting jobs that have expired are found there and their records read
// (without bodies) to take them off. A waiting job expires only after a
// day of waiting, so that range is nearly always empty, and the finished
// jobs that expire by the thousand between two purge sweeps are in e/,
// which Counts does not read: it costs a few point reads at any backlog. ListReady reads one
// priority's range of its lane; NextDue is the first s/ key; Overdue walks
// the d/ range up to now.
// PromoteDue is a write: the writer reads the s/ range up to now through
// the group's batch, so a job promoted earlier in the group is not found
// again. The Seq hints
// in ports' parameter structs are not needed: records are keyed by job id.
//
// ListJobs and CountJobs (ports.OperatorStore) read one Pebble snapshot
// each, so the indexes and the records they read agree, and take no lock
// the writer takes: an operator listing never holds up ingest, and a write
// committed during a listing is simply not in it. The plans are below
// (Listing and counting).
//
// # Key layout
//
// All integers in keys are big-endian so that byte order is numeric order.
// Variable-length parts that are followed by more key bytes are prefixed with
// their length as a uvarint, so no choice of separator byte can make two
// different tuples collide (("a:b","c") and ("a","b:c") are different keys,
// and a lane containing a NUL byte cannot run into the next field). A
// <^seq:8> is the bitwise complement of a job's Seq, so that forward
// iteration, Pebble's fast direction, goes newest first.
//
//	j/<job id>                                       → the job record (see below)
//	b/<job id>                                       → the job's request body, if over 64 bytes (version 4 records)
//	k/<uvarint len(user)><user><idempotent key>      → <job id>
//	r/<uvarint len(lane)><ready lane><prio:1><ready_seq:8> → <state:1><expires_at ms:8><job id>
//	s/<not_before ms:8><seq:8>                       → <expires_at ms:8><job id>
//	d/<deadline ms:8><seq:8>                         → <job id>
//	e/<expires_at ms:8><job id>                      → empty (finished jobs)
//	w/<expires_at ms:8><job id>                      → empty (waiting jobs)
//	x/<status:1><^seq:8>                             → <summary><response status varint>
//	i/<dim:1><uvarint len(value)><value><^seq:8>     → <job id, packed>
//	c/<dim:1><uvarint len(value)><value><status:1>   → <count:8>
//	c/*<0><'d'>                                      → <pending deliveries:8>
//	o/<operation id>                                 → the bulk operation, JSON (its filter as storekit.EncodeFilter)
//	p/<upstream>                                     → <paused at ms varint><reason>
//	m/seq                                            → <highest seq or ready_seq ever assigned:8>
//	m/format                                         → <layout version:1> (currently 6)
//	m/probe                                          → <time of the latest write probe, ms:8> (never read)
//
// j/ holds one record per job for its whole lifecycle (request, result,
// webhook delivery, attempt history), keyed by the job id: Get is one point
// lookup (two with the body), and since ids are time-ordered new records
// append at the end of the key space. The record carries the job's Seq.
//
// b/ holds the request body of each job whose record is of version 4
// (layout 6) and whose body is longer than 64 bytes (maxInlineBody). The
// body never changes, so the insert writes it once and nothing else does:
// the writes that follow (MarkInFlight, Requeue, Finish, FinishDelivery,
// Retry, PromoteDue, ...) rewrite the record without it, where before
// layout 6 every one of them rewrote the body with the record, to the WAL,
// the memtable and every flush and compaction after. A shorter body, an
// empty one or none stays in the record (the record's flags tell nil from
// empty, and its body length where the body is): a key of its own costs
// about 40 bytes of WAL and tables and a memtable insert, more than the
// three rewrites of a few tens of bytes it would save. The key is deleted
// in the batch that deletes the record (Delete, Purge, DeleteFinished, an
// insert taking an expired job's idempotency key), with a single delete:
// it is written once. A version 3 record (layout 5 and before) keeps its
// body inline, and the first write that rewrites it — as version 4 —
// moves a long body out to b/, in the same batch; that is its one write
// of the key. The
// writer never reads a body to rewrite a record (load decodes where the
// body is, and the rewrite keeps that); it reads b/ through the group's
// batch only for the ops that return a job: an insert answered by the
// live job holding the key, PromoteDue (the dispatcher is offered the
// job), ResetStale and Retry. The result body stays in the record: it is
// written by Finish and rewritten only by the delivery's writes (one or
// two), and moving it out would cost every Get of a finished job a third
// read.
//
// k/ finds a job by (user_id, idempotent_key). It names at most one job: an
// insert finding a live job there returns it, one finding an expired job
// deletes that job and takes the key.
//
// r/ is the ready index: one entry per job whose next action waits in a lane
// (Job.ReadyQueue != ""), ordered within the lane by priority (the prio byte
// is Priority.Class: 0 high, 1 normal, 2 low), then ReadySeq: each priority
// of a lane is its own ordered range, which ListReady pages (a lane is read
// one priority at a time), and Position counts the entries before a
// ReadySeq in all three. A job's priority never changes, and a result waits
// for delivery under its job's priority in the receiver's lane. The state byte
// is 'q' (queued for dispatch), 'f' (in flight: not waiting, skipped by
// ListReady and Position) or 'd' (result waiting for webhook delivery).
// The entry carries the job's expiry (0 for none) so Position can leave
// out expired jobs without loading records. Every write
// that changes a job's ready lane, ReadySeq, status or expiry rewrites its
// entry in the same batch.
//
// s/ is the scheduled index: one entry per scheduled job (Job.Scheduled:
// queued, NotBefore set, no ready lane), ordered by (NotBefore, Seq), which
// is the order PromoteDue promotes in; NextDue is its first key. A job
// promoted, finished (a cancel), deleted or purged leaves it in the same
// batch. The entry carries the job's expiry (unexpired scheduled jobs
// counted as queued from the s/ range before layout 5).
//
// d/ is the deadline index: one entry per unfinished job with a Deadline
// (queued, scheduled or in flight), ordered by (Deadline, Seq). It is
// written by the insert and deleted when the job finishes (or is deleted
// or purged); an in-flight job keeps its entry, so MarkInFlight and
// Requeue touch nothing here, and Overdue skips it by its record. Retry
// clears the deadline, so a retried job has none.
//
// e/ and w/ are the expiry indexes Purge walks in expiry order; the
// millisecond time has its sign bit flipped so that negative times sort
// first (as in s/ and d/). A job is in w/ while it waits — queued
// (scheduled or not), in flight, or with its result waiting for delivery:
// what Counts counts — and in e/ once it is finished with nothing left to
// do. An entry moves when the job's expiry changes or when it stops (or
// starts) waiting; those change together on every transition but
// MarkInFlight and RecoverInFlight, which keep it waiting. A job whose
// ExpiresAt is zero never expires and has no entry.
//
// x/ is the status index: one entry per job, under its status code ('q',
// 'f', 'c', 'x', as in records), newest first. It moves when the status
// changes and is rewritten when the response status does; nothing else
// touches it. Its 'f' range is also how ResetStale (every sweep) and
// RecoverInFlight (at start) find the jobs in flight, stepping over no
// waiting job. Its value, a summary, is <created_at ms varint>, the packed
// job id, then user_id, upstream and pool id as length-prefixed strings:
// every filter but q is decided from the entry, without loading the
// record.
//
// i/ indexes jobs by dimension, newest first, one entry per job and
// dimension: 'u' the stored user_id, 'd' the destination (the upstream of
// the job's queue, Queue.Upstream()), and 't' the tenant (the part of a
// scoped user_id before the scope separator; unscoped jobs have no 't'
// entry). A job's dimensions and seq never change, so its i/ entries are
// written by the insert and deleted with the job, nothing in between. The
// value is only the job id, to keep the entries every insert writes small.
//
// A packed job id is 1 and the 16 bytes of the 32 hex characters
// domain.IDGenerator makes (0 and the length-prefixed string for any other
// id). Each x/, i/, s/, d/ and b/ key is written once between deletes (an
// entry rewritten in place is deleted first), so it is deleted with
// Pebble's SingleDelete: a delete that meets its write in a flush or
// compaction drops both, instead of leaving a tombstone that listings step
// over and compactions carry down (a job that finishes within a memtable's
// lifetime leaves nothing of its x/q entry; PromoteDue and NextDue, which
// read s/ from its start, do not step over the entries of jobs promoted
// since the last compaction). Pebble
// reports a single delete that met no write, or two, as a possible misuse,
// which the store logs as an error.
//
// c/ holds how many stored jobs (expired ones included, until purged) have
// each status, overall (dim '*', empty value) and per value of each i/
// dimension. The writer sums a group's changes in memory and writes each
// changed counter once per group, deleting those that reach zero, so a
// count costs a few map updates per write and a point read and write per
// counter per group, not per job. One more counter, overall only (dim '*',
// empty value, code 'd', which no status has), counts the results waiting
// for webhook delivery — the jobs whose ready-index entry is 'd', expired
// ones included until purged — for Counts: the status counters give it
// the queued (scheduled among them) and in-flight jobs.
//
// o/ holds the bulk operations (few: one per bulk action), p/ the paused
// destinations in upstream order. RunBatch writes the jobs of a batch and
// the operation's o/ entry in one group batch, after comparing the stored
// progress: the changes and the progress commit together or not at all.
//
// The hot path pays for this with, per job: on insert one x/ and two or
// three i/ entries (7 keys where layout 2 wrote 4); on each status change
// (MarkInFlight, Requeue, Finish, Retry) an x/ delete and set; on purge or
// delete the same entries deleted; and a share of the group's counter
// writes. The extra keys cost most in Pebble's memtable inserts, flushes
// and compactions, not in the writer (see BenchmarkInsertParallel).
//
// Job options (layout 4) cost a plain job — normal priority, due at once,
// no deadline, no other option — one byte per ready-index key (the
// priority) and nothing else: its record is as long as in layout 3, and
// it has no s/ or d/ entry. A scheduled job writes an s/ entry at insert
// instead of an r/ one, and PromoteDue moves it (an s/ single delete, an
// r/ set, the record); a job with a deadline writes one d/ entry at insert
// and single-deletes it when it finishes. In the record, a priority alone
// costs 3 bytes, a NotBefore or a Deadline about 6 more each; the retry
// policy, timeout and trace context their size plus 6. InsertBatch
// writes what its inserts do, in one commit. Measured against layout 3
// (BenchmarkInsertParallel and BenchmarkLifecycle, the two builds run in
// turns on the shared two-core machine), plain jobs cost the same within
// the runs' spread: 27–34 µs of wall time and 22–35 µs of CPU per insert
// either way, 73–170 µs and 61–104 µs per lifecycle.
//
// Layout 5 adds no key to any write: a job's expiry entry moves between w/
// and e/ only in writes that already rewrote it (its expiry changes when it
// finishes and when its delivery does), and the deliveries counter is one
// more entry in the group's counter changes. BenchmarkBacklog
// (AQUIFER_BACKLOG=1000000) measures the hot path for one destination
// beside a million queued jobs of 1 KiB for another, the load gauge's
// Counts running every second as in the daemon: on the shared two-core
// machine Counts went from 0.5–0.7 s a call at a million jobs (a step
// per ready-index entry, most of a core for the gauge alone) to 15–50 µs
// at any backlog, inserts from 0.22–0.81 of the empty store's rate to
// 0.79–1.5, lifecycles from 0.22–0.31 to 0.62–1.2 (the runs' spread on a
// busy machine), and the process's peak RSS at a million from 142–151
// MiB to 98–102 MiB (Counts no longer pulls the ready index through the
// block cache).
//
// Layout 6 writes a job's request body once: a body over 64 bytes costs
// the insert one more key (about 40 bytes of WAL), and every later write
// of the job saves the body's bytes. With 1 KiB bodies
// (BenchmarkLifecycleBody1KiB: insert, MarkInFlight, Finish with a
// delivery due, FinishDelivery; the two builds run in turns) a lifecycle
// wrote 4.5 KB of WAL and 5.7–7.4 KB of tables before and 2.5 KB and
// 3.3–4.4 KB after, 2.4 KB less Go heap and 3 allocations fewer; its CPU
// was 86–109 µs before and 84–89 µs after over 100,000 jobs, within the
// noise of the shared machine over 20,000. Jobs whose bodies are short
// write what they wrote in layout 5 (docs/BENCHMARKS.md).
//
// # Listing and counting
//
// ListJobs first normalises the filter (a user_id outside the filter's
// tenant matches nothing; a user_id makes the tenant redundant), then picks
// what to walk, from the counters of the snapshot:
//
//   - the x/ ranges of the filter's statuses (all four when it names none),
//     merged newest first, each entry checked against the filter from its
//     summary: no record is read for a job that does not match, except for
//     q;
//   - or the i/ range of the filter's user, tenant or destination, when
//     that range is denser in matches: each entry's record is read, its
//     status byte checked before it is decoded.
//
// The estimate for each candidate is the entries it would read to find a
// page, n·limit/matches, where n is the range's size and matches the
// smallest count of any one dimension (over the filter's statuses), plus,
// for an i/ range, a record read per entry it rejects (weighted 32:
// reading a record found through the index costs about as much as reading
// 30 x/ entries once the records outgrow the block cache). So
// status=failed walks x/x, destination=d walks i/d/d, user_id=u walks
// i/u/u, tenant=t with status=failed walks x/x or i/t/t, whichever the
// estimate makes cheaper, and no filter merges the four x/ ranges. A first
// page reads about limit index entries and limit records when the filter
// is one of these, however many jobs are stored. BeforeSeq is a seek to
// <prefix><^(BeforeSeq-1)>: a later page costs what the first does. A
// created range, pool or response status filter is checked from the x/
// summaries, so the walk reads more entries when it is selective, but
// still no records for jobs it rejects. A q filter needs the URL path and
// the failure reason, which only records hold: each candidate passing the
// other filters is read, so a rare substring reads many records (a scan;
// narrow it with a status, user or destination).
//
// The walk gathers the candidates of a page (the entries that pass what
// the index can tell) and reads their records in key order through one
// iterator: a page's jobs are recent, so their records sit next to each
// other at the end of j/, and each seek moves forward from the last
// instead of being a point read of its own. Every job read is decoded and
// checked with domain.JobFilter.Matches and for expiry before it is
// returned, so the indexes choose what to read but the answer is the
// reference semantics; when checks reject some, the walk gathers more.
//
// CountJobs with no filter, or with only a user (and its tenant), a tenant
// or a destination, is four c/ point reads, less the jobs expired but not
// purged yet: the e/ and w/ ranges up to now, whose records are read (without
// bodies) to tell which of them the filter counts — as many as expire
// between two purge sweeps. Any other filter is counted by walking the
// cheapest of: the four x/ ranges from their summaries (index only, with
// the expired jobs of the e/ and w/ ranges left out), an i/ range with a record
// read per entry (the ids sorted in chunks of 4096, so the reads seek
// forward through one iterator), or, for a q filter, every record in key
// order (a full scan: q is the one filter no index serves).
//
// Measured on the shared two-core test machine, busy with other work, so
// as ranges over runs (BenchmarkListJobs: a tenth of the jobs failed, 20
// destinations, 100 users, a tenth of them in one tenant):
//
//	                                      100,000 jobs   1,000,000 jobs
//	first page of 100: status=failed,     0.15–0.35 ms   0.33–0.38 ms
//	  destination, user_id, no filter
//	first page: tenant, status=failed     0.35–0.55 ms   0.48 ms
//	count by the counters                 6–14 µs        12–18 µs
//	count by an x/ walk (created range)   10–15 ms       170 ms
//	count by tenant and destination       13–15 ms       350 ms
//	count with q (every record)           76–110 ms      1.9 s
//
// A page deep in the listing (BeforeSeq) costs what the first does.
//
// # Flushes and compactions
//
// Most of the store's keys are written near a few points: records, bodies
// and expiry entries at the end of their prefix (ids and times grow),
// listing entries at the front of each user's, destination's and status's
// range (newest first), ready entries at the end of each lane. A job that
// finishes deletes its entries near the same points. But a destination
// draining a backlog slowly writes at the other end of every index it is
// in — its oldest jobs' x/, r/ and w/ entries — and a table spans every
// key between its first and last. A flush of both ends in one table, or of
// several prefixes in one, overlaps the backlog's whole middle in the
// level below, and each compaction of that table rewrote it: beside a
// million queued jobs, 5.4 KB of background writes per job lifecycle
// against 2.6 KB with none queued (BenchmarkBacklog's lifecycle-draining,
// bg-B/job). With the tables below, 1.9 KB and 1.8 KB.
//
// So tables are kept narrow, in two ways. Every table a flush or
// compaction writes ends at a prefix boundary (prefixSpans, Pebble's span
// policy), and flushes target 256 KiB tables instead of 2 MiB, which makes
// Pebble end a flushed table where it would overlap more than ten times
// that (2.5 MiB) of the base level, or somewhat more when the base level
// is large enough that this would make too many tables: the two ends of a
// backlog go to
// different tables, and each compacts with only its own neighbours. The
// deeper levels keep Pebble's default table sizes. Neither changes what is
// stored or how it is read: a store written before is read as it is, and
// its tables narrow as they are compacted.
//
// A merge of L0 into the base level rewrites every base-level table its
// input overlaps, and the table at each end of an index a backlog is in
// holds the backlog's newest or oldest entries beside the few keys a
// flush brings there: up to 4 MiB rewritten for a few KB. Pebble starts
// that merge once L0 holds two sublevels (flushes whose keys overlap); the
// store lets L0 reach four (l0CompactionSublevels), so each merge carries
// twice the flushes and each such table is rewritten half as often. In the
// daemon's scale steps beside a million queued jobs, compactions wrote
// 0.4–0.6× the bytes; in BenchmarkBacklog (bg-B/job) an insert's background
// writes fell to 0.16–0.20× there and a job lifecycle's to 0.63× with
// nothing queued. A read sees up to four overlapping L0 tables instead of two
// (bloom filters spare most point lookups), and writes stop at 32
// sublevels rather than 12.
//
// Request bodies of 256 bytes or more are written once, to blob files
// (Pebble's value separation, bodySeparation): a flush puts each b/ value
// in a blob file and leaves a reference in the table, and compactions move
// the references down the levels, not the bodies. Without it, a body was
// written again at every level it passed through: with 1 KiB bodies beside
// a backlog, compactions wrote about 1.2 KB per job lifecycle, against
// 0.1–0.3 KB with it. Only b/ values are separated (prefixSpans): records
// and index entries change as a job moves and are read on every lookup, so
// they stay in their tables. A deleted body's space in a blob file comes
// back when every body in the file is deleted (bodies are written, and
// mostly expire, in time order) or when Pebble rewrites a file that is more
// than a fifth deleted bodies and at least five minutes old. This is
// Pebble's format as the store already opens it (FormatNewest), so a store
// written before is read as it is, and its bodies move to blob files as
// they are compacted.
//
// # Migration
//
// A store of layout 5 (version 3 records and older only, every request
// body inline) is migrated when it is opened by writing m/format 6, with a
// sync, and nothing else: its records are read as they are, and each moves
// a long body out to b/ when a write next rewrites it (above). A crash
// before that write leaves layout 5, which the next open migrates again.
// The format key is what keeps a layout 5 build from opening the store
// once version 4 records may be in it (it knows no such version, so every
// read or write of those jobs would fail as a corrupt record, and it would
// not delete their b/ keys). A layout 4, 3 or 2 store is migrated to 5 as
// below, then to 6.
//
// A store of layout 4 (no w/, every expiry entry in e/, no deliveries
// counter) is migrated when it is opened, before the writer starts: the
// r/ and s/ entries, whose values hold each waiting job's expiry and id,
// are read (no record is), each such job's expiry entry is moved from e/
// to w/, in chunks of 4096 committed without a sync, and the r/ entries
// in state 'd' are counted; the last batch writes the count and m/format
// 5 with a sync. A crash part way leaves layout 4 with some entries
// moved; the next open moves them again (harmless) and counts afresh. A
// layout 3 or 2 store is migrated to 4 as below, then to 5.
//
// A store of layout 3 (ready-index keys without the priority byte, no s/
// or d/) is migrated when it is opened, before the writer starts: every r/
// key is rewritten with the normal priority's byte after its lane (no
// layout 3 job had another priority, a schedule or a deadline, so s/ and
// d/ start empty), in chunks of 4096 committed without a sync, and the
// last batch writes m/format 4 with a sync. A crash part way leaves format
// 3 with some keys rewritten; the next open rewrites the rest, telling the
// two forms apart by what follows the lane (8 bytes in layout 3, 9 in 4).
// Records are not rewritten: version 2 (and 1) records read as jobs with
// no options and become version 4 when the job next changes. A layout 2
// store is migrated to 3 as below, then to 4.
//
// A store of layout 2 (no x/, i/, c/, o/, p/ and version 1 records) is
// migrated when it is opened, before the writer starts: x/, i/ and c/ are
// first cleared (what an interrupted earlier run left), the records are
// read in key order and indexed in chunks of 4096 committed without a
// sync, and the last batch writes the counters and m/format 3 with a sync.
// A crash part way leaves format 2 and the next open starts over. Records
// are not rewritten: version 1 records read as jobs without history and
// become version 2 when the job next changes.
//
// # Record encoding
//
// A record starts with a version byte (4; 3, 2 and 1 are read too). Version
// 4 is, in order:
//
//	flags:1          bit 0 headers present (nil vs empty map), bit 1 body present,
//	                 bit 2 result present, bit 3 result body present,
//	                 bit 4 result body truncated, bit 5 delivery present,
//	                 bit 6 schedule present, bit 7 options present
//	status:1         'q' queued, 'f' in flight, 'c' completed, 'x' failed
//	delivery:1       'p' pending, 'd' delivered, 'x' failed; 0 without delivery
//	uvarint ×2       seq, ready_seq
//	varint ×8        attempts, deferrals, created_at, updated_at, dispatched_at,
//	                 expires_at (Unix ms; 0 is the zero time), result response
//	                 status, delivery response status
//	uvarint ×3       delivery attempts, body length, result body length
//	string ×12       id, user_id, idempotent_key, url, pool_id, method,
//	                 webhook_url, lane, ready_lane, result content type,
//	                 result reason, delivery reason (uvarint length + bytes)
//	uvarint + pairs  header count, then name and value strings
//	uvarint + attempts  history count, then per attempt: varint started at
//	                 (Unix ms), duration (ms), HTTP status; strings error,
//	                 signal, member
//	varint ×3        if bit 6: not_before, deadline (Unix ms; 0 none), priority
//	                 (-1 low, 0 normal, 1 high)
//	varint ×4 + string ×2  if bit 7: retry max attempts, backoff, max backoff,
//	                 timeout (ms); traceparent, tracestate
//	bytes            request body if at most 64 bytes, then result body
//	                 (lengths given above)
//
// The body length is that of the request body (0 when the job has none or
// an empty one; bit 1 tells which, and a record with a length but not bit
// 1 is corrupt), and it says where the body is: a body of at most 64 bytes
// is in the record, before the result body, a longer one under b/. Version
// 3 is the same with every request body inline. A plain job sets neither
// bit 6 nor 7 and spends no byte on options. Version 2 is version 3
// without bits 6 and 7 (a version 2 record setting them is corrupt);
// version 1 is version 2 without the history. Strings come before the
// bodies so a decoder copies all of them with one string conversion and
// the bodies separately, never holding a body twice. Times and durations
// have millisecond precision, as in the sqlite store. Records of an
// unknown version are refused, and so is a store whose m/format is not
// one of 6 to 2 (1 was an unreleased development layout).
package pebble
