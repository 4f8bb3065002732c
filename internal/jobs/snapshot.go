package jobs

import (
	"bytes"
	"slices"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TailBytes is how much of a job's newest output a Snapshot carries.
const TailBytes = 4 << 10

// maxTailChunks bounds the chunks of a snapshot's tail (each is a record in
// the journal): a job printing a byte per event keeps a shorter tail rather
// than 4096 chunk records in every journal write.
const maxTailChunks = 256

// Snapshot is a job's state as the journal writer takes it: its record,
// the one model of a job's durable state (journal.Record: what the
// journal and its intents write, what Restore takes back), and beside it
// what the writer needs of the job that is not written.
type Snapshot struct {
	// Record is the job's record. Its InstanceID and Members are left
	// empty: the writer knows them, the engine does not.
	Record journal.Record
	// Info is the job's wire view when the record was taken (the
	// journal's OpenClaw view is made from it).
	Info protocol.JobInfo
	// FinN is a finished one-shot job's place in the order jobs finished
	// (higher: later; 0 for others): the journal keeps the newest.
	FinN uint64
	// GroupGone is set once the job's process group was seen empty after
	// its leader was reaped: the number may be anyone's now (its members
	// must not be recorded as the job's).
	GroupGone bool
}

// Snapshot returns the job's record as it is now (see Snapshot).
func (j *Job) Snapshot() Snapshot {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.fingerprintLocked()
	if len(j.out.pending[0])+len(j.out.pending[1]) > 2*protocol.OutputHeadroom+TailBytes {
		// More unpublished output than a record keeps of a job's output
		// (TailBytes): published now, its merge window cut short, it is
		// in the tail instead (and the journal stays small).
		j.flushInOrderLocked(0)
		j.flushLocked(1)
	} else if len(j.out.pending[0]) > protocol.OutputHeadroom && len(j.out.pending[1]) > protocol.OutputHeadroom {
		// Both streams have some: the older is published now, so that only
		// one stream's is unpublished. Its bytes go out at OutputEnd,
		// however much more is read first (the other stream flushes it
		// first, being newer); two would be laid out back to back, where
		// output read meanwhile on the older one may land between them.
		older := 0
		if j.out.pendingSince[1] < j.out.pendingSince[0] {
			older = 1
		}
		j.flushLocked(older)
	}
	info := j.infoLocked()
	s := Snapshot{Info: info, GroupGone: j.life.GroupGone}
	r := journal.Record{
		JobID: info.JobID, Name: info.Name, Argv: info.Argv, Shell: info.Shell, Cwd: info.Cwd, Labels: info.Labels, SessionID: info.SessionID,
		Pid: info.Pid, Pgid: info.Pgid, StartTicks: j.run.startTicks, BootID: j.m.bootID, State: info.State,
		CreatedAt: info.CreatedAt, StartedAt: info.StartedAt, UpdatedAt: ms(j.updatedAt), EndedAt: info.EndedAt, LastOutputAt: info.LastOutputAt,
		Reason: info.Reason, ExitCode: info.ExitCode, Signal: info.Signal, Error: info.Error,
		StdoutBytes: info.StdoutBytes, StderrBytes: info.StderrBytes, OutputEnd: info.OutputEnd, LastSeq: info.LastSeq,
		TimeoutMs: info.TimeoutMs, NoOutputMs: info.NoOutputTimeoutMs,
		Pty: info.Pty, Rows: info.Rows, Cols: info.Cols, Cgroup: info.Cgroup, OutputDisk: info.OutputDisk || info.OutputDiskError != "",
	}
	if !j.isService() && j.life.State == Exited {
		s.FinN = j.acct.finN // (set under j.mu too: jobDone)
	}
	if j.life.State == Starting && (j.life.PendingKill != "" || j.isService() && j.life.EndReason != "") {
		// (killed before its process started: it is killed as soon as
		// the process exists, a crash meanwhile ends it so too)
		r.PendingEnd = j.life.PendingKill
		if j.isService() {
			r.PendingEnd = j.life.EndReason
		}
	}
	if j.life.State == Exiting && j.life.Killing {
		r.PendingEnd = j.life.Reason
		if j.isService() {
			r.PendingEnd = j.life.EndReason // ("": the run was ended, the service goes on)
			if j.svc.restartReq && j.life.EndReason == "" {
				// (a stop or kill after the restart op wins, as it does
				// live: see afterRunLocked)
				r.PendingEnd = protocol.ReasonManualRestart
			}
		}
	}
	if !j.isService() {
		r.OutputSkips = slices.Clone(j.out.ring.skips)
		if j.life.State != Exited && j.run.leaderWS != nil {
			code, sig := exitOf(*j.run.leaderWS)
			r.LeaderExit = &journal.LeaderExit{ExitCode: code, Signal: sig}
		}
	} else {
		r.Service = &journal.Service{
			Spec: j.spec, Attempt: j.svc.attempt, Restarts: j.svc.restarts, Consecutive: j.svc.backoff.Consecutive, RunOutputStart: j.svc.runOffset, OutputSkips: slices.Clone(j.out.ring.skips),
			History: append([]protocol.RunRecord(nil), j.svc.history...),
		}
		for _, e := range j.svc.backoff.Ends {
			r.Service.Ends = append(r.Service.Ends, e.UnixMilli())
		}
	}
	live := j.out.ring.live()
	// (the tail is contiguous: it stops at skipped offsets, see
	// ring.skipTo; it ends below the output's end when the job skipped
	// offsets after it)
	if n := len(live); n > 0 {
		r.OutputTailSeq = live[n-1].Seq
		end := live[n-1].Offset + int64(len(live[n-1].Data))
		// The chunks, newest first, up to TailBytes (the oldest of them
		// cut to its newest bytes), then their bytes copied once, in order.
		size := 0
		var chunks []journal.TailChunk
		for i := n - 1; i >= 0 && size < TailBytes && len(chunks) < maxTailChunks; i-- {
			if i < n-1 && live[i].Offset+int64(len(live[i].Data)) != live[i+1].Offset {
				break
			}
			d := live[i].Data
			if room := TailBytes - size; len(d) > room {
				d = d[len(d)-room:]
			}
			size += len(d)
			chunks = append(chunks, journal.TailChunk{Seq: live[i].Seq, Stream: live[i].Stream, Len: len(d), Attempt: live[i].attempt})
		}
		slices.Reverse(chunks)
		var tail []byte
		if size > 0 {
			tail = make([]byte, 0, size)
			for k, c := range chunks {
				d := live[n-len(chunks)+k].Data
				tail = append(tail, d[len(d)-c.Len:]...)
			}
		}
		r.OutputTail, r.OutputTailChunks = tail, chunks
		if end != r.OutputEnd && len(tail) > 0 {
			r.OutputTailEnd = end // (absent: OutputEnd)
		}
	}
	// What was read but is still in the merge window (one stream's at
	// most, after the flushes above).
	for i := range 2 {
		if p := j.out.pending[i]; len(p) > protocol.OutputHeadroom {
			r.OutputUnpublished = append(r.OutputUnpublished, journal.Unpublished{Stream: streams[i], Data: bytes.Clone(p[protocol.OutputHeadroom:]), Attempt: j.attemptTag()})
		}
	}
	s.Record = r
	return s
}

// fingerprintLocked reads the start ticks of the run's process once, while
// it cannot have been reaped (only waitLoop or runLoop reaps it, and sets
// leaderExited under j.mu right after): /proc/<pid> is then this process. Without the
// fingerprint a restarted supervisor could not recognise the orphan.
func (j *Job) fingerprintLocked() {
	if j.run.startTicks != 0 || j.run.pid <= 0 || j.life.LeaderExited || j.run.proc == nil {
		return
	}
	t, err := proc.StartTicks(j.run.pid)
	if err != nil {
		if !j.run.proc.unreaped() {
			return // reaped just now (waitLoop is finishing it): nothing to record
		}
		j.m.log.Warn("cannot read the process start time; a restart could not reconcile this job", "job", j.id, "pid", j.run.pid, "err", err)
		return
	}
	// waitLoop may have reaped it just before setting leaderExited: the
	// ticks are this process's only if it was not reaped after the read
	// (the Process tracks that through its pidfd, immune to pid reuse).
	if !j.run.proc.unreaped() {
		return
	}
	j.run.startTicks = t
}

// Snapshots returns the persistent state of every job not finished and
// of the maxFinished most recently finished one-shot jobs (all when
// maxFinished < 0); services are always included. A finished job for
// which cached (if set) reports true is left out: the caller has its
// record already (a finished job does not change until its last seq does,
// e.g. a service started again).
func (m *Manager) Snapshots(maxFinished int, cached func(id string, lastSeq uint64) bool) []Snapshot {
	m.mu.Lock()
	// The maxFinished most recently finished one-shot jobs are those
	// numbered above cut (no sort, and old ones are not even collected).
	var cut uint64
	if maxFinished >= 0 && m.finN > uint64(maxFinished) {
		cut = m.finN - uint64(maxFinished)
	}
	js := make([]*Job, 0, len(m.live)+min(len(m.recent), max(maxFinished, 0)))
	for _, j := range m.live {
		js = append(js, j)
	}
	// recent is in finN order: the jobs above cut are its tail.
	first := len(m.recent)
	for first > 0 && m.recent[first-1].finN > cut {
		first--
	}
	for _, f := range m.recent[first:] {
		if f.j != nil && m.jobs[f.j.id] == f.j { // not removed
			js = append(js, f.j)
		}
	}
	m.mu.Unlock()
	// Usually most are finished and cached: room for the others only
	// (a Snapshot is large; growing the slice by appends copied them).
	todo := js[:0]
	for _, j := range js {
		j.mu.Lock()
		finished, seq := j.life.State == Exited, j.out.seq
		j.mu.Unlock()
		if finished && cached != nil && cached(j.id, seq) {
			continue
		}
		todo = append(todo, j)
	}
	out := make([]Snapshot, len(todo))
	for i, j := range todo {
		out[i] = j.Snapshot()
	}
	return out
}

// Journaled records that snaps (taken by Snapshots) reached the disk: the
// seqs they name are the ones a restarted supervisor will know, from which
// each running job's reserve counts (see seqReserve). A snapshot whose
// write failed must not count.
func (m *Manager) Journaled(snaps []Snapshot) {
	js := make([]*Job, len(snaps))
	m.mu.Lock()
	for i, sn := range snaps {
		js[i] = m.jobs[sn.Record.JobID]
	}
	m.mu.Unlock()
	for i, sn := range snaps {
		j := js[i]
		if j == nil {
			continue
		}
		j.mu.Lock()
		j.journal.onDisk = true
		if r := &sn.Record; r.LastSeq > j.journal.seqSnap || r.OutputEnd > j.journal.offSnap {
			j.journal.seqSnap, j.journal.offSnap = max(j.journal.seqSnap, r.LastSeq), max(j.journal.offSnap, r.OutputEnd)
			j.journal.reserveAsked = false
			j.openGateLocked()
		}
		j.mu.Unlock()
	}
}
