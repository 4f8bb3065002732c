package server

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// recovery settles, at start, what a previous run of the supervisor left:
// the jobs of its journal and intents (recover.go), and the processes and
// job cgroups nothing records any more (sweep.go). Start makes one, runs
// it before serving anyone, then resumes the services it returns.
type recovery struct {
	cfg     *Config
	log     *slog.Logger
	jw      *journalWriter // (its journal is read; the intents are taken over for it)
	jobs    *jobs.Manager
	cgroups *cgroups.Base // nil: jobs have no cgroups
	lock    *journal.Lock
	mark    string // the state directory's mark (see statemark.go)
	// reconciled counts the orphans ended (the server's metric);
	// countFinished counts a job the restart ended.
	reconciled    *atomic.Uint64
	countFinished func(protocol.Reason, bool)
	// sweepLeft: the sweep of marked processes could not end, or look
	// at, all of them (the supervisor's clean stop must not be claimed).
	sweepLeft bool
}

// run reads the journal left by a previous run and settles every job
// it recorded: finished jobs come back as they were; unfinished ones are
// reconciled against the process table and recorded as failed with reason
// supervisor-restart. A live process whose pid, start time and boot id all
// match is an orphan we own: its process group is terminated through the
// normal TERM/grace/KILL path. Anything else is never touched. An error
// means the journal can be neither read nor moved aside: the supervisor
// must not start (its first write would replace the record of the jobs
// a previous run left running). It returns the services to resume (the
// caller resumes them once nothing a crash would leave can pass for a
// clean stop: journal.Lock.ClearStopped).
func (rc *recovery) run() (resume []string, err error) {
	doc, err := rc.jw.journal.Load()
	var ce *journal.CorruptError
	if errors.As(err, &ce) {
		// (said first: whatever stops the start below, the next start
		// finds no journal to report)
		rc.jw.corrupt.Add(1)
		rc.log.Error("journal unusable; moved aside, starting with an empty job table", "path", ce.Path, "movedTo", ce.MovedTo, "err", ce.Err)
		if rc.cgroups == nil {
			// (with cgroups, leftover job cgroups are swept below
			// whatever the journal said)
			rc.log.Warn("without cgroups the previous run's processes are found by their jobs' mark only (below): one that cleared its environment is not; look for such leftovers (if it crashed) in the moved-aside journal (pid, pgid)", "movedTo", ce.MovedTo)
		}
	}
	if doc != nil {
		if err := rc.openIntents(doc); err != nil {
			return nil, err
		}
	}
	// Leftover job cgroups go first, whatever the journal says (even when
	// it is unusable): those of this base, and those the journal names
	// elsewhere.
	var recorded []string
	if doc != nil {
		for _, r := range doc.Jobs {
			if !r.Finished() && r.Cgroup != "" {
				recorded = append(recorded, r.Cgroup)
			}
		}
	}
	reaped := rc.reapLeftoverCgroups(recorded)
	if len(reaped) > 0 || doc != nil && slices.ContainsFunc(doc.Jobs, func(r journal.Record) bool { return !r.Finished() }) {
		// The previous run did not shut down: a job whose spawn it had
		// not answered yet may be in no record (not-found says so).
		rc.jobs.NoteCrashRecovery(time.Now())
	}
	if err != nil && ce == nil {
		return nil, fmt.Errorf("%w (fix its permissions or move it away; nothing was started)", err)
	}
	if doc != nil && len(doc.Dropped) > 0 {
		rc.jw.corrupt.Add(1)
		rc.log.Error("journal records invalid; left out (the others are recovered)", "path", rc.jw.journal.Path(), "keptAt", doc.KeptAt, "dropped", doc.Dropped)
	}
	if doc != nil && doc.Imported > 0 {
		rc.log.Warn("journal written by OpenClaw's Node exec supervisor: the jobs it had not seen end are taken as ended (failed, supervisor-restart); their processes, if any still run, are not ours and are left alone",
			"path", rc.jw.journal.Path(), "jobs", doc.Imported)
	}
	if doc == nil || len(doc.Jobs) == 0 {
		rc.sweepMarked(doc)
		return nil, nil
	}
	now := time.Now()
	cutoff := now.Add(-rc.cfg.Jobs.Retention).UnixMilli()
	var wg sync.WaitGroup
	restored := 0
	// Unfinished records are reconciled at once (each may wait out a
	// grace period), then the marked processes left are ended, then the
	// records are restored with what was found.
	type interrupted struct {
		r          journal.Record
		note       string
		wasRunning bool
	}
	var unfinished []*interrupted
	// resume: services the supervisor (not a user or their policy) ended
	for _, r := range doc.Jobs {
		if r.Finished() {
			if r.Service != nil && r.Reason == protocol.ReasonShutdown {
				resume = append(resume, r.JobID)
				if h := r.Service.History; len(h) > 0 && rc.cfg.ResumeServices {
					h[len(h)-1].Restarted = true // (as a crash's interrupted run is)
				}
			} else if r.Service == nil && r.EndedAt != 0 && r.EndedAt < cutoff {
				continue // its retention ran out while we were away
			}
			if err := rc.jobs.Restore(r, false); err != nil {
				rc.log.Warn("journal record not restored", "job", r.JobID, "err", err)
			} else {
				restored++
			}
			continue
		}
		it := &interrupted{r: r, wasRunning: r.State != protocol.StateRestarting}
		unfinished = append(unfinished, it)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Cgroups are named by job id in journals of older versions.
			cg := r.JobID
			if r.Cgroup != "" {
				cg = filepath.Base(r.Cgroup)
			}
			note, ok := reaped[cg]
			switch {
			case ok:
			case !it.wasRunning:
				// A service between runs: no process of it ran. The pid
				// and group of its last run were reaped long ago and may
				// belong to anyone now: nothing is reconciled.
				note = "no run was in progress (the service was waiting to restart)"
			case r.State == protocol.StateQueued:
				// (no process: nothing to reconcile)
				note = "it was queued, waiting for a slot, and never started"
			default:
				note = rc.reconcile(r, doc.InstanceID)
			}
			it.note = note
		}()
	}
	wg.Wait()
	swept := rc.sweepMarked(doc)
	for _, it := range unfinished {
		r, note, wasRunning := it.r, it.note, it.wasRunning
		if n := swept[r.JobID]; n > 0 {
			note += fmt.Sprintf("; then %d of its processes still running were found by the job's mark and terminated", n)
		}
		// A job whose kill was under way ends as it was being ended
		// (its grace period ran when the supervisor died: the end was
		// asked for, this supervisor finished it); a service being
		// stopped or killed stays down.
		reason, goesOn := jobs.EndReasonAfterCrash(r.PendingEnd)
		if le := r.LeaderExit; le != nil && r.Service == nil && r.PendingEnd == "" && plausibleExit(le) {
			// Its leader had ended; the supervisor died while ending
			// the rest of its group: it ends as it would have.
			reason = protocol.ReasonExit
			if le.ExitCode == nil {
				reason = protocol.ReasonSignal
			}
			r.ExitCode, r.Signal = le.ExitCode, le.Signal
			note = "the job's process had ended; the supervisor died while terminating what it left running (" + note + ")"
		}
		r.LeaderExit = nil
		r.State = protocol.StateExited
		r.Reason = reason
		r.Error = note
		r.EndedAt = time.Now().UnixMilli()
		if sv := r.Service; sv != nil && wasRunning {
			// The interrupted run goes into the service's history.
			sv.History = append(sv.History, protocol.RunRecord{
				Attempt: sv.Attempt, StartedAt: r.StartedAt, EndedAt: r.EndedAt, DurationMs: max(0, r.EndedAt-r.StartedAt),
				Pid: r.Pid, Reason: reason, Error: note, Restarted: rc.cfg.ResumeServices && goesOn,
				Tail: jobs.TailLines(runTail(r), protocol.HistoryLines),
			})
			if n := len(sv.History) - protocol.HistoryRuns; n > 0 {
				sv.History = sv.History[n:]
			}
		}
		if r.Service != nil && goesOn {
			resume = append(resume, r.JobID)
		}
		if err := rc.jobs.Restore(r, true); err != nil {
			rc.log.Warn("journal record not restored", "job", r.JobID, "err", err)
		} else {
			restored++
			if r.Service == nil || !rc.cfg.ResumeServices || !goesOn {
				// It ended here (a resumed service ends later, and is
				// counted then).
				rc.countFinished(reason, r.Service != nil)
			}
		}
	}
	rc.log.Info("journal recovered", "path", rc.jw.journal.Path(), "previousInstance", doc.InstanceID, "jobs", restored)
	return resume, nil
}

