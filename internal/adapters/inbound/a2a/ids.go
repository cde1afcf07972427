package a2aagent

import (
	"strings"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// A task's id is its job's id: the SDK makes task ids as UUIDv7 strings
// (48-bit millisecond time, then random bits — the layout of a JobID), and
// the job id is the UUID's 32 hex digits without hyphens. Nothing maps one to
// the other but this conversion, so any task can be rebuilt from its job.

// jobIDOf returns the job id of a task id in canonical UUID form (lower-case,
// hyphenated 8-4-4-4-12), and false for anything else.
func jobIDOf(tid a2a.TaskID) (domain.JobID, bool) {
	s := string(tid)
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return "", false
	}
	id := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	if !domain.ValidJobID(id) {
		return "", false
	}
	return domain.JobID(id), true
}

// taskIDOf is the task id of a job.
func taskIDOf(id domain.JobID) a2a.TaskID {
	s := string(id)
	if len(s) != 32 {
		return a2a.TaskID(s)
	}
	var b strings.Builder
	b.Grow(36)
	b.WriteString(s[0:8])
	b.WriteByte('-')
	b.WriteString(s[8:12])
	b.WriteByte('-')
	b.WriteString(s[12:16])
	b.WriteByte('-')
	b.WriteString(s[16:20])
	b.WriteByte('-')
	b.WriteString(s[20:])
	return a2a.TaskID(b.String())
}
