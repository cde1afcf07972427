-- Aquifer job store schema (PostgreSQL), version 2: several processes on one
-- database coordinate per dispatcher lane instead of per job (see doc.go).
--
--   * aquifer_lanes: one lease per upstream key (a URL's scheme://host:port,
--     "pool:<id>", a webhook receiver), covering its shared store lane and
--     all its tenant lanes. The holder dispatches every ready job of the
--     upstream, whoever inserted it, and saves the pacing state it learned
--     with the lease so the next holder continues from it.
--   * aquifer_pool_members: pool membership, shared by every process.
--   * jobs.owner now names the process that ran or last touched a job's
--     attempt; recovery needs it only for in-flight jobs, so the per-owner
--     index of version 1 gives way to a small partial index of in-flight jobs.
--
-- aquifer_owners stays the per-process liveness lease (Instances, and which
-- in-flight jobs belong to dead processes).
--
-- Processes of version 1 claim work per job and must not share a database
-- with processes of this version: stop them all before starting this one.

CREATE TABLE aquifer_lanes (
    upstream       text COLLATE "C" PRIMARY KEY,
    -- The holder, or the last holder once the lease has run out or was
    -- released ('' when nobody ever held it).
    owner          text COLLATE "C" NOT NULL DEFAULT '',
    -- Database-clock expiry; '-infinity' when free. A lease is held while
    -- until > now().
    until          timestamptz NOT NULL DEFAULT '-infinity',
    -- The pacing state the holder saved last (saved = false: never saved).
    saved          boolean NOT NULL DEFAULT false,
    rps            float8  NOT NULL DEFAULT 0,
    max_concurrent integer NOT NULL DEFAULT 0,
    account_queues boolean NOT NULL DEFAULT false,
    updated_at     timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 70); -- renewals rewrite every held row every few seconds: keep them HOT

-- The lanes each process holds (Instances, fair-share counting).
CREATE INDEX aquifer_lanes_owner ON aquifer_lanes (owner);

CREATE TABLE aquifer_pool_members (
    pool_id               text COLLATE "C" NOT NULL,
    member_id             text COLLATE "C" NOT NULL,
    address               text    NOT NULL,
    capacity_rps          float8  NOT NULL DEFAULT 0,
    heartbeat_interval_ms bigint  NOT NULL DEFAULT 0,
    -- Database time of the last registration or heartbeat.
    last_seen             timestamptz NOT NULL DEFAULT now(),
    -- Kept by the pool lane's holder; reputation 0 means never saved.
    reputation            float8  NOT NULL DEFAULT 0,
    probation             float8  NOT NULL DEFAULT 0,
    effective_rps         float8  NOT NULL DEFAULT 0,
    in_flight             integer NOT NULL DEFAULT 0,
    paused                boolean NOT NULL DEFAULT false,
    picks                 bigint  NOT NULL DEFAULT 0,
    successes             bigint  NOT NULL DEFAULT 0,
    failures              bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (pool_id, member_id)
);

-- Version 1 read each process's queue through this; lanes are now read
-- whole (jobs_ready) by their holder.
DROP INDEX jobs_owned;

-- In-flight jobs by lane: RecoverLane finds a lane's in-flight jobs, and
-- RecoverInFlight and ResetStale all in-flight jobs, without walking the
-- queued backlog. In-flight jobs are few (bounded by the lanes' concurrency),
-- so the index is tiny.
CREATE INDEX jobs_in_flight ON jobs (ready_lane) WHERE status = 'in_flight';
