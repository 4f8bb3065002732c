package server

import (
	"os"
	"strings"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// handler answers one op on connection p.
type handler func(s *Server, p *zmtp.Peer, req *protocol.Request) (any, error)

// handlers is the op table: one handler per op (read only).
var handlers = map[protocol.Op]handler{
	protocol.OpHealth:    withArgs((*Server).opHealth),
	protocol.OpSpawn:     withArgs((*Server).opSpawn),
	protocol.OpWait:      withArgs((*Server).wait),
	protocol.OpPace:      withArgs((*Server).opPace),
	protocol.OpCancel:    withArgs((*Server).opCancel),
	protocol.OpPoll:      withArgs((*Server).opPoll),
	protocol.OpSubscribe: withArgs((*Server).opSubscribe),
	protocol.OpWrite:     withArgs((*Server).opWrite),
	protocol.OpResize:    withArgs((*Server).opResize),
	protocol.OpKill: withArgs(func(s *Server, _ *zmtp.Peer, _ *protocol.Request, a *protocol.KillArgs) (any, error) {
		return s.kill(*a)
	}),
	protocol.OpStatus: withArgs((*Server).opStatus),
	protocol.OpListJobs: withArgs(func(s *Server, _ *zmtp.Peer, _ *protocol.Request, a *protocol.ListJobsArgs) (any, error) {
		return s.listJobs(*a)
	}),
	protocol.OpStart:   withArgs((*Server).serviceOp),
	protocol.OpRestart: withArgs((*Server).serviceOp),
	protocol.OpStop:    withArgs((*Server).serviceOp),
	protocol.OpHistory: withArgs((*Server).serviceOp),
	protocol.OpRemove:  withArgs((*Server).opRemove),
}

// withArgs is a handler that decodes the request's arguments into an A
// (checked as every op's are, none included), resolves the job they name
// (jobRef), and hands them to f.
func withArgs[A any](f func(s *Server, p *zmtp.Peer, req *protocol.Request, a *A) (any, error)) handler {
	return func(s *Server, p *zmtp.Peer, req *protocol.Request) (any, error) {
		a := new(A)
		if err := protocol.DecodeArgs(req, a); err != nil {
			return nil, err
		}
		if ref := jobRef(a); ref != nil && *ref != "" {
			*ref = s.jobs.Resolve(*ref)
		}
		return f(s, p, req, a)
	}
}

// jobRef returns the field of an op's arguments that names a job, nil
// for ops that name none. The one place where a job's name stands for its
// id: withArgs replaces a name there with the id of the job it names
// (jobs.Manager.Resolve: the job of that id first, then the one holding
// the name, then the one of that name that finished last), so that every
// op, its reply and its log lines see the id. An op whose arguments name
// a job must be listed here.
func jobRef(a any) *string {
	switch a := a.(type) {
	case *protocol.JobArgs:
		return &a.JobID
	case *protocol.KillArgs:
		return &a.JobID
	case *protocol.WaitArgs:
		return &a.JobID
	case *protocol.PollArgs:
		return &a.JobID
	case *protocol.SubscribeArgs:
		return &a.JobID
	case *protocol.WriteArgs:
		return &a.JobID
	case *protocol.ResizeArgs:
		return &a.JobID
	case *protocol.PaceArgs:
		return &a.JobID
	}
	return nil
}

// noArgs are the arguments of an op that takes none.
type noArgs struct{}

func (s *Server) dispatch(p *zmtp.Peer, req *protocol.Request) (any, error) {
	h, ok := handlers[req.Op]
	if !ok {
		return nil, protocol.Errorf(protocol.CodeUnknownOp, "unknown op %q", req.Op)
	}
	return h(s, p, req)
}

func (s *Server) opHealth(_ *zmtp.Peer, _ *protocol.Request, _ *noArgs) (any, error) {
	active, total := s.jobs.Counts()
	draining := false
	select {
	case <-s.draining:
		draining = true
	default:
	}
	return protocol.HealthResult{
		OK: !draining, InstanceID: s.instanceID, Protocol: protocol.Version, Version: Version,
		Pid: os.Getpid(), StartedAt: s.startedAt.UnixMilli(), UptimeMs: time.Since(s.startedAt).Milliseconds(),
		ActiveJobs: active, QueuedJobs: s.jobs.Queued(), TotalJobs: total, MaxJobs: s.cfg.Jobs.MaxJobs, Draining: draining,
		// (Both may quote paths the operator chose: sent as UTF-8.)
		Cgroups: s.cgroupBase != nil, CgroupsNote: strings.ToValidUTF8(s.cgroupNote, "\uFFFD"),
		JournalError: strings.ToValidUTF8(s.jw.health(), "\uFFFD"),
	}, nil
}

func (s *Server) opSpawn(p *zmtp.Peer, req *protocol.Request, a *protocol.SpawnArgs) (any, error) {
	if a.WaitMs > 0 {
		return s.spawnAndWait(p, req.ID, *a)
	}
	_, info, err := s.jobs.SpawnJobWith(s.spawnOptions(p, a))
	if err != nil {
		return nil, err
	}
	return protocol.SpawnResult{JobID: info.JobID, Job: info}, nil
}

func (s *Server) opPace(p *zmtp.Peer, _ *protocol.Request, a *protocol.PaceArgs) (any, error) {
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		return nil, err
	}
	if a.Release {
		j.Unpace(p)
	} else if err := j.Pace(p, a.Offset, paceWatch(p)); err != nil {
		return nil, err
	}
	return protocol.PaceResult{WindowBytes: s.jobs.PaceWindow(), Job: j.Info()}, nil
}

