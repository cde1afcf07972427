-- Aquifer job store schema (SQLite). Applied idempotently at open.
--
-- seq is the commit order: AUTOINCREMENT guarantees a value is never reused,
-- even after the highest row is deleted, so lanes can page queued jobs with a
-- "seq > cursor" query and never miss one committed later.
CREATE TABLE IF NOT EXISTS jobs (
    seq                   INTEGER PRIMARY KEY AUTOINCREMENT,
    id                    TEXT    NOT NULL UNIQUE,
    kind                  TEXT    NOT NULL,
    parent_id             TEXT    NOT NULL DEFAULT '',
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
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    dispatched_at         INTEGER NOT NULL DEFAULT 0,
    expires_at            INTEGER NOT NULL,
    response_status       INTEGER NOT NULL DEFAULT 0,
    response_body         BLOB,
    response_truncated    INTEGER NOT NULL DEFAULT 0,
    response_content_type TEXT    NOT NULL DEFAULT '',
    reason                TEXT    NOT NULL DEFAULT ''
);

-- Idempotency: a real unique index on the key columns, not a hash of their
-- concatenation. kind keeps Aquifer's own webhook jobs out of callers' key space.
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idempotency ON jobs (kind, user_id, idempotent_key);

-- The queue: queued jobs of one lane in commit order.
CREATE INDEX IF NOT EXISTS jobs_lane_queued ON jobs (lane, seq) WHERE status = 'queued';

-- Deliberately no index on expires_at or on in-flight jobs: every status
-- change would pay to maintain them, while the sweeps that would use them run
-- once a minute and scan from a read connection instead (see Purge and
-- ResetStale), never holding the writer.
