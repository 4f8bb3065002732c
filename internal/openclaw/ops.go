package openclaw

import (
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// maxReplyOutput bounds the output one poll or subscribe reply carries
// (about: whole events, at least one page): a job's retained output is
// 2 MiB by default (--ring-buffer). A poll cut short returns the cursor
// after its last chunk; a subscribe has no paging, so a ring larger than
// this loses its oldest output to a dialect client's backfill.
const maxReplyOutput = 8 << 20

// lookbackEvents is how far before an output event that starts inside
// a character poll and subscribe look for the bytes that begin it.
const lookbackEvents = 32

const errNoJobID = "jobId is required"

func (h *Handler) spawn(n Native, r *request) any {
	fail := func(msg string) any { return errorReply{Type: typeSpawn, JobID: r.JobID, Error: msg} }
	if r.JobID == "" {
		return fail(errNoJobID)
	}
	if r.Command == "" {
		return fail("command is required")
	}
	a := protocol.SpawnArgs{
		JobID: r.JobID, Argv: []string{bashPath, "-c", r.Command}, Cwd: r.Cwd, Env: r.Env,
		TimeoutMs: timeoutMs(r.TimeoutMs), NoOutputTimeoutMs: noOutputTimeoutMs(r.NoOutputTimeoutMs),
	}
	h.cfg.SyncSubscriptions() // (the job's first event goes out during the spawn)
	var res protocol.SpawnResult
	if err := call(n, protocol.OpSpawn, &a, &res); err != nil {
		return fail(errorText(err))
	}
	return spawnReply{Type: typeSpawn, Success: true, JobID: res.JobID, Pid: res.Job.Pid}
}

// timeoutMs maps the dialect's timeoutMs onto the native one: absent is
// the supervisor's default (0), 0 or less is no timeout, which the native
// protocol spells as its longest (7 days); longer is capped there.
func timeoutMs(v *jsonInt) int64 {
	switch ms := v.value(0); {
	case v == nil:
		return 0
	case ms <= 0 || ms > protocol.MaxTimeoutMs:
		return protocol.MaxTimeoutMs
	default:
		return ms
	}
}

// noOutputTimeoutMs: absent, 0 or less is none; longer than the native
// protocol takes is capped there.
func noOutputTimeoutMs(v *jsonInt) int64 {
	return min(max(v.value(0), 0), protocol.MaxTimeoutMs)
}

func (h *Handler) poll(n Native, r *request) any {
	fail := func(msg string) any {
		return pollReply{Type: typePoll, JobID: r.JobID, State: stateFailed, Chunks: []chunk{}, Error: msg}
	}
	if r.JobID == "" {
		return fail(errNoJobID)
	}
	// The output still in its merge window first (flush), so that a poll
	// sees everything read so far.
	rd, err := readEvents(n, r.JobID, nativeFrom(r.Cursor.value(0)), true, isOutput)
	if err != nil {
		return fail(errorText(err))
	}
	texts := decodeAll(n, r.JobID, rd.events)
	rep := pollReply{Type: typePoll, Success: true, JobID: r.JobID, State: stateOf(&rd.job), Chunks: make([]chunk, 0, len(rd.events)), Cursor: rd.next()}
	for i := range rd.events {
		ev := &rd.events[i]
		rep.Chunks = append(rep.Chunks, chunk{Seq: dialectSeq(ev.Seq), Ts: ev.Ts, Kind: string(streamOf(ev.Kind)), Data: texts[i]})
	}
	if rd.job.State == protocol.StateExited {
		rep.ExitCode, rep.ExitSignal = rd.job.ExitCode, signalOf(rd.job.Signal)
		rep.TerminationReason = endingOf(rd.job.Reason, rd.job.Signal).reason
	}
	return rep
}

func (h *Handler) kill(n Native, r *request) any {
	if r.JobID == "" {
		return errorReply{Type: typeKill, Error: errNoJobID}
	}
	// No signal: the native kill path (TERM to the job's group or cgroup,
	// grace, KILL); a signal given is sent as the native kill sends it.
	if err := call(n, protocol.OpKill, &protocol.KillArgs{JobID: r.JobID, Signal: r.Signal}, nil); err != nil {
		return errorReply{Type: typeKill, JobID: r.JobID, Error: errorText(err)}
	}
	return killReply{Type: typeKill, Success: true, JobID: r.JobID}
}

func (h *Handler) status(n Native, r *request) any {
	if r.JobID == "" {
		jobs, err := listAll(n)
		if err != nil {
			return errorReply{Type: typeStatus, Error: errorText(err)}
		}
		rep := statusAllReply{Type: typeStatus, Success: true, Jobs: make([]jobStatus, 0, len(jobs))}
		for i := range jobs {
			rep.Jobs = append(rep.Jobs, statusOf(&jobs[i]))
		}
		return rep
	}
	var res protocol.StatusResult
	if err := call(n, protocol.OpStatus, &protocol.JobArgs{JobID: r.JobID}, &res); err != nil || res.Job == nil {
		if err == nil {
			err = errNativeReply
		}
		return errorReply{Type: typeStatus, Error: errorText(err)} // (no jobId: as the Node server)
	}
	st := statusOf(res.Job)
	return statusReply{Type: typeStatus, Success: true, Job: &st}
}

func (h *Handler) health(n Native) any {
	var res protocol.HealthResult
	if err := call(n, protocol.OpHealth, nil, &res); err != nil {
		return badRequest(errorText(err))
	}
	rep := healthReply{
		Type: typeHealth, Success: res.OK, Uptime: res.UptimeMs, ActiveJobs: res.ActiveJobs,
		TotalJobsProcessed: res.TotalJobs, MemoryUsageMB: int64((h.cfg.HeapBytes() + 1<<19) >> 20),
		EventsDropped: h.cfg.EventsDropped(),
	}
	if h.cfg.JobsStarted != nil {
		rep.TotalJobsProcessed = int(h.cfg.JobsStarted())
	}
	if !res.OK {
		rep.Error = "supervisor is shutting down"
	}
	return rep
}

func (h *Handler) subscribe(n Native, r *request) any {
	if r.JobID == "" {
		return errorReply{Type: typeSubscribe, Error: errNoJobID}
	}
	rd, err := readEvents(n, r.JobID, nativeFrom(r.FromSeq.value(0)), false, func(protocol.Kind) bool { return true })
	if err != nil {
		return errorReply{Type: typeSubscribe, JobID: r.JobID, Error: errorText(err)}
	}
	texts := decodeAll(n, r.JobID, rd.events)
	rep := subscribeReply{Type: typeSubscribe, Success: true, JobID: r.JobID, CurrentSeq: lastSeq(&rd.job), Events: make([]any, 0, len(rd.events))}
	for i := range rd.events {
		if ev := translate(&rd.events[i], texts[i]); ev != nil {
			rep.Events = append(rep.Events, ev)
		}
	}
	return rep
}

func (h *Handler) listJobs(n Native) any {
	jobs, err := listAll(n)
	if err != nil {
		return errorReply{Type: typeListJobs, Error: errorText(err)}
	}
	rep := listJobsReply{Type: typeListJobs, Success: true, Jobs: []listedJob{}}
	for i := range jobs {
		j := &jobs[i]
		if j.State != protocol.StateExited {
			rep.Jobs = append(rep.Jobs, listedJob{JobID: j.JobID, State: stateOf(j), LastSeq: lastSeq(j), StartedAtMs: startedAt(j)})
		}
	}
	return rep
}

// listAll lists every job known, in the order they were spawned, page
// by page.
func listAll(n Native) ([]protocol.JobInfo, error) {
	var jobs []protocol.JobInfo
	a := protocol.ListJobsArgs{Brief: true}
	for {
		var res protocol.ListJobsResult
		if err := call(n, protocol.OpListJobs, &a, &res); err != nil {
			return nil, err
		}
		jobs = append(jobs, res.Jobs...)
		if !res.More || res.Next == "" || len(res.Jobs) == 0 {
			return jobs, nil
		}
		a.After = res.Next
	}
}

func isOutput(k protocol.Kind) bool { return k == protocol.KindStdout || k == protocol.KindStderr }

// streamOf is the stream an output event kind carries.
func streamOf(k protocol.Kind) protocol.Stream {
	if k == protocol.KindStderr {
		return protocol.Stderr
	}
	return protocol.Stdout
}
