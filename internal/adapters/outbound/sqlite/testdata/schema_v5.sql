-- Aquifer job store schema (SQLite), version 5. Applied at open when the
-- database is new; older versions are migrated step by step (migrations in
-- migrate.go), and a migrated database ends up with exactly this schema
-- (migrate_test.go checks it). doc.go explains the indexes and shows the
-- plans of the operator's queries over them.
--
-- One row per job lifecycle: the request, its result, and the delivery of
-- that result to the job's webhook_url.
--
-- seq is the row number; ready_lane/ready_seq place the job's next action in
-- a lane's queue (the upstream's lane while it waits for dispatch, the webhook
-- receiver's lane while its result waits for delivery; '' when nothing is
-- left to do, and while a scheduled job waits for its not_before). The writer
-- assigns seq and ready_seq from one counter in commit order, so lanes can
-- page their queue with "ready_seq > cursor" and never miss a job committed
-- later; a scheduled job gets its ready_seq when PromoteDue makes it ready.
CREATE TABLE IF NOT EXISTS jobs (
    seq                   INTEGER PRIMARY KEY,
    id                    TEXT    NOT NULL UNIQUE,
    user_id               TEXT    NOT NULL,
    idempotent_key        TEXT    NOT NULL,
    url                   TEXT    NOT NULL DEFAULT '',
    pool_id               TEXT    NOT NULL DEFAULT '',
    method                TEXT    NOT NULL,
    headers               TEXT    NOT NULL DEFAULT '{}',
    body                  BLOB,
    webhook_url           TEXT    NOT NULL DEFAULT '',
    lane                  TEXT    NOT NULL,
    status                TEXT    NOT NULL,
    attempts              INTEGER NOT NULL DEFAULT 0,
    deferrals             INTEGER NOT NULL DEFAULT 0,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    dispatched_at         INTEGER NOT NULL DEFAULT 0,
    expires_at            INTEGER NOT NULL,
    response_status       INTEGER NOT NULL DEFAULT 0,
    response_body         BLOB,
    response_truncated    INTEGER NOT NULL DEFAULT 0,
    response_content_type TEXT    NOT NULL DEFAULT '',
    reason                TEXT    NOT NULL DEFAULT '',
    ready_lane            TEXT    NOT NULL DEFAULT '',
    ready_seq             INTEGER NOT NULL DEFAULT 0,
    delivery_status       TEXT    NOT NULL DEFAULT '',
    delivery_attempts     INTEGER NOT NULL DEFAULT 0,
    delivery_response     INTEGER NOT NULL DEFAULT 0,
    delivery_reason       TEXT    NOT NULL DEFAULT '',
    -- The job's last attempts, oldest first (storekit.EncodeHistory; '' for
    -- none).
    history               TEXT    NOT NULL DEFAULT '',
    -- Derived at insert, for the operator's filters (none of them changes
    -- after it): the upstream of lane (domain.QueueKey.Upstream), the tenant
    -- scoping user_id ('' when unscoped), and the path of url (domain.URLPath,
    -- which the q filter searches).
    upstream              TEXT    NOT NULL DEFAULT '',
    tenant                TEXT    NOT NULL DEFAULT '',
    url_path              TEXT    NOT NULL DEFAULT '',
    -- The job's options (domain.JobOptions). not_before and deadline are
    -- Unix ms, 0 for none; priority is -1 low, 0 normal, 1 high; options is
    -- the rest (retry policy, timeout, trace context) as
    -- storekit.EncodeOptions's JSON, '' for none (most jobs).
    not_before            INTEGER NOT NULL DEFAULT 0,
    deadline              INTEGER NOT NULL DEFAULT 0,
    priority              INTEGER NOT NULL DEFAULT 0,
    options               TEXT    NOT NULL DEFAULT ''
);

-- Idempotency: a real unique index on the two key columns, not a hash of
-- their concatenation (which can collide across users).
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idempotency ON jobs (user_id, idempotent_key);

-- The queues: what waits in each lane, one priority at a time, in commit
-- order. Partial, so finished and scheduled jobs cost nothing here. status
-- and expires_at ride along so that the load gauge's Counts and Position
-- read the index alone, never the rows (with a million queued jobs the
-- rows are a gigabyte, the index tens of megabytes).
CREATE INDEX IF NOT EXISTS jobs_ready ON jobs (ready_lane, priority, ready_seq, status, expires_at) WHERE ready_lane != '';

-- Scheduled jobs (queued, in no lane yet, with a not_before), due first:
-- PromoteDue and NextDue read it. A job leaves it when it is promoted
-- (ready_lane set) or finished (cancelled); a job that was never scheduled
-- never enters it.
CREATE INDEX IF NOT EXISTS jobs_scheduled ON jobs (not_before, seq)
    WHERE ready_lane = '' AND status = 'queued' AND not_before > 0;

-- Jobs waiting for dispatch with a deadline, earliest first: Overdue reads
-- it. Only jobs with a deadline are in it, and only while they are queued
-- (an attempt in flight takes a job out until it is requeued).
CREATE INDEX IF NOT EXISTS jobs_deadline ON jobs (deadline, seq) WHERE deadline > 0 AND status = 'queued';

-- The operator's listings, newest first: one index per filter that must
-- find a first page without scanning the table. Only jobs_status changes
-- after insert (with the status and the expiry); the others are written once
-- per job. expires_at rides along in jobs_status so that counting by status
-- reads the index alone. jobs_tenant is partial: a deployment without
-- tenants pays nothing for it.
CREATE INDEX IF NOT EXISTS jobs_status   ON jobs (status, seq, expires_at);
CREATE INDEX IF NOT EXISTS jobs_upstream ON jobs (upstream, seq);
CREATE INDEX IF NOT EXISTS jobs_user     ON jobs (user_id, seq);
CREATE INDEX IF NOT EXISTS jobs_tenant   ON jobs (tenant, seq) WHERE tenant != '';

-- Deliberately no index led by expires_at: every status change would pay to
-- maintain it, while the purge that would use it runs once a minute and scans
-- from a read connection instead (jobs_status, which carries expires_at, is
-- the narrowest thing to scan), never holding the writer.

-- Bulk retries and cancels (domain.Operation). processed is what RunBatch
-- compares before it saves a batch's progress; filter is
-- storekit.EncodeFilter's JSON. A handful of rows: no index but the key.
CREATE TABLE IF NOT EXISTS operations (
    id         TEXT    PRIMARY KEY,
    kind       TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    filter     TEXT    NOT NULL DEFAULT '{}',
    cursor_seq INTEGER NOT NULL DEFAULT 0,
    total      INTEGER NOT NULL DEFAULT 0,
    processed  INTEGER NOT NULL DEFAULT 0,
    changed    INTEGER NOT NULL DEFAULT 0,
    skipped    INTEGER NOT NULL DEFAULT 0,
    error      TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Destinations an operator paused (domain.LanePause), by upstream.
CREATE TABLE IF NOT EXISTS lane_pauses (
    upstream TEXT    PRIMARY KEY,
    at       INTEGER NOT NULL,
    reason   TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;

PRAGMA user_version = 5;
