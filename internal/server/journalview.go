package server

import (
	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/openclaw"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// The journal file is also OpenClaw's journal (see journal.File): beside
// our records, its "jobs" are the jobs not yet ended as OpenClaw's Node
// supervisor journals them, for OpenClaw's tools and tests. Every journal
// write carries them, from the same snapshots as the records: one
// document, replaced atomically, so the two views never disagree.

// openClawJob is a job not yet ended (info) in the journal's OpenClaw
// view; slim clips its command and cwd as slimRecord clips a record's.
func openClawJob(info *protocol.JobInfo, slim bool) journal.OpenClawJob {
	v := openclaw.JournaledOf(info)
	e := journal.OpenClawJob{JobID: info.JobID, Command: v.Command, Cwd: info.Cwd, StartedAtMs: v.StartedAtMs, State: v.State, LastSeq: v.LastSeq, Pid: info.Pid}
	if slim {
		e.Command = jobs.Clip(e.Command, slimArgvBytes)
		e.Cwd = jobs.Clip(e.Cwd, slimArgBytes)
	}
	return e
}

// openClawBytes is about what e takes in the journal (JSON escapes
// aside: the document's hard bound is checked on its encoding).
func openClawBytes(e *journal.OpenClawJob) int64 {
	return int64(len(e.JobID)+len(e.Command)+len(e.Cwd)+len(e.State)) + 112
}