// openIntents takes over the journal's intents file (see journal.Intents)
// and puts into doc the job starts and changes it recorded that doc does
// not cover: each is a job doc lacks, or a newer record of one it has. An intents
// file that cannot be written is still taken over (logged, in health;
// retried after each journal write): meanwhile jobs spawned just before a
// crash are unknown to the next run, as before intents existed. One that
// cannot be read for a passing reason stops the start (an error).
func (rc *recovery) openIntents(doc *journal.File) error {
	path := journal.IntentsPath(rc.jw.journal.Path())
	in, rep, err := journal.OpenIntents(path)
	if in == nil {
		// (unread: its lines would be lost; try again later, as with the
		// journal)
		return fmt.Errorf("%w (nothing was started)", err)
	}
	if rep.MovedTo != "" {
		rc.jw.corrupt.Add(1)
		rc.log.Error("journal intents unusable; moved aside (jobs a crashed run started just before it died may be unknown)", "path", path, "movedTo", rep.MovedTo, "err", rep.Why)
	}
	if len(rep.Dropped) > 0 {
		rc.jw.corrupt.Add(1)
		rc.log.Error("journal intents: invalid lines left out", "path", path, "dropped", rep.Dropped)
	}
	if rep.Torn {
		rc.log.Info("journal intents: the last line was cut short by the crash (left out)", "path", path)
	}
	if err != nil {
		rc.jw.intentErr.Store(&journalFailure{err: err, since: time.Now()})
		rc.log.Error("journal intents cannot be written (retried after each journal write): until they can, a job spawned within the journal's pause before a crash is unknown to the next run (and, without cgroups, its processes are left running)", "path", path, "err", err)
	}
	rc.jw.intents = in
	if doc.IntentsGeneration == in.Generation() {
		// (numbering goes on past what the journal covers, whatever the
		// file still holds: see Intents.NumberFrom)
		in.NumberFrom(doc.IntentsCovered)
	} else if rep.Generation != "" {
		// The journal does not name the file it was written with (lost,
		// moved aside): a new generation, so that it cannot be restored
		// later to claim lines written from now on.
		if err := in.Regenerate(); err != nil {
			rc.jw.warnIntents("journal intents not given a new generation", err)
		}
	}
	unc := journal.Uncovered(doc, rep)
	if len(unc) == 0 {
		return nil
	}
	at := make(map[string]int, len(doc.Jobs))
	for i, r := range doc.Jobs {
		at[r.JobID] = i
	}
	var added, newer []string
	for _, it := range unc {
		r := it.Record
		if i, ok := at[r.JobID]; ok {
			if old := doc.Jobs[i]; r.Members == nil && old.Pid == r.Pid && old.StartTicks == r.StartTicks {
				// (a change's record is the job's without the members
				// the journal's scans found: those of the same run stay)
				r.Members = old.Members
			}
			doc.Jobs[i] = r
			newer = append(newer, r.JobID)
			continue
		}
		at[r.JobID] = len(doc.Jobs)
		doc.Jobs = append(doc.Jobs, r)
		added = append(added, r.JobID)
	}
	rc.log.Warn("journal intents: job starts and changes the journal had not recorded yet (the previous run died within the journal's pause after them)",
		"path", path, "jobsNotInJournal", added, "newerThanJournal", newer)
	return nil
}

