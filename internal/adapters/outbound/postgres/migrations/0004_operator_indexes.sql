-- Aquifer job store schema (PostgreSQL), version 4: the indexes of the
-- operators' reads, built after version 3's columns were filled (so the
-- fill does not maintain them row by row). doc.go ("Operator reads") has
-- the queries and their plans.
--
-- Each index leads with what a filter pins (nothing, the destination, the
-- user, the tenant), then the status, then seq: a listing reads, for each
-- status it wants, a range newest first from its cursor and merges them
-- (Merge Append), so a first page reads about one page of index entries
-- whatever the table holds. expires_at is included so that counting a
-- filter's jobs per status is an index-only scan of the filter's range
-- (counting every job reads every job, for which the planner prefers the
-- table: jobs_list goes without it).
--
-- Every index costs each job write that changes an indexed column. The
-- writes that change status (mark in flight, requeue, finish, retry) were
-- not HOT updates already (jobs_in_flight's predicate reads status), so
-- each adds an entry to every index whose predicate the new row version
-- satisfies, and so does each insert. Hence the predicates: the tenant
-- index costs nothing where API-key tenants are not used, and the
-- destination, user and tenant indexes leave out in-flight jobs, so that
-- marking a job in flight (once per attempt) adds one entry (jobs_list),
-- not four. In-flight jobs are few (the lanes' concurrency): listings and
-- counts find them through jobs_list's in_flight range, or jobs_in_flight.

CREATE INDEX jobs_list ON jobs (status, seq);
CREATE INDEX jobs_list_upstream ON jobs (upstream, status, seq) INCLUDE (expires_at)
    WHERE status <> 'in_flight';
CREATE INDEX jobs_list_user ON jobs (user_id, status, seq) INCLUDE (expires_at)
    WHERE status <> 'in_flight';
CREATE INDEX jobs_list_tenant ON jobs (tenant, status, seq) INCLUDE (expires_at)
    WHERE tenant <> '' AND status <> 'in_flight';
