package server

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// recover reads the journal left by a previous run and settles every job
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
func (s *Server) recover() (resume []string, err error) {
	doc, err := s.journal.Load()
	var ce *journal.CorruptError
	if errors.As(err, &ce) {
		// (said first: whatever stops the start below, the next start
		// finds no journal to report)
		s.journalCorrupt.Add(1)
		s.log.Error("journal unusable; moved aside, starting with an empty job table", "path", ce.Path, "movedTo", ce.MovedTo, "err", ce.Err)
		if s.cgroupBase == nil {
			// (with cgroups, leftover job cgroups are swept below
			// whatever the journal said)
			s.log.Warn("without cgroups the previous run's processes are found by their jobs' mark only (below): one that cleared its environment is not; look for such leftovers (if it crashed) in the moved-aside journal (pid, pgid)", "movedTo", ce.MovedTo)
		}
	}
	if doc != nil {
		if err := s.openIntents(doc); err != nil {
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
	reaped := s.reapLeftoverCgroups(recorded)
	if len(reaped) > 0 || doc != nil && slices.ContainsFunc(doc.Jobs, func(r journal.Record) bool { return !r.Finished() }) {
		// The previous run did not shut down: a job whose spawn it had
		// not answered yet may be in no record (not-found says so).
		s.jobs.NoteCrashRecovery(time.Now())
	}
	if err != nil && ce == nil {
		return nil, fmt.Errorf("%w (fix its permissions or move it away; nothing was started)", err)
	}
	if doc != nil && len(doc.Dropped) > 0 {
		s.journalCorrupt.Add(1)
		s.log.Error("journal records invalid; left out (the others are recovered)", "path", s.journal.Path(), "keptAt", doc.KeptAt, "dropped", doc.Dropped)
	}
	if doc == nil || len(doc.Jobs) == 0 {
		s.sweepMarked(doc)
		return nil, nil
	}
	now := time.Now()
	cutoff := now.Add(-s.cfg.Jobs.Retention).UnixMilli()
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
			if r.Service != nil && r.Reason == string(protocol.ReasonShutdown) {
				resume = append(resume, r.JobID)
				if h := r.Service.History; len(h) > 0 && s.cfg.ResumeServices {
					h[len(h)-1].Restarted = true // (as a crash's interrupted run is)
				}
			} else if r.Service == nil && r.EndedAt != 0 && r.EndedAt < cutoff {
				continue // its retention ran out while we were away
			}
			if err := s.jobs.Restore(snapshotOf(r)); err != nil {
				s.log.Warn("journal record not restored", "job", r.JobID, "err", err)
			} else {
				restored++
			}
			continue
		}
		it := &interrupted{r: r, wasRunning: r.State != string(protocol.StateRestarting)}
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
			default:
				note = s.reconcile(r, doc.InstanceID)
			}
			it.note = note
		}()
	}
	wg.Wait()
	swept := s.sweepMarked(doc)
	for _, it := range unfinished {
		r, note, wasRunning := it.r, it.note, it.wasRunning
		if n := swept[r.JobID]; n > 0 {
			note += fmt.Sprintf("; then %d of its processes still running were found by the job's mark and terminated", n)
		}
		// A job whose kill was under way ends as it was being ended
		// (its grace period ran when the supervisor died: the end was
		// asked for, this supervisor finished it); a service being
		// stopped or killed stays down.
		reason, goesOn := jobs.EndReasonAfterCrash(protocol.Reason(r.PendingEnd))
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
		r.State = string(protocol.StateExited)
		r.Reason = string(reason)
		r.Error = note
		r.EndedAt = time.Now().UnixMilli()
		if sv := r.Service; sv != nil && wasRunning {
			// The interrupted run goes into the service's history.
			sv.History = append(sv.History, protocol.RunRecord{
				Attempt: sv.Attempt, StartedAt: r.StartedAt, EndedAt: r.EndedAt, DurationMs: max(0, r.EndedAt-r.StartedAt),
				Pid: r.Pid, Reason: reason, Error: note, Restarted: s.cfg.ResumeServices && goesOn,
				Tail: jobs.TailLines(runTail(r), protocol.HistoryLines),
			})
			if n := len(sv.History) - protocol.HistoryRuns; n > 0 {
				sv.History = sv.History[n:]
			}
		}
		if r.Service != nil && goesOn {
			resume = append(resume, r.JobID)
		}
		sn := snapshotOf(r)
		sn.Interrupted = true
		if err := s.jobs.Restore(sn); err != nil {
			s.log.Warn("journal record not restored", "job", r.JobID, "err", err)
		} else {
			restored++
			if r.Service == nil || !s.cfg.ResumeServices || !goesOn {
				// It ended here (a resumed service ends later, and is
				// counted then).
				s.countFinished(reason, r.Service != nil)
			}
		}
	}
	s.log.Info("journal recovered", "path", s.journal.Path(), "previousInstance", doc.InstanceID, "jobs", restored)
	return resume, nil
}

