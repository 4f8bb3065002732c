package jobs

import (
	"fmt"
	"slices"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Restore adds a job recovered from its record r (the journal is
// input: r is checked first), visible to status, list and poll until
// retention expires. r must describe a finished job (State exited,
// Reason set). interrupted says the job was running when its supervisor
// went away: its terminal event is new, numbered after r.LastSeq, and
// the output the dead supervisor may have published past the record is
// skipped. A job recorded as finished already had its terminal event,
// numbered r.LastSeq, and keeps that seq. Restore does not modify r.
//
// It goes in steps, each below in the order it runs: the record is
// checked (checkRestorable), the job made with what the record says of
// it (restoredJob), its first run's job.started event rebuilt
// (restoreStarted), its output (restoreTail, then restoreInterrupted for
// an interrupted job) and its terminal event (restoreExit), a service's
// supervision resumed (restoreService), and the job added to the
// Manager (addRestored).
func (m *Manager) Restore(r journal.Record, interrupted bool) error {
	if err := checkRestorable(&r, interrupted); err != nil {
		return fmt.Errorf("restore %s: %w", r.JobID, err)
	}
	j := m.restoredJob(&r)
	j.restoreStarted(&r)
	j.restoreTail(&r)
	if interrupted {
		j.restoreInterrupted(&r)
	}
	j.restoreExit(&r, interrupted)
	j.restoreService(&r, interrupted)
	j.diskFinishedLocked() // (j is not visible yet: no lock needed)
	if err := m.addRestored(j, r.EndedAt); err != nil {
		if j.out.disk != nil {
			j.out.disk.Release()
		}
		return err
	}
	return nil
}

// checkRestorable says why r cannot be restored (nil: it can): the
// journal is input, so a record that is not of a finished job, or whose
// seqs, offsets, service counts, tail or skipped offsets are implausible,
// is refused before anything is made of it. It has no side effects.
func checkRestorable(r *journal.Record, interrupted bool) error {
	if r.State != protocol.StateExited || r.Reason == "" {
		return fmt.Errorf("not a finished job (state %q, reason %q)", r.State, r.Reason)
	}
	if r.LastSeq > 1<<62 || r.OutputTailSeq > 1<<62 { // (no seq may wrap)
		return fmt.Errorf("implausible seqs (last %d, tail %d)", r.LastSeq, r.OutputTailSeq)
	}
	// (offsets must not be negative or wrap, and the tail ends at the
	// output's end)
	if r.OutputEnd < 0 || r.OutputEnd > 1<<62 || int64(len(r.OutputTail)) > r.OutputEnd {
		return fmt.Errorf("implausible output end %d (tail of %d bytes)", r.OutputEnd, len(r.OutputTail))
	}
	if sv := r.Service; sv != nil {
		if sv.Attempt < 0 || sv.Attempt > 1<<30 || sv.Restarts < 0 || sv.Restarts > 1<<30 || sv.RunOutputStart < 0 {
			return fmt.Errorf("implausible service counts (attempt %d, restarts %d)", sv.Attempt, sv.Restarts)
		}
		if interrupted && r.OutputEnd > 1<<62-offsetReserve {
			return fmt.Errorf("implausible output end %d for a service", r.OutputEnd)
		}
	}
	tailEnd := r.TailEnd() // (OutputEnd: older journals, or no tail)
	if tailEnd < int64(len(r.OutputTail)) || tailEnd > r.OutputEnd {
		return fmt.Errorf("implausible output tail end %d (tail of %d bytes, output end %d)", tailEnd, len(r.OutputTail), r.OutputEnd)
	}
	return checkSkips(restoredSkips(r), tailEnd-int64(len(r.OutputTail)), tailEnd, r.OutputEnd)
}

// restoredSkips is the skipped offset ranges of r's output: a service
// keeps its own.
func restoredSkips(r *journal.Record) []journal.OffsetRange {
	if sv := r.Service; sv != nil {
		return sv.OutputSkips
	}
	return r.OutputSkips
}

// restoredHistory is the runs of r's service (none for a one-shot job)
// as a running job keeps them: the last protocol.HistoryRuns.
func restoredHistory(r *journal.Record) []protocol.RunRecord {
	if r.Service == nil {
		return nil
	}
	history := r.Service.History
	if n := len(history) - protocol.HistoryRuns; n > 0 {
		history = history[n:]
	}
	return history
}

// restoredJob makes the job r describes, not yet visible: its identity
// and spec as a one-shot job (restoreService makes it a service), its
// end, process, terminal, times and counts, its output's end and seq,
// what the journal on disk says of it, and its files on disk reopened
// when it had some.
func (m *Manager) restoredJob(r *journal.Record) *Job {
	j := m.makeJob(r.JobID, protocol.SpawnArgs{Name: m.validRestoredName(r.JobID, r.Name), Argv: r.Argv, Shell: r.Shell, Cwd: r.Cwd, Labels: r.Labels, SessionID: r.SessionID})
	j.exitCode, j.signal, j.errMsg = r.ExitCode, r.Signal, r.Error
	j.timeout, j.noOutput = time.Duration(r.TimeoutMs)*time.Millisecond, time.Duration(r.NoOutputMs)*time.Millisecond
	j.life = lifecycle.Life{State: Exited, Reason: r.Reason, LeaderExited: true, GroupGone: true, Killing: true}
	j.run.pid, j.run.pgid, j.run.startTicks = r.Pid, r.Pgid, r.StartTicks
	j.in.isPTY, j.in.rows, j.in.cols = r.Pty, min(r.Rows, protocol.MaxTermSize), min(r.Cols, protocol.MaxTermSize) // (the journal is input)
	if m.outlog != nil && r.OutputDisk {
		// (its files go on: what it republishes, skips, a resumed
		// service's later runs; Restore releases them if the job is
		// not added)
		j.out.disk, j.out.diskErr = j.newDisk(false)
	}
	j.createdAt, j.startedAt, j.endedAt = fromMs(r.CreatedAt), fromMs(r.StartedAt), fromMs(r.EndedAt)
	j.lastOutputAt, j.updatedAt = fromMs(r.LastOutputAt), m.now()
	j.out.streamN = [2]int64{r.StdoutBytes, r.StderrBytes}
	j.out.offset = r.OutputEnd
	j.out.ring.end = r.OutputEnd
	j.out.seq = r.LastSeq
	// What the journal on disk says of it: a successor numbers from
	// there (a later run of a service resumed by restoreService is held
	// at the reserve gate until its own record is written).
	j.journal.onDisk, j.journal.seqSnap, j.journal.offSnap = true, r.LastSeq, r.OutputEnd
	return j
}

// restoreStarted rebuilds the first run's job.started event (seq 1), as
// it was published: the record's pid is the first run's only for a
// one-shot job or a service's first run; a later run's service has it
// in its history, else it is reported missing rather than made up.
// j.spec is still the record's (restoreService has not run).
func (j *Job) restoreStarted(r *journal.Record) {
	pid, at, attempt := r.Pid, r.StartedAt, 0
	if sv := r.Service; sv != nil {
		attempt = 1
		if sv.Attempt > 1 {
			pid = 0
			for _, run := range restoredHistory(r) {
				if run.Attempt == 1 {
					pid, at = run.Pid, run.StartedAt
				}
			}
		}
	}
	if pid > 0 {
		ev, _ := protocol.NewEvent(j.id, 1, at, protocol.KindStarted, j.startedPayload(pid, attempt))
		ev.Attempt = attempt
		j.evs.started = &ev
	}
}

// restoreTail puts r's output tail back in j's ring, each chunk with the
// seq, stream, offset and run it had (the tail as one chunk when its
// chunks do not describe it), with r's skipped offsets; output before the
// tail is marked evicted, and j's seq is past the tail's.
func (j *Job) restoreTail(r *journal.Record) {
	tailEnd := r.TailEnd()
	tailStart := tailEnd - int64(len(r.OutputTail))
	j.out.ring.skips = slices.Clone(restoredSkips(r))
	if len(r.OutputTail) > 0 && r.OutputTailSeq >= 2 {
		off := tailStart
		j.out.ring.end = off
		if tailChunksValid(r) {
			data := r.OutputTail
			for _, c := range r.OutputTailChunks {
				attempt := c.Attempt
				switch sv := r.Service; {
				case sv == nil || attempt < 0 || attempt > max(sv.Attempt, 1):
					attempt = 0 // (a one-shot job's chunks have none; nor has a run not yet run)
				case attempt == 0 && off >= sv.RunOutputStart:
					attempt = max(sv.Attempt, 1) // the current run's (older journals)
				}
				j.out.ring.add(chunk{Chunk: protocol.Chunk{Seq: c.Seq, Stream: c.Stream, Offset: off, Data: data[:c.Len:c.Len]}, ts: r.LastOutputAt, attempt: attempt})
				data, off = data[c.Len:], off+int64(c.Len)
			}
		} else {
			j.out.ring.add(chunk{Chunk: protocol.Chunk{Seq: r.OutputTailSeq, Stream: protocol.Stdout, Offset: off, Data: r.OutputTail}, ts: r.LastOutputAt})
		}
	}
	j.out.ring.end = r.OutputEnd
	// Output before the tail did not survive the restart (the offsets a
	// service skipped never held any).
	j.out.ring.evicted = j.out.ring.span(0, tailStart)
	if j.out.seq < r.OutputTailSeq {
		j.out.seq = r.OutputTailSeq
	}
}

// restoreInterrupted numbers j's later events past those the dead
// supervisor may have published beyond the record, publishes the output
// it had read but not yet published, and for a one-shot job ends the
// output past what that supervisor may have published (a service's is
// moved there by restoreService, once its terminal event is made).
func (j *Job) restoreInterrupted(r *journal.Record) {
	// Events past the record may have gone out before the previous
	// supervisor died, up to seqReserve past it: number the later ones
	// past them all (the seqs between are reported missing).
	j.out.seq = max(j.out.seq, r.LastSeq+seqReserve)
	// Output it had read but not yet published when the record was taken
	// is published now, where it belongs in the output (a follower that
	// got it from the dead supervisor sees the same bytes at the same
	// offsets again, under new seqs).
	if unpublishedValid(r.OutputUnpublished) {
		for _, p := range r.OutputUnpublished {
			if sv := r.Service; sv == nil || p.Attempt > max(sv.Attempt, 1) {
				p.Attempt = 0 // (as for the tail's chunks)
			}
			j.out.seq++
			j.storeLocked(chunk{Chunk: protocol.Chunk{Seq: j.out.seq, Stream: p.Stream, Offset: j.out.offset, Data: p.Data}, ts: r.LastOutputAt, attempt: p.Attempt})
			j.out.offset += int64(len(p.Data))
		}
	}
	if r.Service == nil {
		// The dead supervisor may have published output up to
		// offsetReserve past the record: the job's output ends past all
		// of it (as a resumed service's next run starts there), so that
		// a poll cursor or delivered end a client got from it stays
		// within the output (those offsets hold nothing now: what the
		// client missed of them is in the missing seqs).
		j.skipOutputLocked(r.OutputEnd + offsetReserve)
		j.out.offset = j.out.ring.end
	}
}

// restoreExit makes j's terminal event, numbered after its output and
// its job.started event (r.LastSeq when the record already had it, see
// Restore), and closes j's done and run channels: no run goes on.
func (j *Job) restoreExit(r *journal.Record, interrupted bool) {
	if interrupted || j.out.seq == 0 || j.out.seq == r.OutputTailSeq {
		// (a new terminal event; also when the record's last seq is not
		// past its output, as in journals without a terminal event)
		j.out.seq++
	}
	if j.evs.started != nil && j.out.seq <= j.evs.started.Seq {
		j.out.seq = j.evs.started.Seq + 1 // (a record whose last seq is not past its start)
	}
	kind := protocol.KindFailed
	if r.Reason == protocol.ReasonExit {
		kind = protocol.KindExited
	}
	ev, _ := protocol.NewEvent(j.id, j.out.seq, r.EndedAt, kind, protocol.ExitPayload{
		Reason: r.Reason, ExitCode: r.ExitCode, Signal: r.Signal, Error: r.Error,
		DurationMs: max(0, r.EndedAt-r.StartedAt), OutputEnd: j.out.offset, EndedAt: r.EndedAt,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, LastOutputAt: r.LastOutputAt,
	})
	if r.Service != nil {
		ev.Attempt = max(r.Service.Attempt, 1) // (as published: a service's events all carry their run)
	}
	j.evs.exit = &ev
	close(j.done)
	close(j.runDone) // (and no run goes on)
	close(j.runStarted)
}

// restoreService makes j a service again when r's has a restart policy
// and a spec that passes spawn's checks (else j stays a finished job
// that cannot be started again, and that is logged): its spec, backoff,
// runs and history; an interrupted one's next run writes past the output
// the dead supervisor may have published.
func (j *Job) restoreService(r *journal.Record, interrupted bool) {
	sv := r.Service
	if sv == nil || !sv.Spec.Restart.Enabled() {
		return
	}
	// The journal is input too: a spec that would not pass spawn's
	// checks is not supervised again.
	if err := sv.Spec.Validate(); err != nil {
		j.m.log.Warn("journal: service spec invalid; restored as a finished job that cannot be started again", "job", r.JobID, "err", err)
		return
	}
	name := j.spec.Name
	j.spec = sv.Spec
	j.spec.Name = name // (the record's: one name whatever the spec says)
	j.superviseSpec()
	var ends []time.Time
	for _, e := range sv.Ends {
		ends = append(ends, time.UnixMilli(e))
	}
	j.svc.backoff.Consecutive, j.svc.backoff.Ends = sv.Consecutive, ends
	j.svc.attempt, j.svc.restarts, j.svc.history = max(sv.Attempt, 1), sv.Restarts, restoredHistory(r)
	j.setGraceAndWatchdog()
	j.svc.runOffset = r.OutputEnd
	if interrupted {
		// The dead supervisor may have published output past the record,
		// up to offsetReserve past it: the next run writes past all of
		// it, so that no offset a client read is used again for other
		// bytes (a poll cursor would skip them, a follower drop them as
		// delivered).
		j.skipOutputLocked(r.OutputEnd + offsetReserve)
		j.out.offset = j.out.ring.end
	}
}

// addRestored makes j visible in m's job table, counted as created and
// finished at endedAt (ms), unless a job with its id is there already.
// A service is live (noted as finished, not bounded yet: the caller may
// resume it, which makes it supervised again); a one-shot job is a
// recent one, bounded by retention.
func (m *Manager) addRestored(j *Job, endedAt int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.jobs[j.id]; dup {
		return fmt.Errorf("restore %s: a job with that id exists", j.id)
	}
	m.finN++
	j.acct.finN = m.finN
	m.createN++
	j.acct.createN = m.createN
	m.jobs[j.id] = j
	m.indexNameLocked(j, false, endedAt)
	if j.isService() {
		m.live[j.id] = j
		m.noteFinishedServiceLocked(j)
	} else {
		m.forgotten.Add(uint64(m.addRecentLocked(j)))
	}
	return nil
}

// maxUnpublished bounds a restored job's unpublished output (the journal
// is input; a supervisor holds at most two merge buffers' worth).
const maxUnpublished = 64 << 20

// checkSkips checks a journal's skipped offset ranges (input): at most
// skipsMax, each non-empty, in order, none overlapping another or the
// tail [tailStart, tailEnd), all below the output's end.
func checkSkips(rs []journal.OffsetRange, tailStart, tailEnd, end int64) error {
	if len(rs) > skipsMax {
		return fmt.Errorf("%d skipped offset ranges (at most %d)", len(rs), skipsMax)
	}
	prev := int64(0)
	for _, r := range rs {
		if r.At < prev || r.N <= 0 || r.N > end || r.At > end-r.N || (tailEnd > tailStart && r.At < tailEnd && r.At+r.N > tailStart) {
			return fmt.Errorf("implausible skipped offsets [%d, +%d) (output end %d, tail [%d, %d))", r.At, r.N, end, tailStart, tailEnd)
		}
		prev = r.At + r.N
	}
	return nil
}

// unpublishedValid reports whether a record's unpublished output can be
// restored: known streams, some data, within maxUnpublished in all.
func unpublishedValid(ps []journal.Unpublished) bool {
	n := 0
	for _, p := range ps {
		n += len(p.Data)
		if len(p.Data) == 0 || n > maxUnpublished || (p.Stream != protocol.Stdout && p.Stream != protocol.Stderr) || p.Attempt < 0 {
			return false
		}
	}
	return true
}

// tailChunksValid reports whether r.OutputTailChunks describe
// r.OutputTail (the journal is input: anything else is ignored and the
// tail restored as one chunk): lengths adding up to the tail's, seqs
// rising from 2 to OutputTailSeq, streams known.
func tailChunksValid(r *journal.Record) bool {
	if len(r.OutputTailChunks) == 0 {
		return false
	}
	n, prev := 0, uint64(1)
	for _, c := range r.OutputTailChunks {
		if c.Len <= 0 || c.Len > len(r.OutputTail)-n || c.Seq <= prev || (c.Stream != protocol.Stdout && c.Stream != protocol.Stderr) {
			return false
		}
		n, prev = n+c.Len, c.Seq
	}
	return n == len(r.OutputTail) && prev == r.OutputTailSeq
}

func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// EndReasonAfterCrash is the reason a job interrupted by its supervisor's
// death ends with, given the reason it was being ended for then
// (journal.Record.PendingEnd, "" for none): that reason when a kill was
// under way (its grace period running: the end was asked for, the next
// supervisor only finished it), else supervisor-restart. resume says
// whether a service goes on (it was not being stopped or killed for
// good).
func EndReasonAfterCrash(pending Reason) (reason Reason, resume bool) {
	switch pending {
	case protocol.ReasonManualCancel, protocol.ReasonStopped:
		return pending, false
	case protocol.ReasonOverallTimeout, protocol.ReasonNoOutputTimeout, protocol.ReasonOwnershipEscape,
		protocol.ReasonWatchdog, protocol.ReasonShutdown:
		return pending, true
	}
	// (manual-restart: the service goes on; none or unknown: the
	// supervisor's death ended it)
	return protocol.ReasonSupervisorRestart, true
}
