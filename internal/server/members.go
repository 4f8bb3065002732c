package server

import (
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Without cgroups, a job started since the last member scan has its
// group's members recorded youngScanAge after it started (its first
// descendants are there by then), at most every youngScanEvery: without
// them, descendants left running by a leader that died with the
// supervisor could not be proven the job's after a crash until the
// periodic scan (--journal-flush-interval, 5 s).
const (
	youngScanAge   = 200 * time.Millisecond
	youngScanEvery = time.Second
)

// youngScanned reports whether a member scan covers sn's run: one running,
// with a group of its own.
func youngScanned(sn jobs.Snapshot) bool {
	i := sn.Info
	return (i.State == protocol.StateRunning || i.State == protocol.StateExiting) && !sn.GroupGone && i.Pgid > 1
}

// youngScanDueLocked reports whether this write should scan the members
// of runs the last scan did not see (by job id and start, not by clock:
// a run that started while a scan was under way, or a clock stepped
// back, is not missed); if one is due later, it sets youngScanAt to when
// (the journal loop writes then). w.mu held.
func (w *journalWriter) youngScanDueLocked(snaps []jobs.Snapshot) bool {
	var oldest int64
	for _, sn := range snaps {
		i := sn.Info
		if youngScanned(sn) && w.scannedRuns[i.JobID] != i.StartedAt && (oldest == 0 || i.StartedAt < oldest) {
			oldest = i.StartedAt
		}
	}
	if oldest == 0 {
		w.youngScanAt = time.Time{}
		return false
	}
	now := time.Now()
	due := time.UnixMilli(oldest).Add(youngScanAge)
	if due.After(now.Add(youngScanAge)) {
		due = now // (a start in the future: the clock was stepped back)
	}
	if next := w.lastScan.Add(youngScanEvery); next.After(due) {
		due = next
	}
	if !now.Before(due) {
		return true
	}
	w.youngScanAt = due
	return false
}

// youngScanDue is when a write should scan the members of young jobs
// (zero: none is due).
func (w *journalWriter) youngScanDue() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.youngScanAt
}

// scanMembers records the live members of every running job's process
// group (one scan of the process table). w.mu must be held.
func (w *journalWriter) scanMembers(snaps []jobs.Snapshot) {
	groups, sessions := map[int]bool{}, map[int]bool{}
	byGroup := map[int]string{}
	for _, sn := range snaps {
		// (a service between runs has no group: its last run's was
		// reaped, and the number may be anyone's now)
		// (nor has a job whose group was seen empty, still draining its
		// output: the number may be reused meanwhile)
		if sn.Info.State != protocol.StateExited && sn.Info.State != protocol.StateRestarting && !sn.GroupGone && sn.Info.Pgid > 1 {
			if sn.Info.Pty {
				sessions[sn.Info.Pgid] = true
			} else {
				groups[sn.Info.Pgid] = true
			}
			byGroup[sn.Info.Pgid] = sn.Info.JobID
		}
	}
	found := proc.GroupMembers(groups, sessions)
	w.members = make(map[string][]journal.Member, len(found))
	for pgid, ps := range found {
		ms := make([]journal.Member, 0, min(len(ps), 64))
		for _, p := range ps {
			if len(ms) == cap(ms) {
				break // a bounded sample proves ownership as well as all of them
			}
			ms = append(ms, journal.Member{Pid: p.Pid, StartTicks: p.StartTicks})
		}
		w.members[byGroup[pgid]] = ms
	}
}