// openIntents takes over the journal's intents file (see journal.Intents)
// and puts into doc the job starts it recorded that doc does not cover:
// each is a job doc lacks, or a newer record of one it has. An intents
// file that cannot be written is still taken over (logged, in health;
// retried after each journal write): meanwhile jobs spawned just before a
// crash are unknown to the next run, as before intents existed. One that
// cannot be read for a passing reason stops the start (an error).
func (s *Server) openIntents(doc *journal.File) error {
	path := journal.IntentsPath(s.journal.Path())
	in, rep, err := journal.OpenIntents(path)
	if in == nil {
		// (unread: its lines would be lost; try again later, as with the
		// journal)
		return fmt.Errorf("%w (nothing was started)", err)
	}
	if rep.MovedTo != "" {
		s.journalCorrupt.Add(1)
		s.log.Error("journal intents unusable; moved aside (jobs a crashed run started just before it died may be unknown)", "path", path, "movedTo", rep.MovedTo, "err", rep.Why)
	}
	if len(rep.Dropped) > 0 {
		s.journalCorrupt.Add(1)
		s.log.Error("journal intents: invalid lines left out", "path", path, "dropped", rep.Dropped)
	}
	if rep.Torn {
		s.log.Info("journal intents: the last line was cut short by the crash (left out)", "path", path)
	}
	if err != nil {
		s.intentErr.Store(&journalFailure{err: err, since: time.Now()})
		s.log.Error("journal intents cannot be written (retried after each journal write): until they can, a job spawned within the journal's pause before a crash is unknown to the next run (and, without cgroups, its processes are left running)", "path", path, "err", err)
	}
	s.intents = in
	if doc.IntentsGeneration == in.Generation() {
		// (numbering goes on past what the journal covers, whatever the
		// file still holds: see Intents.NumberFrom)
		in.NumberFrom(doc.IntentsCovered)
	} else if rep.Generation != "" {
		// The journal does not name the file it was written with (lost,
		// moved aside): a new generation, so that it cannot be restored
		// later to claim lines written from now on.
		if err := in.Regenerate(); err != nil {
			s.warnIntents("journal intents not given a new generation", err)
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
			doc.Jobs[i] = r
			newer = append(newer, r.JobID)
			continue
		}
		at[r.JobID] = len(doc.Jobs)
		doc.Jobs = append(doc.Jobs, r)
		added = append(added, r.JobID)
	}
	s.log.Warn("journal intents: job starts the journal had not recorded yet (the previous run died within the journal's pause after them)",
		"path", path, "jobsNotInJournal", added, "newerThanJournal", newer)
	return nil
}

// resumeServices starts again the services whose supervision ended only
// because the supervisor went away (crash or shutdown), unless
// --resume-services=false.
func (s *Server) resumeServices(ids []string) {
	if len(ids) == 0 {
		return
	}
	if !s.cfg.ResumeServices {
		s.log.Info("services left stopped (--resume-services=false); start them with execctl start", "jobs", ids)
		return
	}
	for _, id := range ids {
		info, err := s.jobs.Start(id)
		if err != nil {
			s.log.Error("service not resumed after the restart", "job", id, "err", err)
			continue
		}
		s.log.Info("service resumed after the supervisor restart", "job", id, "attempt", info.Attempt, "pid", info.Pid)
	}
}

// reconcile decides the fate of one unfinished record's process and
// returns the note recorded with the job.
func (s *Server) reconcile(r journal.Record, prev string) string {
	attrs := []any{"job", r.JobID, "pid", r.Pid, "pgid", r.Pgid, "previousInstance", prev}
	if r.Pid <= 1 {
		s.log.Info("reconcile: no process was recorded", attrs...)
		return "supervisor restarted before the process was recorded"
	}
	live := jobs.Identify(r.Pid, r.StartTicks, r.BootID)
	if live == jobs.Ours {
		// A job's leader leads its own group (or session, for a terminal
		// job): the record's group must be the pid, and the live process
		// must still lead it. (The journal is input: a record naming a
		// live process of ours with another group would have that group,
		// anyone's, terminated.)
		pg, sid, err := jobs.ProcGroup(r.Pid)
		own := pg
		if r.Pty {
			own = sid
		}
		if err != nil || r.Pgid != r.Pid || own != r.Pgid {
			s.log.Warn("reconcile: the recorded process does not lead the recorded group; not touched", append(attrs, "livePgid", pg, "liveSid", sid)...)
			return "the recorded process no longer leads the job's group; left untouched"
		}
	}
	switch live {
	case jobs.Ours:
		killed, err := jobs.TerminateGroup(r.Pgid, r.Pty, s.cfg.Jobs.Grace)
		s.orphansReconciled.Add(1)
		how := "SIGTERM"
		if killed {
			how = "SIGKILL after the grace period"
		}
		if err != nil {
			s.log.Error("reconcile: orphan could not be terminated", append(attrs, "err", err)...)
			return "orphaned process found alive; terminating it failed: " + err.Error()
		}
		s.log.Warn("reconcile: orphan found alive and terminated", append(attrs, "signal", how)...)
		return "orphaned process found alive after the restart and terminated (" + how + ")"
	case jobs.Reused:
		ticks, _ := jobs.ProcStartTicks(r.Pid)
		s.log.Info("reconcile: pid reused: the job's process is gone and its pid belongs to another process (other start time or boot); not touched",
			append(attrs, "recordedStartTicks", r.StartTicks, "liveStartTicks", ticks)...)
		return "pid reused: the job's process was gone and its pid belonged to an unrelated process (other start time or boot), left untouched"
	default:
		if r.Pgid > 1 && jobs.ScopeAlive(r.Pgid, r.Pty) && live == jobs.Gone {
			members := make([]jobs.ProcID, len(r.Members))
			for i, m := range r.Members {
				members[i] = jobs.ProcID{Pid: m.Pid, StartTicks: m.StartTicks}
			}
			if jobs.ProvesGroup(r.Pgid, r.Pty, members, r.BootID) {
				killed, err := jobs.TerminateGroup(r.Pgid, r.Pty, s.cfg.Jobs.Grace)
				s.orphansReconciled.Add(1)
				if err != nil {
					s.log.Error("reconcile: orphaned group could not be terminated", append(attrs, "err", err)...)
					return "job leader was gone; its orphaned process group could not be terminated: " + err.Error()
				}
				s.log.Warn("reconcile: leader gone, recorded group members alive; group terminated", append(attrs, "sigkill", killed)...)
				return "job leader was gone; its orphaned descendants were found alive after the restart and terminated"
			}
			s.log.Warn("reconcile: job leader is gone but its process group still has members; ownership cannot be proven, not touched", attrs...)
			return "process was gone; its process group still had members, left untouched"
		}
		s.log.Info("reconcile: process was gone", attrs...)
		return "process was gone when the supervisor restarted"
	}
}

