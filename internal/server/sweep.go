package server

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
)

// sweepMarked ends the processes of this state directory's jobs that a
// previous run left running and that are still there once the journal's
// records were reconciled and leftover cgroups reaped: found by the mark
// every job carries in its environment (jobs.WithMark), whatever the
// journal says (doc may be nil): a job whose start the crash kept from
// any record, a descendant that left its job's group, members of a group
// whose ownership could not be proven otherwise. Only after a run that did
// not stop cleanly (after a clean stop every job had ended; what a job
// left behind then was let go). It runs before any job of this run
// starts, and returns the number of processes ended per job id.
func (rc *recovery) sweepMarked(doc *journal.File) map[string]int {
	if rc.lock.PreviousStopped {
		return nil
	}
	var within []string // (besides our own cgroup)
	if rc.cgroups != nil {
		within = append(within, rc.cgroups.Path)
	}
	var ended []proc.MarkedProcess
	seen := map[proc.ProcID]bool{}
	killed := false
	// Again while something is found: a leftover may start another
	// process (outside its group) while the previous ones are ended.
	for round := 0; ; round++ {
		found, err := proc.FindMarked(rc.mark, within...)
		if err != nil {
			rc.sweepLeft = true
			rc.log.Error("reconcile: processes an earlier run left running could not be looked for by their jobs' mark; the next start looks again", "err", err)
			break
		}
		if len(found) == 0 {
			break
		}
		if round == 3 {
			rc.sweepLeft = true
			rc.log.Error("reconcile: processes of an earlier run carrying their jobs' mark keep appearing; left running, the next start looks again", "pids", pidsOf(found, 64))
			break
		}
		e, k, left := proc.TerminateMarked(found, rc.mark, rc.cfg.Jobs.Grace)
		killed = killed || k
		for _, p := range e {
			if id := (proc.ProcID{Pid: p.Pid, StartTicks: p.StartTicks}); !seen[id] {
				seen[id] = true
				ended = append(ended, p)
			}
		}
		if left {
			rc.sweepLeft = true
			rc.log.Error("reconcile: processes of an earlier run found by their jobs' mark survived SIGKILL (stuck in the kernel?); the next start looks again", "pids", pidsOf(e, 64))
			break
		}
		if len(e) == 0 {
			break // (all gone by themselves meanwhile)
		}
	}
	if len(ended) == 0 {
		return nil
	}
	known := map[string]journal.Record{}
	if doc != nil {
		for _, r := range doc.Jobs {
			known[r.JobID] = r
		}
	}
	per := map[string]int{}
	var unrecorded, finished []string
	for _, p := range ended {
		if per[p.JobID] == 0 {
			if r, ok := known[p.JobID]; !ok {
				unrecorded = append(unrecorded, p.JobID)
			} else if r.Finished() {
				finished = append(finished, p.JobID)
			}
			rc.reconciled.Add(1)
		}
		per[p.JobID]++
	}
	if len(unrecorded) > 0 {
		// The previous run did not shut down (or its journal is lost).
		rc.jobs.NoteCrashRecovery(time.Now())
	}
	rc.log.Warn("reconcile: processes of an earlier run found by their jobs' mark and terminated",
		"processes", len(ended), "pids", pidsOf(ended, 64), "jobs", len(per), "sigkill", killed,
		"unrecordedJobs", unrecorded, "finishedJobs", finished)
	return per
}

// pidsOf returns the pids of at most n of ps.
func pidsOf(ps []proc.MarkedProcess, n int) []int {
	var out []int
	for _, p := range ps[:min(n, len(ps))] {
		out = append(out, p.Pid)
	}
	return out
}

// reapLeftoverCgroups terminates what is left in the job cgroups of a
// previous run: every cgroup under our base, and those at the paths in
// recorded (the journal's, for jobs it has as running) that lie elsewhere
// (a base of the same state directory spelled differently by an older
// version, or under another --cgroup-parent). Each populated one gets
// SIGTERM, all at once, then one grace period for all of them, then
// SIGKILL; then it is removed. It returns a note per cgroup name that had
// processes.
func (rc *recovery) reapLeftoverCgroups(recorded []string) map[string]string {
	notes := map[string]string{}
	var cgs []*cgroups.Cgroup
	seen := map[string]bool{}
	if rc.cgroups != nil {
		for _, cg := range rc.cgroups.Leftovers() {
			cgs = append(cgs, cg)
			seen[cg.Path] = true
		}
	}
	// A recorded path elsewhere is followed only into a base of this
	// state directory (its name now, or as an older version spelled it),
	// and then the whole base is swept: the journal lags (a job spawned
	// just before the crash is in no record), and another base is not
	// ours to touch (a copied state directory's journal could name a live
	// supervisor's).
	ours := map[string]bool{cgroupBaseName(rc.cfg.StateDir): true, legacyCgroupBaseName(rc.cfg.StateDir): true}
	swept := map[string]bool{}
	for _, p := range recorded {
		base := filepath.Dir(p)
		if swept[base] || rc.cgroups != nil && base == rc.cgroups.Dir {
			continue
		}
		swept[base] = true
		if !ours[filepath.Base(base)] {
			rc.log.Warn("reconcile: the journal names a job cgroup outside this state directory's cgroup bases; not touched", "cgroup", p)
			continue
		}
		for _, cg := range (&cgroups.Base{Dir: base}).Leftovers() {
			if seen[cg.Path] {
				continue
			}
			seen[cg.Path] = true
			if c := cgroups.OpenRecorded(cg.Path, cgroupBasePrefix); c != nil {
				cgs = append(cgs, c)
			}
		}
	}
	var live []*cgroups.Cgroup
	procs := map[*cgroups.Cgroup][]int{}
	for _, cg := range cgs {
		if p := cg.Procs(); len(p) > 0 {
			// The normal path: TERM (and CONT: a stopped process acts on
			// TERM once continued), grace, KILL.
			cg.Signal(syscall.SIGTERM)
			cg.Signal(syscall.SIGCONT)
			live = append(live, cg)
			procs[cg] = p
		}
	}
	deadline := time.Now().Add(rc.cfg.Jobs.Grace)
	for slices.ContainsFunc(live, (*cgroups.Cgroup).Populated) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // waiting for the orphans to exit
	}
	for _, cg := range live {
		if cg.Populated() {
			_ = cg.Kill()
		}
		id := filepath.Base(cg.Path) // the job's cgroup name (journal records name it)
		rc.reconciled.Add(1)
		rc.log.Warn("reconcile: orphan found alive and terminated", "cgroupName", id, "via", "cgroup", "cgroup", cg.Path, "pids", procs[cg])
		notes[id] = "orphaned processes found alive in the job's cgroup after the restart and terminated"
	}
	for _, cg := range cgs {
		if err := cg.Remove(5 * time.Second); err != nil {
			rc.log.Error("reconcile: leftover job cgroup not removed", "err", err)
		} else if dir := filepath.Dir(cg.Path); rc.cgroups == nil || dir != rc.cgroups.Dir {
			_ = os.Remove(dir) // another base: gone with its last job cgroup (else it stays)
		}
	}
	return notes
}
