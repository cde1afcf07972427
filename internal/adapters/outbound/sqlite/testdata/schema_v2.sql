-- Aquifer job store schema (SQLite), version 2, as it was released: kept so
-- that the migration to the next version is tested on a real version-2
-- database (migrate_test.go).
--
-- One row per job lifecycle: the request, its result, and the delivery of
-- that result to the job's webhook_url.
--
-- seq is the row number; ready_lane/ready_seq place the job's next action in
-- a lane's queue (the upstream's lane while it waits for dispatch, the webhook
-- receiver's lane while its result waits for delivery; '' when nothing is
-- left to do). The writer assigns seq and ready_seq from one counter in
-- commit order, so lanes can page their queue with "ready_seq > cursor" and
-- never miss a job committed later.
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
    delivery_reason       TEXT    NOT NULL DEFAULT ''
);

-- Idempotency: a real unique index on the two key columns, not a hash of
-- their concatenation (which can collide across users).
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idempotency ON jobs (user_id, idempotent_key);

-- The queues: what waits in each lane, in commit order. Partial, so finished
-- jobs cost nothing here. Counts and the stale sweep also read through it.
CREATE INDEX IF NOT EXISTS jobs_ready ON jobs (ready_lane, ready_seq) WHERE ready_lane != '';

-- Deliberately no index on expires_at: every status change would pay to
-- maintain it, while the purge that would use it runs once a minute and scans
-- from a read connection instead, never holding the writer.

PRAGMA user_version = 2;
