-- Aquifer job store schema (PostgreSQL), version 3: what operators need
-- (ports.OperatorStore): listing and counting jobs by filter, each job's
-- attempt history, durable bulk operations and durable lane pauses. See
-- doc.go ("Operator reads") for the indexes and their query plans.
--
-- The new job columns are derived from the request when a job is inserted
-- (by the writer, with the domain's own functions), so the filters compare
-- plain columns:
--
--   * tenant:   the API-key tenant of user_id (domain.Unscope), '' unscoped;
--   * upstream: the destination of the job's queue (QueueKey.Upstream);
--   * url_path: the URL's path, which the q filter searches (domain.URLPath).
--
-- Open fills them for the jobs already stored right after this file runs,
-- in the same transaction (migrate.go, backfillOperatorColumns): SQL cannot
-- repeat domain.URLPath exactly. Processes of version 2 insert jobs without
-- them; stop them all before starting this version.

ALTER TABLE jobs
    ADD COLUMN tenant   text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN upstream text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN url_path text COLLATE "C" NOT NULL DEFAULT '',
    -- The last domain.MaxHistory attempts, as storekit.EncodeHistory writes
    -- them ('' for none). Text, not jsonb: nothing queries inside it, and
    -- text costs no parsing on the hot path.
    ADD COLUMN history  text NOT NULL DEFAULT '';

-- Bulk operations (domain.Operation). RunBatch updates a row with a
-- compare-and-set on processed in the transaction that changes the batch's
-- jobs; the row lock makes two runners of one operation, in one process or
-- two, take turns, and the loser finds processed moved on.
CREATE TABLE aquifer_operations (
    id         text COLLATE "C" PRIMARY KEY,
    kind       text    NOT NULL,
    state      text    NOT NULL,
    filter     text    NOT NULL DEFAULT '{}', -- storekit.EncodeFilter
    cursor     bigint  NOT NULL DEFAULT 0,
    total      bigint  NOT NULL DEFAULT 0,
    processed  bigint  NOT NULL DEFAULT 0,
    changed    bigint  NOT NULL DEFAULT 0,
    skipped    bigint  NOT NULL DEFAULT 0,
    error      text    NOT NULL DEFAULT '',
    created_at bigint  NOT NULL,
    updated_at bigint  NOT NULL
);

-- Operations newest first (Operations).
CREATE INDEX aquifer_operations_created ON aquifer_operations (created_at, id);

-- Paused destinations, shared by every process on the database.
CREATE TABLE aquifer_lane_pauses (
    upstream text COLLATE "C" PRIMARY KEY,
    at       bigint NOT NULL,
    reason   text   NOT NULL DEFAULT ''
);
