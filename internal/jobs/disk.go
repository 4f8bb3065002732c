package jobs

import (
	"errors"
	"slices"

	"github.com/exec-supervisor/exec-supervisor/internal/outlog"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Output on disk: a job whose output goes to disk (spawn's output, or
// Config.OutputDisk's default) has a Writer of the Manager's output
// store (WithOutputLog). Every output event is handed to it as it is
// made (flushLocked), never waited for: the writer queues it and writes
// it on a goroutine of its own. Its queue is bounded: past its
// high-water mark the job's output is not read (gatedLocked, as under a
// lagging journal) until the writer catches up, or gives up (a stalled
// or failing disk: the job goes on in memory only, OutputDiskError).
// Poll reads output the ring evicted from the writer, subscribe the
// output events it evicted (diskEventsLocked).

// Values of Config.OutputDisk: which jobs write their output to disk
// when their spawn does not say.
const (
	OutputDiskServices = "services" // jobs with a restart policy (the default)
	OutputDiskAll      = "all"
	OutputDiskNone     = "none"
)

// WithOutputLog gives the Manager the store for jobs' output on disk
// (without it no job writes to disk, whatever it asks).
func WithOutputLog(s *outlog.Store) Option { return func(m *Manager) { m.outlog = s } }

// wantsDisk says whether a job of spec keeps its output on disk.
func (m *Manager) wantsDisk(spec *protocol.SpawnArgs) bool {
	if m.outlog == nil {
		return false
	}
	switch spec.Output {
	case protocol.OutputDisk:
		return true
	case protocol.OutputMemory:
		return false
	}
	switch m.cfg.OutputDisk {
	case OutputDiskAll:
		return true
	case OutputDiskNone:
		return false
	}
	return spec.Restart.Enabled()
}

// newDisk returns the writer of a new job (fresh: files of an earlier
// job of its id are replaced; the job as spawned is recorded with them,
// so that its name finds them even if it never ends under this
// supervisor) or of a restored one (appending to its files). A failure
// leaves the job in memory only: the error is reported and returned as
// text. Called before the job is visible.
func (j *Job) newDisk(fresh bool) (*outlog.Writer, string) {
	w, err := j.m.outlog.Open(j.id, fresh, j.diskRoom)
	if err != nil {
		j.m.outlog.NoteError(j.id, err)
		return nil, err.Error()
	}
	if fresh {
		w.Begin(protocol.JobInfo{
			JobID: j.id, Name: j.spec.Name, State: protocol.StateStarting, Argv: j.spec.Argv, Shell: j.spec.Shell, Cwd: j.spec.Cwd,
			Labels: j.spec.Labels, SessionID: j.spec.SessionID, CreatedAt: ms(j.createdAt), OutputDisk: true,
		})
	}
	return w, ""
}

// diskRoom is called by the writer when its queue drained below its
// low-water mark (or it gave up): held output may be read again.
func (j *Job) diskRoom() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.openGateLocked()
}

// diskBehindLocked says whether the job's output must wait for its
// writer (see gatedLocked).
func (j *Job) diskBehindLocked() bool { return j.out.disk != nil && j.out.disk.Behind() }

// storeLocked retains c in the ring and hands it to the writer.
func (j *Job) storeLocked(c chunk) {
	j.out.ring.add(c)
	if j.out.disk != nil {
		j.out.disk.Append(c.Chunk, c.ts, c.attempt)
	}
}

// skipOutputLocked moves the output's end to off without output (see
// ring.skipTo), on disk too.
func (j *Job) skipOutputLocked(off int64) {
	j.out.ring.skipTo(off)
	if j.out.disk != nil {
		j.out.disk.Skip(off)
	}
}

// diskInfoLocked fills the JobInfo fields of output on disk.
func (j *Job) diskInfoLocked(info *protocol.JobInfo) {
	if j.out.disk == nil {
		info.OutputDiskError = j.out.diskErr
		return
	}
	if err := j.out.disk.Err(); err != nil {
		info.OutputDiskError = err.Error()
		return
	}
	info.OutputDisk = true
}

// diskFinishedLocked records the job's end with its files: its info and
// its terminal event (j.evs.exit), which a subscribe of the job once it
// left memory replays (DiskEvents).
func (j *Job) diskFinishedLocked() {
	if j.out.disk != nil {
		j.out.disk.Finish(j.infoLocked(), j.evs.exit)
	}
}

// pollDisk answers a poll from cursor below from (the oldest byte the
// ring retains) out of the job's files, when they hold something there;
// ok false: they do not (the ring answers). j.mu is not held.
func (j *Job) pollDisk(w *outlog.Writer, cursor, from, maxBytes int64, info protocol.JobInfo) (protocol.PollResult, bool, error) {
	r, err := w.Read(cursor, from, maxBytes)
	if err != nil {
		j.m.log.Warn("read job output from disk; answering from memory", "job", j.id, "err", err)
		return protocol.PollResult{}, false, nil
	}
	if !r.Found || (len(r.Chunks) == 0 && !r.CrashGap) {
		return protocol.PollResult{}, false, nil
	}
	return protocol.PollResult{
		Job: info, Chunks: r.Chunks, Next: r.Next, More: r.More || r.Next < info.OutputEnd,
		Truncated: r.Lost > 0 || r.CrashGap, LostBytes: r.Lost, CrashGap: r.CrashGap,
	}, true, nil
}

// diskEventsLocked returns the output events with seq >= from that the
// ring no longer holds, from the job's files: at most limit events and
// about MaxSubscribeBytes of output, in order (nil: the ring holds every
// output event from there, or the files do not have them). cut: the
// events that follow them are not all in the ring (the read stopped at
// its bounds, or the ring evicted more while the files were read): a
// reply must end after them (more), and the next subscribe reads on
// from the files. j.mu is held, and released while the files are read.
func (j *Job) diskEventsLocked(from uint64, limit int) (evs []protocol.Event, cut bool) {
	w := j.out.disk
	ringFrom := j.out.ring.from()
	if w == nil || ringFrom == 0 {
		return nil, false
	}
	if first := j.out.ring.firstSeq(); first != 0 && from >= first {
		return nil, false
	}
	j.mu.Unlock()
	read, more, err := w.Events(from, ringFrom, protocol.MaxSubscribeBytes, limit)
	j.mu.Lock()
	if err != nil {
		j.m.log.Warn("read job output events from disk; answering from memory", "job", j.id, "err", err)
		return nil, false
	}
	evs = make([]protocol.Event, len(read))
	for i, e := range read {
		evs[i] = protocol.NewOutputEvent(j.id, e.Seq, e.Ts, e.Stream.Kind(), e.Offset, e.Data)
		evs[i].Attempt = e.Attempt
	}
	return evs, more || j.out.ring.from() > ringFrom
}

// DiskEvents answers a subscribe of job id, no longer in memory, from
// its files (outlog.Store.Replay): its output events with seq >= from,
// then its terminal event (as recorded when it ended, or made from its
// record), as Job.Events answers for a job that ended. The seqs between
// them are missing (the other events are not in the files); a range
// the files show held no output says so (NoOutput). ErrNotFound when
// the job has no files.
func (m *Manager) DiskEvents(id string, from uint64, limit int) (protocol.SubscribeResult, error) {
	if limit <= 0 || limit > protocol.MaxSubscribeEvents {
		limit = protocol.MaxSubscribeEvents
	}
	from = max(from, 1)
	if m.outlog == nil {
		return protocol.SubscribeResult{}, errorf(ErrNotFound, "no job of id %.64q", id)
	}
	rp, err := m.outlog.Replay(id, from, protocol.MaxSubscribeBytes, limit)
	if errors.Is(err, outlog.ErrNoOutput) {
		return protocol.SubscribeResult{}, errorf(ErrNotFound, "no job of id %.64q", id)
	}
	if err != nil {
		return protocol.SubscribeResult{}, err
	}
	r := newReply(rp.Info, from, limit)
	for _, e := range rp.Events {
		ev := protocol.NewOutputEvent(id, e.Seq, e.Ts, e.Stream.Kind(), e.Offset, e.Data)
		ev.Attempt = e.Attempt
		if !r.add(ev) {
			break
		}
	}
	if rp.More {
		r.res.More = true
	} else if rp.Terminal.Seq >= from {
		r.add(rp.Terminal)
	}
	r.end(rp.Info.LastSeq)
	sizeMissing(&r.res, outputMap{
		at: func(seq uint64) (int64, bool) {
			if seq == from && rp.BeforeKnown {
				return rp.Before, true
			}
			return 0, false
		},
		skipsIn: func(a, b int64) bool {
			return rp.ManySkips || slices.ContainsFunc(rp.Skips, func(s outlog.Span) bool { return s.At < b && s.At+s.N > a })
		},
		end: rp.Info.OutputEnd, bound: -1,
	})
	return r.res, nil
}