// resumeServices starts again the services whose supervision ended only
// because the supervisor went away (crash or shutdown), unless
// --resume-services=false.
func (rc *recovery) resumeServices(ids []string) {
	if len(ids) == 0 {
		return
	}
	if !rc.cfg.ResumeServices {
		rc.log.Info("services left stopped (--resume-services=false); start them with execctl start", "jobs", ids)
		return
	}
	for _, id := range ids {
		info, err := rc.jobs.Start(id)
		if err != nil {
			rc.log.Error("service not resumed after the restart", "job", id, "err", err)
			continue
		}
		rc.log.Info("service resumed after the supervisor restart", "job", id, "attempt", info.Attempt, "pid", info.Pid)
	}
}

// reconcile decides the fate of one unfinished record's process and
// returns the note recorded with the job.
func (rc *recovery) reconcile(r journal.Record, prev string) string {
	attrs := []any{"job", r.JobID, "pid", r.Pid, "pgid", r.Pgid, "previousInstance", prev}
	if r.Pid <= 1 {
		rc.log.Info("reconcile: no process was recorded", attrs...)
		return "supervisor restarted before the process was recorded"
	}
	live := proc.Identify(r.Pid, r.StartTicks, r.BootID)
	if live == proc.Ours {
		// A job's leader leads its own group (or session, for a terminal
		// job): the record's group must be the pid, and the live process
		// must still lead it. (The journal is input: a record naming a
		// live process of ours with another group would have that group,
		// anyone's, terminated.)
		pg, sid, err := proc.Group(r.Pid)
		own := pg
		if r.Pty {
			own = sid
		}
		if err != nil || r.Pgid != r.Pid || own != r.Pgid {
			rc.log.Warn("reconcile: the recorded process does not lead the recorded group; not touched", append(attrs, "livePgid", pg, "liveSid", sid)...)
			return "the recorded process no longer leads the job's group; left untouched"
		}
	}
	switch live {
	case proc.Ours:
		killed, err := proc.TerminateGroup(r.Pgid, r.Pty, rc.cfg.Jobs.Grace)
		rc.reconciled.Add(1)
		how := "SIGTERM"
		if killed {
			how = "SIGKILL after the grace period"
		}
		if err != nil {
			rc.log.Error("reconcile: orphan could not be terminated", append(attrs, "err", err)...)
			return "orphaned process found alive; terminating it failed: " + err.Error()
		}
		rc.log.Warn("reconcile: orphan found alive and terminated", append(attrs, "signal", how)...)
		return "orphaned process found alive after the restart and terminated (" + how + ")"
	case proc.Reused:
		ticks, _ := proc.StartTicks(r.Pid)
		rc.log.Info("reconcile: pid reused: the job's process is gone and its pid belongs to another process (other start time or boot); not touched",
			append(attrs, "recordedStartTicks", r.StartTicks, "liveStartTicks", ticks)...)
		return "pid reused: the job's process was gone and its pid belonged to an unrelated process (other start time or boot), left untouched"
	default:
		if r.Pgid > 1 && proc.ScopeAlive(r.Pgid, r.Pty) && live == proc.Gone {
			members := make([]proc.ProcID, len(r.Members))
			for i, m := range r.Members {
				members[i] = proc.ProcID{Pid: m.Pid, StartTicks: m.StartTicks}
			}
			if proc.ProvesGroup(r.Pgid, r.Pty, members, r.BootID) {
				killed, err := proc.TerminateGroup(r.Pgid, r.Pty, rc.cfg.Jobs.Grace)
				rc.reconciled.Add(1)
				if err != nil {
					rc.log.Error("reconcile: orphaned group could not be terminated", append(attrs, "err", err)...)
					return "job leader was gone; its orphaned process group could not be terminated: " + err.Error()
				}
				rc.log.Warn("reconcile: leader gone, recorded group members alive; group terminated", append(attrs, "sigkill", killed)...)
				return "job leader was gone; its orphaned descendants were found alive after the restart and terminated"
			}
			rc.log.Warn("reconcile: job leader is gone but its process group still has members; ownership cannot be proven, not touched", attrs...)
			return "process was gone; its process group still had members, left untouched"
		}
		rc.log.Info("reconcile: process was gone", attrs...)
		return "process was gone when the supervisor restarted"
	}
}

// runTail is the part of r's output tail (with what it had not published
// yet) that its service's current run printed (the tail may begin in
// earlier runs' output).
func runTail(r journal.Record) []byte {
	tail := r.OutputTail
	start := r.TailEnd() - int64(len(tail)) // (the unpublished output follows OutputEnd)
	if len(r.OutputUnpublished) > 0 {
		tail = slices.Clone(tail)
		for _, u := range r.OutputUnpublished {
			tail = append(tail, u.Data...)
		}
	}
	if sv := r.Service; sv != nil {
		if skip := sv.RunOutputStart - start; skip > 0 {
			if skip >= int64(len(tail)) {
				return nil
			}
			tail = tail[skip:]
		}
	}
	return tail
}