func (s *Server) opCancel(p *zmtp.Peer, _ *protocol.Request, a *protocol.CancelArgs) (any, error) {
	ok, job := s.cancelHeld(p, a.RequestID)
	return protocol.CancelResult{Cancelled: ok, JobID: job}, nil
}

func (s *Server) opPoll(_ *zmtp.Peer, _ *protocol.Request, a *protocol.PollArgs) (any, error) {
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		return s.pollFromDisk(a, err)
	}
	res, err := j.Poll(a.Cursor, a.MaxBytes)
	res.InstanceID = s.instanceID
	return res, err
}

func (s *Server) opSubscribe(_ *zmtp.Peer, _ *protocol.Request, a *protocol.SubscribeArgs) (any, error) {
	var res protocol.SubscribeResult
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		if res, err = s.subscribeFromDisk(a, err); err != nil {
			return nil, err
		}
	} else {
		if a.Flush {
			j.FlushOutput()
		}
		res, err = j.Events(a.FromSeq, a.Limit)
	}
	res.InstanceID, res.HeartbeatIntervalMs = s.instanceID, s.cfg.HeartbeatInterval.Milliseconds()
	s.metrics.BackfillReqs.Inc()
	s.metrics.BackfillEvents.Add(float64(len(res.Events)))
	return res, err
}

func (s *Server) opWrite(_ *zmtp.Peer, _ *protocol.Request, a *protocol.WriteArgs) (any, error) {
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		return nil, err
	}
	n, err := j.WriteInput(a.Data, a.EOF, a.Typed)
	if err != nil {
		return nil, err
	}
	return protocol.WriteResult{Written: n, Job: j.Info()}, nil
}

func (s *Server) opResize(_ *zmtp.Peer, _ *protocol.Request, a *protocol.ResizeArgs) (any, error) {
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		return nil, err
	}
	if err := j.Resize(uint16(a.Rows), uint16(a.Cols)); err != nil { // (1..10000: Validate)
		return nil, err
	}
	info := j.Info()
	return protocol.StatusResult{Job: &info}, nil
}

func (s *Server) opStatus(_ *zmtp.Peer, _ *protocol.Request, a *protocol.JobArgs) (any, error) {
	if a.JobID == "" {
		return s.statusAll()
	}
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		return nil, err
	}
	info := s.jobs.InfoWithUsage(j)
	return protocol.StatusResult{Job: &info}, nil
}

