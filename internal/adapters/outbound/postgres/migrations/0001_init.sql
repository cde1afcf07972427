-- Aquifer job store schema (PostgreSQL), version 1. Equivalent to the SQLite
-- schema version 2 (internal/adapters/outbound/sqlite/schema.sql) plus job
-- ownership for stores shared by several processes. Applied by Open inside
-- one transaction holding the migration advisory lock; see migrate.go.
--
-- One row per job lifecycle: the request, its result, and the delivery of
-- that result to the job's webhook_url. Times are Unix milliseconds from the
-- application's clock (as in the other backends); only ownership leases use
-- the database clock (aquifer_owners.until), because they are compared
-- between processes.
--
-- seq is the job's row number and ready_seq orders its next action in
-- ready_lane's queue ('' when nothing is left to do). Both come from
-- jobs_seq, drawn by the writer inside its transaction: within one process
-- commit order is ready_seq order (see doc.go for why that suffices across
-- processes).

CREATE SEQUENCE jobs_seq AS bigint;

CREATE TABLE jobs (
    id                    text COLLATE "C" PRIMARY KEY,
    seq                   bigint  NOT NULL,
    user_id               text COLLATE "C" NOT NULL,
    idempotent_key        text COLLATE "C" NOT NULL,
    url                   text    NOT NULL DEFAULT '',
    pool_id               text    NOT NULL DEFAULT '',
    method                text    NOT NULL,
    headers               text    NOT NULL DEFAULT '{}',
    body                  bytea,
    webhook_url           text    NOT NULL DEFAULT '',
    lane                  text COLLATE "C" NOT NULL,
    status                text    NOT NULL,
    attempts              integer NOT NULL DEFAULT 0,
    deferrals             integer NOT NULL DEFAULT 0,
    created_at            bigint  NOT NULL,
    updated_at            bigint  NOT NULL,
    dispatched_at         bigint  NOT NULL DEFAULT 0,
    expires_at            bigint  NOT NULL,
    response_status       integer NOT NULL DEFAULT 0,
    response_body         bytea,
    response_truncated    boolean NOT NULL DEFAULT false,
    response_content_type text    NOT NULL DEFAULT '',
    reason                text    NOT NULL DEFAULT '',
    ready_lane            text COLLATE "C" NOT NULL DEFAULT '',
    ready_seq             bigint  NOT NULL DEFAULT 0,
    delivery_status       text    NOT NULL DEFAULT '',
    delivery_attempts     integer NOT NULL DEFAULT 0,
    delivery_response     integer NOT NULL DEFAULT 0,
    delivery_reason       text    NOT NULL DEFAULT '',
    -- The process (Options.Owner) that dispatches the job's next action.
    -- Whether that owner is alive is a property of the process, not of the
    -- job: it is aquifer_owners.until, so a lease renewal writes one row, not
    -- every job the process holds.
    owner                 text COLLATE "C" NOT NULL DEFAULT ''
) WITH (fillfactor = 90); -- room for HOT updates (mark in flight, requeue)

-- Idempotency: a real unique index on the two key columns. Insert relies on
-- it (INSERT ... ON CONFLICT (user_id, idempotent_key) DO NOTHING).
CREATE UNIQUE INDEX jobs_idempotency ON jobs (user_id, idempotent_key);

-- The queues: what waits in each lane, in ready_seq order, across owners
-- (Position, ReadyLanes, Counts). Partial, so finished jobs cost nothing.
CREATE INDEX jobs_ready ON jobs (ready_lane, ready_seq) WHERE ready_lane <> '';

-- Each owner's queues: ListReady pages a process's own work and claims an
-- orphaned owner's work through it, and OrphanedLanes and the recovery
-- sweeps find a dead owner's work through it, without scanning live peers'
-- backlogs.
CREATE INDEX jobs_owned ON jobs (owner, ready_lane, ready_seq) WHERE ready_lane <> '';

-- Ownership leases, one row per process (Options.Owner). A process renews
-- its row every Lease/3; work whose owner's lease has run out is orphaned
-- and any process may claim it.
CREATE TABLE aquifer_owners (
    owner      text COLLATE "C" PRIMARY KEY,
    until      timestamptz NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now()
);
