-- Aquifer job store schema (PostgreSQL), version 5: job options (issue 19).
-- See doc.go ("Job options") for the queries and their plans.
--
-- The new columns take their defaults without rewriting the table (a
-- constant default is catalog-only), and the defaults are what the jobs
-- already stored are: due at once (not_before 0), no deadline (deadline
-- 0), normal priority (0), no other options ('').
--
--   * not_before: domain.JobOptions.NotBefore, Unix ms (0: none). A
--     scheduled job (queued, not_before set, ready_lane '') is in no
--     lane's queue until PromoteDue gives it its ready_lane and a fresh
--     ready_seq.
--   * deadline: Unix ms (0: none); a job still waiting then fails.
--   * priority: -1 low, 0 normal, 1 high (domain.Priority). A lane's queue
--     is read one priority at a time.
--   * options: the options no query looks at (retry policy, timeout,
--     trace context) as storekit.EncodeOptions writes them; '' for most
--     jobs.

ALTER TABLE jobs
    ADD COLUMN not_before bigint   NOT NULL DEFAULT 0,
    ADD COLUMN deadline   bigint   NOT NULL DEFAULT 0,
    ADD COLUMN priority   smallint NOT NULL DEFAULT 0,
    ADD COLUMN options    text     NOT NULL DEFAULT '';

-- Position counts a lane's jobs ahead whatever their priority as three
-- ranges of jobs_ready (priority IN (-1, 0, 1)); the constraint makes that
-- exact. NOT VALID: the rows already stored all hold the default, so
-- checking them would only cost a scan of the table; new rows are checked.
ALTER TABLE jobs ADD CONSTRAINT jobs_priority CHECK (priority BETWEEN -1 AND 1) NOT VALID;

-- The queues, now per priority: ListReady reads (ready_lane, priority)
-- from its cursor in ready_seq order. Still partial (finished jobs cost
-- nothing) and still led by ready_lane, so ReadyQueues skips from lane to
-- lane and RecoverLane-style ranges on ready_lane work as before.
DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (ready_lane, priority, ready_seq) WHERE ready_lane <> '';

-- Scheduled jobs in due order (PromoteDue, NextDue, and their part of
-- Counts). Only scheduled jobs are in it: a plain job is ready at insert
-- and never enters it; a scheduled one leaves it when promoted (ready_lane
-- set) or finished (status changes).
CREATE INDEX jobs_scheduled ON jobs (not_before, seq) INCLUDE (expires_at)
    WHERE ready_lane = '' AND status = 'queued' AND not_before <> 0;

-- Waiting jobs with a deadline, earliest first (Overdue). Jobs without a
-- deadline (most) are never in it; a job with one is while it is queued
-- (scheduled or ready), not while in flight or once finished.
CREATE INDEX jobs_deadline ON jobs (deadline, seq)
    WHERE deadline <> 0 AND status = 'queued';
