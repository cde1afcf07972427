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
-- these add an entry per index to each of them and to each insert; the
-- tenant index is partial and costs nothing where API-key tenants are not
-- used.

CREATE INDEX jobs_list ON jobs (status, seq);
CREATE INDEX jobs_list_upstream ON jobs (upstream, status, seq) INCLUDE (expires_at);
CREATE INDEX jobs_list_user ON jobs (user_id, status, seq) INCLUDE (expires_at);
CREATE INDEX jobs_list_tenant ON jobs (tenant, status, seq) INCLUDE (expires_at) WHERE tenant <> '';