func snapshotOf(r journal.Record) jobs.Snapshot {
	return jobs.Snapshot{
		Info: protocol.JobInfo{
			JobID: r.JobID, State: protocol.State(r.State), Argv: r.Argv, Shell: r.Shell, Cwd: r.Cwd,
			Labels: r.Labels, SessionID: r.SessionID, Pid: r.Pid, Pgid: r.Pgid,
			CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, EndedAt: r.EndedAt, LastOutputAt: r.LastOutputAt,
			Reason: protocol.Reason(r.Reason), ExitCode: r.ExitCode, Signal: r.Signal, Error: r.Error,
			TimeoutMs: r.TimeoutMs, NoOutputTimeoutMs: r.NoOutputMs,
			StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, OutputEnd: r.OutputEnd, LastSeq: r.LastSeq,
			Pty: r.Pty, Rows: r.Rows, Cols: r.Cols,
		},
		StartTicks: r.StartTicks, BootID: r.BootID, Tail: r.OutputTail, TailSeq: r.OutputTailSeq, TailEnd: r.OutputTailEnd, TailChunks: tailChunks(r),
		Unpublished: unpublishedOf(r), Service: serviceOf(r.Service), OutputSkips: offsetRanges(r.OutputSkips),
	}
}

// unpublishedOf converts a record's unpublished output (jobs.Restore
// checks it).
func unpublishedOf(r journal.Record) []jobs.PendingOutput {
	var out []jobs.PendingOutput
	for _, u := range r.OutputUnpublished {
		out = append(out, jobs.PendingOutput{Stream: protocol.Stream(u.Stream), Data: u.Data, Attempt: u.Attempt})
	}
	return out
}

