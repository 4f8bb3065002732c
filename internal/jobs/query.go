package jobs

import (
	"cmp"
	"slices"
	"strings"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Info returns a snapshot of the job.
func (j *Job) Info() protocol.JobInfo {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.infoLocked()
}

func (j *Job) infoLocked() protocol.JobInfo {
	info := protocol.JobInfo{
		JobID: j.id, Name: j.spec.Name, State: j.life.State.Wire(), Argv: j.spec.Argv, Shell: j.spec.Shell, Cwd: j.spec.Cwd,
		Labels: j.spec.Labels, SessionID: j.spec.SessionID, Pid: j.run.pid, Pgid: j.run.pgid,
		CreatedAt: ms(j.createdAt), StartedAt: ms(j.startedAt), EndedAt: ms(j.endedAt), LastOutputAt: ms(j.lastOutputAt),
		ExitCode: j.exitCode, Signal: j.signal, Error: j.errMsg,
		TimeoutMs: j.timeout.Milliseconds(), NoOutputTimeoutMs: j.noOutput.Milliseconds(),
		StdoutBytes: j.out.streamN[0], StderrBytes: j.out.streamN[1],
		RetainedFrom: j.out.ring.from(), OutputEnd: j.out.offset, LastSeq: j.out.seq,
		Pty: j.in.isPTY, Rows: j.in.rows, Cols: j.in.cols, BracketedPaste: j.in.bracketed, Ownership: j.ownership(),
		Cgroup:     j.cgroupPath(),
		StdinOpen:  j.life.State != Exited && j.life.State != Restarting && (j.in.stdin != nil || j.in.isPTY && j.in.ptmx != nil),
		OutputHeld: j.hold.forJournal, OutputPaced: j.hold.gate != nil && j.pacedLocked(),
	}
	if j.life.State == Exited {
		info.Reason = j.life.Reason
	}
	j.diskInfoLocked(&info)
	j.notifyInfoLocked(&info)
	info.Limits = j.run.limits
	j.serviceInfoLocked(&info)
	return info
}

// Poll returns retained output from cursor (a combined output offset).
func (j *Job) Poll(cursor, maxBytes int64) (protocol.PollResult, error) {
	if maxBytes <= 0 || maxBytes > protocol.MaxPollBytes {
		maxBytes = protocol.MaxPollBytes
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if cursor > j.out.offset {
		return protocol.PollResult{}, errorf(ErrInvalid,
			"cursor %d is past the end of the job's output (%d bytes so far)", cursor, j.out.offset)
	}
	from := j.out.ring.from()
	if end, skipped := j.out.ring.skipAt(cursor); skipped && cursor >= from {
		// Offsets the ring skipped after a supervisor crash: the dead
		// supervisor may have written what it published there to the
		// files (its record in the journal ended before).
		from = end
	}
	if w := j.out.disk; w != nil && cursor < from {
		// Evicted from the ring, or past the journal's record of a dead
		// supervisor: from the job's files, if they have it (read
		// without the job's lock: its output goes on meanwhile).
		info := j.infoLocked()
		j.mu.Unlock()
		res, ok, err := j.pollDisk(w, cursor, from, maxBytes, info)
		j.mu.Lock()
		if ok || err != nil {
			return res, err
		}
	}
	res := j.out.ring.poll(cursor, maxBytes)
	res.Job = j.infoLocked()
	return res, nil
}

// Events returns retained events with seq >= from, at most limit, and
// reports the seq ranges (and output bytes) no longer retained.
func (j *Job) Events(from uint64, limit int) (protocol.SubscribeResult, error) {
	if limit <= 0 || limit > protocol.MaxSubscribeEvents {
		limit = protocol.MaxSubscribeEvents
	}
	if from == 0 {
		from = 1
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	// Output events the ring evicted come from the job's files, if it
	// has them; the ring's from there on.
	outs, cut := j.diskEventsLocked(from, limit)
	r := newReply(j.infoLocked(), from, limit)
	if !cut {
		after := from
		if len(outs) > 0 {
			after = outs[len(outs)-1].Seq + 1
		}
		for _, c := range j.out.ring.live() {
			if c.Seq < after {
				continue
			}
			ev := protocol.Event{V: protocol.Version, JobID: j.id, Seq: c.Seq, Ts: c.ts, Kind: c.Stream.Kind(), Attempt: c.attempt, Payload: c.payload}
			if ev.Payload == nil { // a chunk restored from the journal
				ev = protocol.NewOutputEvent(j.id, c.Seq, c.ts, c.Stream.Kind(), c.Offset, c.Data)
				ev.Attempt = c.attempt
			}
			outs = append(outs, ev)
			if len(outs) > limit {
				break // enough to fill the reply
			}
		}
	}
	// Retained events in seq order: job.started, then the output events
	// merged with the other retained events (later runs' starts,
	// restarts, readiness, ownership escapes, earlier terminal events),
	// then the terminal event. A reply cut after the events from the
	// files ends there.
	var retained []protocol.Event
	if j.evs.started != nil && j.evs.started.Seq >= from {
		retained = append(retained, j.startedEventLocked())
	}
	extra := j.evs.extra
	for _, ev := range outs {
		for len(extra) > 0 && extra[0].Seq < ev.Seq {
			if extra[0].Seq >= from {
				retained = append(retained, extra[0])
			}
			extra = extra[1:]
		}
		retained = append(retained, ev)
		if len(retained) > limit {
			break // enough to fill the reply
		}
	}
	if len(retained) <= limit && !cut {
		for _, ev := range extra {
			if ev.Seq >= from {
				retained = append(retained, ev)
			}
		}
		if j.evs.exit != nil && j.evs.exit.Seq >= from {
			retained = append(retained, *j.evs.exit)
		}
	}
	for _, ev := range retained {
		if !r.add(ev) {
			break
		}
	}
	if cut {
		r.res.More = true // (the next subscribe reads on from the files)
	}
	r.end(j.out.seq)
	// Exact from the events around each range (those read from the
	// files among them) or the eviction index; an upper bound (at most
	// all evicted output) for the others.
	sizeMissing(&r.res, j.out.ring.outputMap())
	return r.res, nil
}

// List returns every job's info, oldest first, filtered by state and
// session when they are non-empty.
func (m *Manager) List(state protocol.State, session string) []protocol.JobInfo {
	out, _ := m.ListAfter(ListFilter{State: state, Session: session}, 0, 0, "")
	m.attachUsage(out)
	return out
}

// ListAfter is List without usage (see AttachUsage) of the jobs that come
// after the cursor job (createdAt, createN, id) in List's order
// (createdAt, then creation order), with each job's place in the creation
// order (for the next cursor): that job itself need not exist any more.
// id "" means from the first. f selects the jobs listed.
func (m *Manager) ListAfter(f ListFilter, createdAt int64, createN uint64, id string) ([]protocol.JobInfo, []uint64) {
	// The jobs are put in order first, by what never changes once a job
	// is known (its creation time and place), and their infos built once,
	// in that order: sorting the infos themselves (~600 bytes with
	// pointers each) cost most of a listing of 1,000.
	type key struct {
		at int64 // createdAt, ms (as the info has it)
		n  uint64
		j  *Job
	}
	m.mu.Lock()
	keys := make([]key, 0, len(m.jobs))
	for _, j := range m.jobs {
		if strings.HasPrefix(j.id, f.IDPrefix) && protocol.MatchName(f.Name, j.name()) {
			keys = append(keys, key{ms(j.createdAt), j.acct.createN, j})
		}
	}
	// Jobs created in the same millisecond go in the order they were
	// created (createN; by job id they came in random order). The cursor
	// names its job's createN (whether the job is still there or not);
	// an older cursor without it, the job's while it exists, else its id.
	after, cursorKnown := createN, createN > 0
	if c := m.jobs[id]; !cursorKnown && id != "" && c != nil {
		after, cursorKnown = c.acct.createN, true
	}
	m.mu.Unlock()
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.n, b.n)
	})
	infos, ns := make([]protocol.JobInfo, 0, len(keys)), make([]uint64, 0, len(keys))
	for _, k := range keys {
		if id != "" && (k.at < createdAt || k.at == createdAt && (cursorKnown && k.n <= after || !cursorKnown && k.j.id <= id)) {
			continue
		}
		info := k.j.Info()
		if (f.State == "" || info.State == f.State) && (f.Session == "" || info.SessionID == f.Session) && protocol.MatchLabels(f.Labels, info.Labels) {
			infos, ns = append(infos, info), append(ns, k.n)
		}
	}
	return infos, ns
}

// ListFilter selects the jobs ListAfter lists: those that pass each of
// its fields (the zero value of a field passes every job).
type ListFilter struct {
	// State and Session: the job's state, its session id.
	State   protocol.State
	Session string
	// IDPrefix: the start of the job's id.
	IDPrefix string
	// Name: a glob the job's name matches (protocol.MatchName: a job
	// without a name passes only the empty pattern).
	Name string
	// Labels: labels the job has, each with that value.
	Labels map[string]string
}

// AttachUsage fills Usage for the running jobs among infos (see List).
func (m *Manager) AttachUsage(infos []protocol.JobInfo) { m.attachUsage(infos) }

// Counts returns the number of jobs not yet exited and of all known jobs.
func (m *Manager) Counts() (active, total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active, len(m.jobs)
}

// Paced counts the jobs whose output waits for a client pacing them.
func (m *Manager) Paced() int {
	n := 0
	for _, j := range m.snapshotOf(func() map[string]*Job { return m.live }) {
		j.mu.Lock()
		if j.hold.gate != nil && j.pacedLocked() {
			n++
		}
		j.mu.Unlock()
	}
	return n
}
