package server

import (
	"os"
	"strings"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/zmqx"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func (s *Server) dispatch(p *zmqx.Peer, req *protocol.Request) (any, error) {
	switch req.Op {
	case protocol.OpHealth:
		if err := protocol.DecodeArgs(req, nil); err != nil { // (none, but checked as any op's)
			return nil, err
		}
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
			ActiveJobs: active, TotalJobs: total, MaxJobs: s.cfg.Jobs.MaxJobs, Draining: draining,
			// (Both may quote paths the operator chose: sent as UTF-8.)
			Cgroups: s.cgroupBase != nil, CgroupsNote: strings.ToValidUTF8(s.cgroupNote, "\uFFFD"),
			JournalError: strings.ToValidUTF8(s.journalHealth(), "\uFFFD"),
		}, nil
	case protocol.OpSpawn:
		var a protocol.SpawnArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		if a.WaitMs > 0 {
			return s.spawnAndWait(p, req.ID, a)
		}
		_, info, err := s.jobs.SpawnJobWith(s.spawnOptions(p, &a))
		if err != nil {
			return nil, err
		}
		return protocol.SpawnResult{JobID: info.JobID, Job: info}, nil
	case protocol.OpWait:
		return s.wait(p, req)
	case protocol.OpPace:
		var a protocol.PaceArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
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
	case protocol.OpCancel:
		var a protocol.CancelArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		ok, job := s.cancelHeld(p, a.RequestID)
		return protocol.CancelResult{Cancelled: ok, JobID: job}, nil
	case protocol.OpPoll:
		var a protocol.PollArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		res, err := j.Poll(a.Cursor, a.MaxBytes)
		res.InstanceID = s.instanceID
		return res, err
	case protocol.OpSubscribe:
		var a protocol.SubscribeArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		if a.Flush {
			j.FlushOutput()
		}
		res, err := j.Events(a.FromSeq, a.Limit)
		res.InstanceID, res.HeartbeatIntervalMs = s.instanceID, s.cfg.HeartbeatInterval.Milliseconds()
		s.metrics.BackfillReqs.Inc()
		s.metrics.BackfillEvents.Add(float64(len(res.Events)))
		return res, err
	case protocol.OpWrite:
		var a protocol.WriteArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		n, err := j.WriteInput(a.Data, a.EOF, a.Typed)
		if err != nil {
			return nil, err
		}
		return protocol.WriteResult{Written: n, Job: j.Info()}, nil
	case protocol.OpResize:
		var a protocol.ResizeArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		if err := j.Resize(uint16(a.Rows), uint16(a.Cols)); err != nil { // (1..10000: Validate)
			return nil, err
		}
		info := j.Info()
		return protocol.StatusResult{Job: &info}, nil
	case protocol.OpKill:
		var a protocol.KillArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		return s.kill(a)
	case protocol.OpStatus:
		var a protocol.JobArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		if a.JobID == "" {
			return s.statusAll()
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		info := s.jobs.InfoWithUsage(j)
		return protocol.StatusResult{Job: &info}, nil
	case protocol.OpListJobs:
		var a protocol.ListJobsArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		return s.listJobs(a)
	case protocol.OpStart, protocol.OpRestart, protocol.OpStop, protocol.OpHistory:
		return s.serviceOp(req)
	case protocol.OpRemove:
		var a protocol.JobArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		if a.JobID == "" {
			return nil, protocol.Errorf(protocol.CodeInvalidArgument, "jobId is required")
		}
		if err := s.jobs.Remove(a.JobID); err != nil {
			return nil, err
		}
		return protocol.RemoveResult{JobID: a.JobID}, nil
	}
	return nil, protocol.Errorf(protocol.CodeUnknownOp, "unknown op %q", req.Op)
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
	jobs, ns := s.jobs.ListAfter(a.State, a.SessionID, a.IDPrefix, created, afterN, after)
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
func (s *Server) serviceOp(req *protocol.Request) (any, error) {
	var a protocol.JobArgs
	if err := protocol.DecodeArgs(req, &a); err != nil {
		return nil, err
	}
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
			s.awaitJournal("start", a.JobID) // (a running service left alone changed nothing)
		}
		return protocol.StatusResult{Job: &info}, nil
	case protocol.OpStop:
		res, err := s.jobs.Stop(a.JobID)
		if err == nil && !res.AlreadyFinished {
			s.awaitJournal("stop", a.JobID)
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
			s.awaitJournal("kill", a.JobID) // (the job's end is the client's: not lost in a crash)
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