func (s *Server) opRemove(_ *zmtp.Peer, _ *protocol.Request, a *protocol.JobArgs) (any, error) {
	if a.JobID == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "jobId is required")
	}
	id := a.JobID
	if err := s.jobs.Remove(id); err != nil {
		if id, err = s.removeFromDisk(id, err); err != nil {
			return nil, err
		}
	}
	return protocol.RemoveResult{JobID: id}, nil
}

// listJobs answers list-jobs: one page of the jobs after a.After, at most
// a.Limit of them and about ListPageBytes (at least one job when
// any is left), so that no listing is refused for being too large.
func (s *Server) listJobs(a protocol.ListJobsArgs) (protocol.ListJobsResult, error) {
	var created int64
	var afterN uint64
	var after string
	if a.After != "" {
		var err error
		if created, afterN, after, err = protocol.ParseListCursor(a.After); err != nil {
			return protocol.ListJobsResult{}, err
		}
	}
	jobs, ns := s.jobs.ListAfter(jobs.ListFilter{State: a.State, Session: a.SessionID, IDPrefix: a.IDPrefix, Name: a.Name, Labels: a.Labels}, created, afterN, after)
	budget := s.cfg.ListPageBytes
	if budget <= 0 || budget > protocol.MaxListBytes {
		budget = protocol.MaxListBytes
	}
	n, size := 0, 0
	for ; n < len(jobs) && (a.Limit <= 0 || n < a.Limit); n++ {
		j := &jobs[n]
		if a.Brief {
			j.Argv, j.Shell, j.Cwd, j.Labels = nil, "", "", nil
		}
		// (what it takes in the reply, but usage: a few dozen bytes,
		// attached below)
		b, err := protocol.Marshal(j)
		if err != nil {
			return protocol.ListJobsResult{}, err
		}
		if n > 0 && size+len(b) > budget {
			break
		}
		size += len(b)
	}
	res := protocol.ListJobsResult{Jobs: jobs[:n:n], More: n < len(jobs)}
	if res.More {
		res.Next = protocol.ListCursor(jobs[n-1].CreatedAt, ns[n-1], jobs[n-1].JobID)
	}
	s.jobs.AttachUsage(res.Jobs)
	return res, nil
}

// serviceOp answers start, restart, stop and history.
func (s *Server) serviceOp(_ *zmtp.Peer, req *protocol.Request, a *protocol.JobArgs) (any, error) {
	if a.JobID == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "jobId is required")
	}
	switch req.Op {
	case protocol.OpStart, protocol.OpRestart:
		start := s.jobs.Start
		if req.Op == protocol.OpRestart {
			start = s.jobs.Restart
		}
		var before protocol.JobInfo
		if j, err := s.jobs.Get(a.JobID); err == nil {
			before = j.Info()
		}
		info, err := start(a.JobID)
		if err != nil {
			return nil, err
		}
		if req.Op == protocol.OpRestart || info.Attempt != before.Attempt || info.State != before.State {
			s.jw.changed("start", a.JobID) // (a running service left alone changed nothing)
		}
		return protocol.StatusResult{Job: &info}, nil
	case protocol.OpStop:
		res, err := s.jobs.Stop(a.JobID)
		if err == nil && !res.AlreadyFinished {
			s.jw.changed("stop", a.JobID)
		}
		return res, err
	}
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		return nil, err
	}
	return protocol.HistoryResult{JobID: a.JobID, Runs: j.History()}, nil
}

func (s *Server) kill(a protocol.KillArgs) (any, error) {
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		return nil, err
	}
	var sig = jobs.SigTerm
	if a.Signal != "" {
		sig, err = protocol.ParseSignal(a.Signal)
		if err != nil {
			return nil, err
		}
	}
	var already bool
	switch sig {
	case jobs.SigTerm, jobs.SigKill:
		already, err = j.Kill(protocol.ReasonManualCancel, sig)
		if err == nil && !already {
			s.jw.change("kill", j) // (the job's end is the client's: not lost in a crash)
		}
	default:
		if j.Finished() {
			already = true
		} else {
			err = j.Signal(sig)
		}
	}
	if err != nil {
		return nil, err
	}
	return protocol.KillResult{Job: j.Info(), AlreadyFinished: already}, nil
}
