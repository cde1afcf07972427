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
// Get, Lookup, ListReady, Position, ReadyQueues and Counts read the database
// directly with point lookups and bounded iterators, never through the writer.
// Position and Counts read only the ready index, never a record. The Seq hints
// in ports' parameter structs are not needed: records are keyed by job id.
//
// # Key layout
//
// All integers in keys are big-endian so that byte order is numeric order.
// Variable-length parts that are followed by more key bytes are prefixed with
// their length as a uvarint, so no choice of separator byte can make two
// different tuples collide (("a:b","c") and ("a","b:c") are different keys,
// and a lane containing a NUL byte cannot run into the next field).
//
//	j/<job id>                                       → the job record (see below)
//	k/<uvarint len(user)><user><idempotent key>      → <job id>
//	r/<uvarint len(lane)><ready lane><ready_seq:8>   → <state:1><expires_at ms:8><job id>
//	e/<expires_at ms:8><job id>                      → empty
//	m/seq                                            → <highest seq or ready_seq ever assigned:8>
//	m/format                                         → <layout version:1> (currently 2)
//	m/probe                                          → <time of the latest write probe, ms:8> (never read)
//
// j/ holds one record per job for its whole lifecycle (request, result,
// webhook delivery), keyed by the job id: Get is one point lookup, and since
// ids are time-ordered new records append at the end of the key space. The
// record carries the job's Seq.
//
// k/ finds a job by (user_id, idempotent_key). It names at most one job: an
// insert finding a live job there returns it, one finding an expired job
// deletes that job and takes the key.
//
// r/ is the ready index: one entry per job whose next action waits in a lane
// (Job.ReadyQueue != ""), ordered within the lane by ReadySeq. The state byte
// is 'q' (queued for dispatch), 'f' (in flight: not waiting, skipped by
// ListReady, Position and Counts) or 'd' (result waiting for webhook
// delivery). The entry carries the job's expiry (0 for none) so Position and
// Counts can leave out expired jobs without loading records. Every write
// that changes a job's ready lane, ReadySeq, status or expiry rewrites its
// entry in the same batch.
//
// e/ is the expiry index Purge walks in expiry order; the millisecond time has
// its sign bit flipped so that negative times sort first. A job whose
// ExpiresAt is zero never expires and has no e/ entry.
//
// # Record encoding
//
// A record starts with a version byte (1). Version 1 is, in order:
//
//	flags:1          bit 0 headers present (nil vs empty map), bit 1 body present,
//	                 bit 2 result present, bit 3 result body present,
//	                 bit 4 result body truncated, bit 5 delivery present
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
//	bytes            body, then result body (lengths given above)
//
// Strings come before the bodies so a decoder copies all of them with one
// string conversion and the bodies separately, never holding a body twice.
// Times have millisecond precision, as in the sqlite store. Records of an
// unknown version are refused, and so is a store whose m/format is not 2
// (1 was an unreleased development layout).
package pebble