// runTail is the part of r's output tail (with what it had not published
// yet) that its service's current run printed (the tail may begin in
// earlier runs' output).
func runTail(r journal.Record) []byte {
	tail := r.OutputTail
	end := r.OutputEnd
	if r.OutputTailEnd != 0 {
		end = r.OutputTailEnd
	}
	start := end - int64(len(tail)) // (the unpublished output follows OutputEnd)
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

// offsetRanges converts a record's [at, n] pairs.
func offsetRanges(rs [][2]int64) []jobs.OffsetRange {
	var out []jobs.OffsetRange
	for _, r := range rs {
		out = append(out, jobs.OffsetRange{At: r[0], N: r[1]})
	}
	return out
}

// offsetPairs is the inverse of offsetRanges.
func offsetPairs(rs []jobs.OffsetRange) [][2]int64 {
	var out [][2]int64
	for _, r := range rs {
		out = append(out, [2]int64{r.At, r.N})
	}
	return out
}

func serviceOf(sv *journal.Service) *jobs.ServiceState {
	if sv == nil {
		return nil
	}
	st := &jobs.ServiceState{Spec: sv.Spec, Attempt: sv.Attempt, Restarts: sv.Restarts, Consecutive: sv.Consecutive, History: sv.History,
		RunOutputStart: sv.RunOutputStart}
	st.OutputSkips = offsetRanges(sv.OutputSkips)
	for _, e := range sv.Ends {
		st.Ends = append(st.Ends, time.UnixMilli(e))
	}
	return st
}

func (s *Server) record(sn jobs.Snapshot) journal.Record {
	i := sn.Info
	r := journal.Record{
		JobID: i.JobID, Argv: i.Argv, Shell: i.Shell, Cwd: i.Cwd, Labels: i.Labels, SessionID: i.SessionID,
		Pid: i.Pid, Pgid: i.Pgid, StartTicks: sn.StartTicks, BootID: sn.BootID, State: string(i.State),
		CreatedAt: i.CreatedAt, StartedAt: i.StartedAt, UpdatedAt: sn.UpdatedAt, EndedAt: i.EndedAt, LastOutputAt: i.LastOutputAt,
		Reason: string(i.Reason), ExitCode: i.ExitCode, Signal: i.Signal, Error: i.Error, InstanceID: s.instanceID,
		StdoutBytes: i.StdoutBytes, StderrBytes: i.StderrBytes, OutputEnd: i.OutputEnd, LastSeq: i.LastSeq,
		TimeoutMs: i.TimeoutMs, NoOutputMs: i.NoOutputTimeoutMs, OutputTail: sn.Tail, OutputTailSeq: sn.TailSeq,
		Pty: i.Pty, Rows: i.Rows, Cols: i.Cols, Cgroup: i.Cgroup,
	}
	if sn.TailEnd != i.OutputEnd && len(sn.Tail) > 0 {
		r.OutputTailEnd = sn.TailEnd
	}
	for _, c := range sn.TailChunks {
		r.OutputTailChunks = append(r.OutputTailChunks, journal.TailChunk{Seq: c.Seq, Stream: string(c.Stream), Len: c.Len, Attempt: c.Attempt})
	}
	for _, u := range sn.Unpublished {
		r.OutputUnpublished = append(r.OutputUnpublished, journal.Unpublished{Stream: string(u.Stream), Data: u.Data, Attempt: u.Attempt})
	}
	r.OutputSkips = offsetPairs(sn.OutputSkips)
	r.PendingEnd = string(sn.PendingEnd)
	if le := sn.LeaderExit; le != nil {
		r.LeaderExit = &journal.LeaderExit{ExitCode: le.ExitCode, Signal: le.Signal}
	}
	if sv := sn.Service; sv != nil {
		r.Service = &journal.Service{Spec: sv.Spec, Attempt: sv.Attempt, Restarts: sv.Restarts, Consecutive: sv.Consecutive, History: sv.History,
			RunOutputStart: sv.RunOutputStart}
		r.Service.OutputSkips = offsetPairs(sv.OutputSkips)
		for _, e := range sv.Ends {
			r.Service.Ends = append(r.Service.Ends, e.UnixMilli())
		}
	}
	return r
}

// journalBeforeRun writes the journal before a service's next run starts
// if the journal on disk may hold it as finished (its supervision ended,
// or nothing was written since recovery: the dead supervisor's record):
// see jobs.Hooks.BeforeServiceRun. A restart by policy needs no write:
// its record says running or restarting, which recovery reserves from.
func (s *Server) journalBeforeRun(id string) {
	s.journalMu.Lock()
	c, cached := s.recCache[id]
	first := s.recGen == 0
	s.journalMu.Unlock()
	if first || cached && c.svc {
		s.writeJournal(false)
	}
}

// recordIntent writes the intent record of a job whose run just started
// (jobs.Hooks.Started), before the start is answered: until the next
// journal write covers it, it is what tells a supervisor started after a
// crash that the job ran, with which process (pid, start time, group,
// cgroup), so that it records the job's fate and terminates what it left
// running instead of not knowing it. A one-shot job's record goes cut
// down as in a journal over its bound (slimRecord).
func (s *Server) recordIntent(j *jobs.Job) {
	if s.intents == nil {
		return
	}
	var sn jobs.Snapshot
	wrote := false
	err := s.intents.Append(func() *journal.Record {
		sn = j.Snapshot()
		if cur, err := s.jobs.Get(j.ID()); err != nil || cur != j {
			// Removed already (a quick one whose end a client saw): an
			// intent would bring it back after a crash. (One over but
			// not removed gets its finished record: its spawn is being
			// answered, and must not be unknown after a crash.)
			return nil
		}
		r := s.record(sn)
		if sn.Service == nil {
			r = *slimRecord(r)
		}
		wrote = true
		return &r
	})
	if err != nil {
		if s.intentErr.Load() == nil {
			s.intentErr.CompareAndSwap(nil, &journalFailure{err: err, since: time.Now()})
		}
		s.warnIntents("job start not recorded in the journal intents: if the supervisor dies before the next journal write, the next run will not know this job (nor, without cgroups, terminate its processes)", err, "job", j.ID())
		return
	}
	if !wrote {
		return
	}
	if f := s.intentErr.Load(); f != nil && s.intentErr.CompareAndSwap(f, nil) {
		s.log.Info("journal intents written again", "path", journal.IntentsPath(s.journal.Path()))
	}
	// (a successor restores the job from this record: what it publishes
	// from now on counts from it, as from a journal write; see
	// jobs.Job.journalHeldLocked)
	s.jobs.Journaled([]jobs.Snapshot{sn})
}

// journalHealth is health's journalError: why journal writes fail, and
// why job starts cannot be recorded in its intents ("" when both work).
func (s *Server) journalHealth() string {
	j, in := s.journalErr.Load().String(), s.intentErr.Load().String()
	switch {
	case in == "":
		return j
	case j == "":
		return "intents " + in
	}
	return j + "; intents " + in
}

// warnIntents logs a failure of the journal intents, at most once per
// durableWarnEvery.
func (s *Server) warnIntents(msg string, err error, attrs ...any) {
	if !warnNow(&s.lastIntentWarn) {
		return
	}
	s.log.Error(msg, append(attrs, "path", journal.IntentsPath(s.journal.Path()), "err", err)...)
}

// plausibleExit reports whether a journaled leader exit is one (the
// journal is input): an exit code 0..255, or a signal's name.
func plausibleExit(le *journal.LeaderExit) bool {
	if le.ExitCode != nil {
		return *le.ExitCode >= 0 && *le.ExitCode <= 255 && le.Signal == ""
	}
	_, err := protocol.ParseSignal(le.Signal)
	return err == nil
}

// leaderExitUnscanned reports whether a job in snaps has a leader exit
// (the rest of its group being terminated) that no member scan saw yet,
// and notes them as seen (journalMu held): one scan each, not one per
// write for the whole grace period.
func (s *Server) leaderExitUnscanned(snaps []jobs.Snapshot) bool {
	var now map[string]bool
	found := false
	for _, sn := range snaps {
		if sn.LeaderExit != nil {
			if now == nil {
				now = map[string]bool{}
			}
			id := sn.Info.JobID
			now[id] = true
			found = found || !s.leaderScanned[id]
		}
	}
	s.leaderScanned = now
	return found
}

// durableWaitMax bounds how long a reply waits for the journal write that
// records what its request changed (see awaitJournal).
const durableWaitMax = 3 * time.Second

// awaitJournal returns once a journal write that began after this call
// was attempted: so that a reply sent then tells the client that what its
// request changed (op on job: a kill, a stop, a start) survives a crash
// of the supervisor; a kill acknowledged then lost came back as
// supervisor-restart, a stopped service as running. It waits at most
// durableWaitMax (a slow disk does not hold the reply longer), and not
// past the server's end. A reply that goes without its change journaled
// (the write failed, or took too long) is logged, at most once per
// durableWarnEvery (health reports a failing journal).
func (s *Server) awaitJournal(op, job string) {
	t := s.journalTickets.Add(1)
	s.markDirty()
	timer := time.NewTimer(durableWaitMax)
	defer timer.Stop()
	for {
		s.attemptMu.Lock()
		done, ok, ch := s.attempted >= t, s.landed >= t, s.attemptDone
		s.attemptMu.Unlock()
		if done {
			if !ok {
				s.warnNotDurable(op, job, "the journal write failed")
			}
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			s.warnNotDurable(op, job, fmt.Sprintf("no journal write landed within %s", durableWaitMax))
			return
		case <-s.stopJournal:
			return
		}
	}
}

// warnNow reports whether a warning rate-limited by last (unix ns of the
// last one logged) may be logged now, at most once per durableWarnEvery,
// and notes it as logged.
func warnNow(last *atomic.Int64) bool {
	now := time.Now().UnixNano()
	l := last.Load()
	return now-l >= int64(durableWarnEvery) && last.CompareAndSwap(l, now)
}

// durableWarnEvery bounds how often warnNotDurable logs.
const durableWarnEvery = 10 * time.Second

// warnNotDurable logs that a reply goes before its change is journaled
// (at most once per durableWarnEvery).
func (s *Server) warnNotDurable(op, job, why string) {
	if !warnNow(&s.lastDurableWarn) {
		return
	}
	s.log.Warn("reply sent before the journal recorded its change: a crash now would undo it", "op", op, "job", job, "why", why)
}

// journalAttempted records that a write attempt covering the tickets up
// to covered has finished (landed: it succeeded), and wakes awaitJournal.
func (s *Server) journalAttempted(covered uint64, landed bool) {
	s.attemptMu.Lock()
	defer s.attemptMu.Unlock()
	s.attempted = max(s.attempted, covered)
	if landed {
		s.landed = max(s.landed, covered)
	}
	close(s.attemptDone)
	s.attemptDone = make(chan struct{})
}

// markDirty asks the journal loop for a write. It never blocks.
func (s *Server) markDirty() {
	select {
	case s.journalDirty <- struct{}{}:
	default:
	}
}

// journalLoop writes the journal after state changes (coalescing bursts
// into one write) and every flush interval, until stop is closed; Close
// writes the final version.
func (s *Server) journalLoop(stop <-chan struct{}) {
	t := time.NewTicker(s.cfg.JournalFlushInterval)
	defer t.Stop()
	// young fires when the members of young jobs are due (youngScanDue).
	young := time.NewTimer(time.Hour)
	young.Stop()
	defer young.Stop()
	armed := time.Time{}
	arm := func() {
		switch due := s.youngScanDue(); {
		case due.IsZero() && !armed.IsZero():
			young.Stop() // (scanned meanwhile, or the young job ended)
			armed = time.Time{}
		case !due.IsZero() && !due.Equal(armed):
			armed = due
			young.Reset(max(time.Until(due), 0))
		}
	}
	for {
		select {
		case <-stop:
			return
		case <-s.journalDirty:
			s.writeJournal(false)
			arm()
			// Coalesce bursts: changes arriving now are written together
			// after a short pause, bounding the write rate.
			pause := time.NewTimer(s.journalPause())
			select {
			case <-stop:
				pause.Stop()
				return
			case <-pause.C:
			}
		case <-young.C:
			armed = time.Time{}
			s.writeJournal(false)
			arm()
		case <-t.C:
			s.writeJournal(true)
			arm()
		}
	}
}

// journalMinInterval is the shortest time between two journal writes
// triggered by state changes: a change reaches the disk within about this
// long, and a burst of spawns costs one write per interval. With a cgroup
// per job, orphans are found through their cgroups whatever the journal
// says, so the journal only has to keep fates and may lag a little more.
const (
	journalMinInterval       = 25 * time.Millisecond
	journalMinIntervalCgroup = 100 * time.Millisecond
)

func (s *Server) journalPause() time.Duration {
	if s.cgroupBase != nil {
		return journalMinIntervalCgroup
	}
	return journalMinInterval
}

// writeJournal saves a snapshot of every job. Failures are logged (once
// per failure streak) and counted; the supervisor keeps running.
//
// The journal is bounded in bytes (JournalMaxBytes) as well as in finished
// jobs (JournalMaxFinished): running jobs and services are always written
// (they are what a restarted supervisor must reconcile or resume), and
// the most recently finished one-shot jobs fill what they leave, newest
// first. When running jobs and services alone pass the bound, the records
// of running one-shot jobs are written cut down (slimRecord: argv, shell,
// cwd, labels clipped; what reconciles the process is whole); a document
// Load would refuse (journal.MaxFileBytes) is never written.
func (s *Server) writeJournal(periodic bool) {
	s.journalMu.Lock()
	defer s.journalMu.Unlock()
	// (tickets taken before the jobs' snapshots below: what their
	// requests changed is in them)
	covered, landed := s.journalTickets.Load(), false
	defer func() { s.journalAttempted(covered, landed) }()
	if s.recCache == nil {
		s.recCache = map[string]cachedRecord{}
	}
	budget := s.cfg.JournalMaxBytes
	if budget <= 0 {
		budget = DefaultConfig().JournalMaxBytes
	}
	// Finished records do not change: each is encoded once and reused.
	// The cache is kept in place (entries not seen in this write are
	// dropped after it) and the list of records reused, so that a write
	// allocates for what changed only: with a thousand finished jobs kept
	// and ten writes a second, rebuilding both was a good part of the
	// supervisor's garbage. A finished record left out for size stays in
	// the cache without its encoding (it is not encoded again at every
	// write only to be left out again).
	s.recGen++
	gen := s.recGen
	encoded := s.encBuf[:0] // running jobs and services, then finished ones
	fin := s.finBuf[:0]
	cached := func(id string, seq uint64) bool {
		c, ok := s.recCache[id]
		if ok && c.seq == seq {
			c.gen = gen
			s.recCache[id] = c
			if c.svc {
				encoded = append(encoded, c.b)
			} else {
				fin = append(fin, finRecord{id: id, finN: c.finN, size: c.size, b: c.b})
			}
			return true
		}
		return false
	}
	var snaps []jobs.Snapshot
	var intentsCovered uint64
	take := func(last uint64) {
		intentsCovered = last
		snaps = s.jobs.Snapshots(s.cfg.JournalMaxFinished, cached)
	}
	if s.intents != nil {
		// (the intents appended before these snapshots are covered by
		// this write, later ones are newer than it: see Intents.Hold)
		s.intents.Hold(take)
	} else {
		take(0)
	}
	scan := periodic || s.cgroupBase == nil && s.leaderExitUnscanned(snaps)
	if !scan && s.cgroupBase == nil {
		scan = s.youngScanDueLocked(snaps)
	}
	if scan {
		// (also at once when a job's leader ended and the rest of its
		// group is being terminated, and soon after a job started:
		// without cgroups the members found now are how a restarted
		// supervisor proves them its own)
		s.scanMembers(snaps)
		s.lastScan, s.youngScanAt = time.Now(), time.Time{}
		s.scannedRuns = make(map[string]int64, len(snaps))
		for _, sn := range snaps {
			if youngScanned(sn) {
				s.scannedRuns[sn.Info.JobID] = sn.Info.StartedAt
			}
		}
	}
	var slimmable []int // running one-shot jobs' records, in encoded
	var slimRecs []journal.Record
	for _, sn := range snaps {
		id := sn.Info.JobID
		r := s.record(sn)
		r.Members = s.members[id]
		b, err := json.Marshal(&r)
		if err != nil {
			s.log.Error("encode journal record", "job", id, "err", err)
			continue
		}
		if sn.Info.State == protocol.StateExited {
			s.recCache[id] = cachedRecord{seq: sn.Info.LastSeq, b: b, gen: gen, svc: sn.Service != nil, finN: sn.FinN, size: len(b)}
			if sn.Service == nil {
				fin = append(fin, finRecord{id: id, finN: sn.FinN, size: len(b), b: b})
				continue
			}
		} else if sn.Service == nil {
			slimmable = append(slimmable, len(encoded))
			slimRecs = append(slimRecs, r)
		}
		encoded = append(encoded, b)
	}
	must := int64(journalHeaderBytes)
	for _, b := range encoded {
		must += int64(len(b)) + 1
	}
	if must > budget && len(slimmable) > 0 {
		// Running jobs and services alone pass the bound: the running
		// one-shot jobs' records go cut down (what reconciles the
		// process, its fate and output tail stay whole).
		for i, k := range slimmable {
			if b, err := json.Marshal(slimRecord(slimRecs[i])); err == nil && len(b) < len(encoded[k]) {
				must -= int64(len(encoded[k]) - len(b))
				encoded[k] = b
			}
		}
	}
	if must > budget {
		if !s.journalOverBound {
			s.log.Warn("running jobs and services alone pass --journal-max-bytes; no finished job is journaled while they do",
				"bytes", must, "journalMaxBytes", budget, "runningAndServices", len(encoded))
		}
		s.journalOverBound = true
	} else {
		s.journalOverBound = false
	}
	// The finished jobs' records fill the rest, newest first (then in
	// the order they finished: a restarted supervisor restores them in
	// file order, which is the order its bounds forget them in).
	slices.SortFunc(fin, func(a, b finRecord) int { return cmp.Compare(b.finN, a.finN) })
	room := budget - must
	kept := len(encoded)
	for _, f := range fin {
		if int64(f.size)+1 > room {
			if f.b != nil { // left out for size: remembered without its encoding
				c := s.recCache[f.id]
				c.b = nil
				s.recCache[f.id] = c
			}
			continue
		}
		room -= int64(f.size) + 1
		if f.b == nil {
			// It fits again (newer ones were removed or forgotten): its
			// record is encoded anew at the next write, asked for now
			// (else it waited for the next change or periodic write).
			delete(s.recCache, f.id)
			s.markDirty()
			continue
		}
		encoded = append(encoded, f.b)
	}
	slices.Reverse(encoded[kept:])
	for id, c := range s.recCache {
		if c.gen != gen {
			delete(s.recCache, id)
		}
	}
	defer func() {
		clear(encoded) // (no record kept alive by the reused lists)
		s.encBuf = encoded[:0]
		clear(fin)
		s.finBuf = fin[:0]
	}()
	hdr := &journal.File{InstanceID: s.instanceID, Pid: os.Getpid(), WrittenAt: time.Now().UnixMilli()}
	if s.intents != nil {
		hdr.IntentsGeneration, hdr.IntentsCovered = s.intents.Generation(), intentsCovered
	}
	if err := s.journal.SaveEncoded(hdr, encoded); err != nil {
		if s.finalJournal.Load() {
			// (no retry follows: say what the next start will find)
			s.log.Error("journal write at shutdown failed: the journal on disk is older than this stop; the next start reports what became of the jobs from it and from the intents file", "path", s.journal.Path(), "err", err)
		} else if !s.journalFailing {
			msg := "journal write failed; will keep retrying"
			if errors.Is(err, journal.ErrTooLarge) {
				msg = "journal write refused: running jobs and services alone would make a journal too large to read back; the previous journal is kept (will keep retrying)"
			}
			s.log.Error(msg, "path", s.journal.Path(), "err", err)
			s.journalErr.Store(&journalFailure{err: err, since: time.Now()})
		}
		s.journalFailing = true
		return
	}
	landed = true
	s.jobs.Journaled(snaps)
	if s.intents != nil {
		// (a file that could not be written is rewritten by Covered: if
		// that worked, intents are written again)
		was := s.intents.Writable()
		if err := s.intents.Covered(intentsCovered); err != nil {
			s.warnIntents("journal intents not compacted", err)
		} else if f := s.intentErr.Load(); f != nil && !was && s.intents.Writable() && s.intentErr.CompareAndSwap(f, nil) {
			s.log.Info("journal intents can be written again", "path", journal.IntentsPath(s.journal.Path()))
		}
	}
	if s.journalFailing {
		s.log.Info("journal writes recovered", "path", s.journal.Path())
		s.journalFailing = false
		s.journalErr.Store(nil)
	}
}

// journalFailure is why journal writes fail, since when.
type journalFailure struct {
	err   error
	since time.Time
}

// String says so for health ("" for nil: writes land).
func (f *journalFailure) String() string {
	if f == nil {
		return ""
	}
	return fmt.Sprintf("not written since %s: %v", f.since.UTC().Format(time.RFC3339), f.err)
}

// journalHeaderBytes is what a journal write counts for the document
// around its records (version, instance id, pid, time) against
// JournalMaxBytes.
const journalHeaderBytes = 512

// finRecord is a finished one-shot job's record in a journal write (b
// nil: left out for size at an earlier write).
type finRecord struct {
	id   string
	finN uint64
	size int
	b    []byte
}

// cachedRecord is the encoding of a finished job's record, valid while
// its last seq is seq (a finished service started again changes it); b
// is nil for a record left out of the journal for size (size is its
// length).
type cachedRecord struct {
	seq  uint64
	b    []byte
	gen  uint64 // the last write that included it (see writeJournal)
	svc  bool   // a service's (always written)
	finN uint64 // a one-shot job's place in the finish order
	size int
}

// Bounds of a running one-shot job's record cut down by slimRecord.
const (
	slimArgBytes   = 1024 // each of argv (its first 16 elements), shell, cwd
	slimArgvBytes  = 4096 // argv in all
	slimLabelBytes = 4096 // labels in all
)

// slimRecord is r with its client-given text cut down (clipped, with a
// marker): argv, shell, cwd, labels (those that fit, in key order) and
// error. What identifies and reconciles the process (pid, group, start
// ticks, members, cgroup) and the job's fate and output tail stay whole.
// For running one-shot jobs only: a service's spec is what it is started
// again with, never cut.
func slimRecord(r journal.Record) *journal.Record {
	r.Argv = jobs.ClipArgv(r.Argv, 16, slimArgBytes, slimArgvBytes)
	r.Shell = jobs.Clip(r.Shell, slimArgBytes)
	r.Cwd = jobs.Clip(r.Cwd, slimArgBytes)
	r.Error = jobs.Clip(r.Error, slimArgBytes)
	n := 0
	for k, v := range r.Labels {
		n += len(k) + len(v)
	}
	if n > slimLabelBytes {
		keys := slices.Sorted(maps.Keys(r.Labels))
		kept := map[string]string{}
		n = 0
		for _, k := range keys {
			if v := r.Labels[k]; n+len(k)+len(v) <= slimLabelBytes {
				kept[k] = v
				n += len(k) + len(v)
			}
		}
		r.Labels = kept
	}
	return &r
}

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
// (the journal loop writes then). s.journalMu held.
func (s *Server) youngScanDueLocked(snaps []jobs.Snapshot) bool {
	var oldest int64
	for _, sn := range snaps {
		i := sn.Info
		if youngScanned(sn) && s.scannedRuns[i.JobID] != i.StartedAt && (oldest == 0 || i.StartedAt < oldest) {
			oldest = i.StartedAt
		}
	}
	if oldest == 0 {
		s.youngScanAt = time.Time{}
		return false
	}
	now := time.Now()
	due := time.UnixMilli(oldest).Add(youngScanAge)
	if due.After(now.Add(youngScanAge)) {
		due = now // (a start in the future: the clock was stepped back)
	}
	if next := s.lastScan.Add(youngScanEvery); next.After(due) {
		due = next
	}
	if !now.Before(due) {
		return true
	}
	s.youngScanAt = due
	return false
}

// youngScanDue is when a write should scan the members of young jobs
// (zero: none is due).
func (s *Server) youngScanDue() time.Time {
	s.journalMu.Lock()
	defer s.journalMu.Unlock()
	return s.youngScanAt
}

// scanMembers records the live members of every running job's process
// group (one scan of the process table). s.journalMu must be held.
func (s *Server) scanMembers(snaps []jobs.Snapshot) {
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
	found := jobs.GroupMembers(groups, sessions)
	s.members = make(map[string][]journal.Member, len(found))
	for pgid, ps := range found {
		ms := make([]journal.Member, 0, min(len(ps), 64))
		for _, p := range ps {
			if len(ms) == cap(ms) {
				break // a bounded sample proves ownership as well as all of them
			}
			ms = append(ms, journal.Member{Pid: p.Pid, StartTicks: p.StartTicks})
		}
		s.members[byGroup[pgid]] = ms
	}
}

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
func (s *Server) sweepMarked(doc *journal.File) map[string]int {
	if s.lock.PreviousStopped {
		return nil
	}
	var within []string // (besides our own cgroup)
	if s.cgroupBase != nil {
		within = append(within, s.cgroupBase.Path)
	}
	var ended []jobs.MarkedProcess
	seen := map[jobs.ProcID]bool{}
	killed := false
	// Again while something is found: a leftover may start another
	// process (outside its group) while the previous ones are ended.
	for round := 0; ; round++ {
		found, err := jobs.FindMarked(s.mark, within...)
		if err != nil {
			s.sweepLeft = true
			s.log.Error("reconcile: processes an earlier run left running could not be looked for by their jobs' mark; the next start looks again", "err", err)
			break
		}
		if len(found) == 0 {
			break
		}
		if round == 3 {
			s.sweepLeft = true
			s.log.Error("reconcile: processes of an earlier run carrying their jobs' mark keep appearing; left running, the next start looks again", "pids", pidsOf(found, 64))
			break
		}
		e, k, left := jobs.TerminateMarked(found, s.mark, s.cfg.Jobs.Grace)
		killed = killed || k
		for _, p := range e {
			if id := (jobs.ProcID{Pid: p.Pid, StartTicks: p.StartTicks}); !seen[id] {
				seen[id] = true
				ended = append(ended, p)
			}
		}
		if left {
			s.sweepLeft = true
			s.log.Error("reconcile: processes of an earlier run found by their jobs' mark survived SIGKILL (stuck in the kernel?); the next start looks again", "pids", pidsOf(e, 64))
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
			s.orphansReconciled.Add(1)
		}
		per[p.JobID]++
	}
	if len(unrecorded) > 0 {
		// The previous run did not shut down (or its journal is lost).
		s.jobs.NoteCrashRecovery(time.Now())
	}
	s.log.Warn("reconcile: processes of an earlier run found by their jobs' mark and terminated",
		"processes", len(ended), "pids", pidsOf(ended, 64), "jobs", len(per), "sigkill", killed,
		"unrecordedJobs", unrecorded, "finishedJobs", finished)
	return per
}

// pidsOf returns the pids of at most n of ps.
func pidsOf(ps []jobs.MarkedProcess, n int) []int {
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
func (s *Server) reapLeftoverCgroups(recorded []string) map[string]string {
	notes := map[string]string{}
	var cgs []*cgroups.Cgroup
	seen := map[string]bool{}
	if s.cgroupBase != nil {
		for _, cg := range s.cgroupBase.Leftovers() {
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
	ours := map[string]bool{cgroupBaseName(s.cfg.StateDir): true, legacyCgroupBaseName(s.cfg.StateDir): true}
	swept := map[string]bool{}
	for _, p := range recorded {
		base := filepath.Dir(p)
		if swept[base] || s.cgroupBase != nil && base == s.cgroupBase.Dir {
			continue
		}
		swept[base] = true
		if !ours[filepath.Base(base)] {
			s.log.Warn("reconcile: the journal names a job cgroup outside this state directory's cgroup bases; not touched", "cgroup", p)
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
	deadline := time.Now().Add(s.cfg.Jobs.Grace)
	for slices.ContainsFunc(live, (*cgroups.Cgroup).Populated) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // waiting for the orphans to exit
	}
	for _, cg := range live {
		if cg.Populated() {
			_ = cg.Kill()
		}
		id := filepath.Base(cg.Path) // the job's cgroup name (journal records name it)
		s.orphansReconciled.Add(1)
		s.log.Warn("reconcile: orphan found alive and terminated", "cgroupName", id, "via", "cgroup", "cgroup", cg.Path, "pids", procs[cg])
		notes[id] = "orphaned processes found alive in the job's cgroup after the restart and terminated"
	}
	for _, cg := range cgs {
		if err := cg.Remove(5 * time.Second); err != nil {
			s.log.Error("reconcile: leftover job cgroup not removed", "err", err)
		} else if dir := filepath.Dir(cg.Path); s.cgroupBase == nil || dir != s.cgroupBase.Dir {
			_ = os.Remove(dir) // another base: gone with its last job cgroup (else it stays)
		}
	}
	return notes
}

// tailChunks converts a record's tail chunks (jobs.Restore checks them).
func tailChunks(r journal.Record) []jobs.TailChunk {
	var out []jobs.TailChunk
	for _, c := range r.OutputTailChunks {
		out = append(out, jobs.TailChunk{Seq: c.Seq, Stream: protocol.Stream(c.Stream), Len: c.Len, Attempt: c.Attempt})
	}
	return out
}
