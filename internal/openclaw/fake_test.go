package openclaw

import (
	"fmt"
	"slices"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// fakeNative answers native requests from a table of jobs, with small
// pages (subscribe: pageEvents events, list-jobs: one job) so that the
// dialect's paging is exercised, and records what it was asked.
type fakeNative struct {
	t          *testing.T
	jobs       []*fakeJob
	pageEvents int
	maxJobs    int
	health     protocol.HealthResult
	asked      []asked
}

type asked struct {
	op   protocol.Op
	args any
}

type fakeJob struct {
	info    protocol.JobInfo
	events  []protocol.Event
	pending []protocol.Event // published by a subscribe with flush
}

func (f *fakeNative) job(id string) *fakeJob {
	for _, j := range f.jobs {
		if j.info.JobID == id {
			return j
		}
	}
	return nil
}

func (f *fakeNative) Do(req *protocol.Request) []byte {
	res, err := f.do(req)
	if err != nil {
		return protocol.ErrorReply(req.ID, err)
	}
	b, e := protocol.OKReply(req.ID, res)
	if e != nil {
		f.t.Fatalf("encode %s result: %v", req.Op, e)
	}
	return b
}

// decodeArgs decodes (and validates) req's args as the server does.
func decodeArgs[T any](f *fakeNative, req *protocol.Request) (*T, *protocol.Error) {
	var a T
	if err := protocol.DecodeArgs(req, &a); err != nil {
		return nil, toWire(err)
	}
	f.asked = append(f.asked, asked{req.Op, a})
	return &a, nil
}

func toWire(err error) *protocol.Error {
	if pe, ok := err.(*protocol.Error); ok {
		return pe
	}
	return protocol.Errorf(protocol.CodeInternal, "%v", err)
}

func notFound(id string) *protocol.Error {
	return protocol.Errorf(protocol.CodeNotFound, "no job %q", id)
}

func (f *fakeNative) do(req *protocol.Request) (any, *protocol.Error) {
	switch req.Op {
	case protocol.OpHealth:
		f.asked = append(f.asked, asked{req.Op, nil})
		return f.health, nil
	case protocol.OpSpawn:
		a, err := decodeArgs[protocol.SpawnArgs](f, req)
		if err != nil {
			return nil, err
		}
		if f.job(a.JobID) != nil {
			return nil, &protocol.Error{Code: protocol.CodeAlreadyExists, Message: "job exists", Details: map[string]string{"jobId": a.JobID}}
		}
		if len(f.jobs) >= f.maxJobs {
			return nil, protocol.Errorf(protocol.CodeTooManyJobs, "%d jobs are running", len(f.jobs))
		}
		info := protocol.JobInfo{JobID: a.JobID, State: protocol.StateRunning, Pid: 4242, Argv: a.Argv}
		f.jobs = append(f.jobs, &fakeJob{info: info})
		return protocol.SpawnResult{JobID: a.JobID, Job: info}, nil
	case protocol.OpKill:
		a, err := decodeArgs[protocol.KillArgs](f, req)
		if err != nil {
			return nil, err
		}
		j := f.job(a.JobID)
		if j == nil {
			return nil, notFound(a.JobID)
		}
		return protocol.KillResult{Job: j.info, AlreadyFinished: j.info.State == protocol.StateExited}, nil
	case protocol.OpStatus:
		a, err := decodeArgs[protocol.JobArgs](f, req)
		if err != nil {
			return nil, err
		}
		j := f.job(a.JobID)
		if j == nil {
			return nil, notFound(a.JobID)
		}
		return protocol.StatusResult{Job: &j.info}, nil
	case protocol.OpListJobs:
		a, err := decodeArgs[protocol.ListJobsArgs](f, req)
		if err != nil {
			return nil, err
		}
		i := 0
		if a.After != "" {
			fmt.Sscanf(a.After, "0:%d:", &i)
		}
		if i >= len(f.jobs) {
			return protocol.ListJobsResult{Jobs: []protocol.JobInfo{}}, nil
		}
		res := protocol.ListJobsResult{Jobs: []protocol.JobInfo{f.jobs[i].info}, More: i+1 < len(f.jobs)}
		if res.More {
			res.Next = protocol.ListCursor(0, uint64(i+1), f.jobs[i].info.JobID)
		}
		return res, nil
	case protocol.OpSubscribe:
		a, err := decodeArgs[protocol.SubscribeArgs](f, req)
		if err != nil {
			return nil, err
		}
		j := f.job(a.JobID)
		if j == nil {
			return nil, notFound(a.JobID)
		}
		if a.Flush && len(j.pending) > 0 {
			j.events = append(j.events, j.pending...)
			j.info.LastSeq = j.events[len(j.events)-1].Seq
			j.pending = nil
		}
		limit := f.pageEvents
		if a.Limit > 0 && a.Limit < limit {
			limit = a.Limit
		}
		res := protocol.SubscribeResult{Job: j.info, Events: []protocol.Event{}}
		for _, ev := range j.events {
			if ev.Seq < a.FromSeq {
				continue
			}
			if len(res.Events) == limit {
				res.More = true
				break
			}
			res.Events = append(res.Events, ev)
		}
		return res, nil
	}
	return nil, protocol.Errorf(protocol.CodeUnknownOp, "unknown op %q", req.Op)
}

// Native events of a job, by seq from 1.
func started(id string, pid int, argv ...string) protocol.Event {
	ev, _ := protocol.NewEvent(id, 1, 1000, protocol.KindStarted, protocol.StartedPayload{Pid: pid, Pgid: pid, Argv: argv})
	return ev
}

func output(id string, seq uint64, k protocol.Kind, data string) protocol.Event {
	return protocol.NewOutputEvent(id, seq, 1000+int64(seq), k, 0, []byte(data))
}

func ended(id string, seq uint64, p protocol.ExitPayload) protocol.Event {
	k := protocol.KindFailed
	if p.Reason == protocol.ReasonExit {
		k = protocol.KindExited
	}
	ev, _ := protocol.NewEvent(id, seq, 2000, k, p)
	return ev
}

func intp(i int) *int { return &i }

// newFake has three jobs: "done" (started, output split inside an é
// across pages, exited 3), "run" (running, with output in its merge
// window) and "late" (killed, failed by a timeout).
func newFake(t *testing.T) *fakeNative {
	bash := []string{"/bin/bash", "-c", "echo hi"}
	done := &fakeJob{
		info: protocol.JobInfo{JobID: "done", State: protocol.StateExited, Reason: protocol.ReasonExit, ExitCode: intp(3),
			Pid: 10, CreatedAt: 500, StartedAt: 501, StdoutBytes: 9, StderrBytes: 4, LastSeq: 6},
		events: []protocol.Event{
			started("done", 10, bash...),
			output("done", 2, protocol.KindStdout, "caf\xc3"),
			output("done", 3, protocol.KindStderr, "err\n"),
			output("done", 4, protocol.KindStdout, "\xa9 ok\n"),
			{V: protocol.Version, JobID: "done", Seq: 5, Ts: 1500, Kind: protocol.KindOwnershipEscape, Payload: []byte{0x80}},
			ended("done", 6, protocol.ExitPayload{Reason: protocol.ReasonExit, ExitCode: intp(3)}),
		},
	}
	run := &fakeJob{
		info:    protocol.JobInfo{JobID: "run", State: protocol.StateRunning, Pid: 11, CreatedAt: 600, StartedAt: 601, LastSeq: 2},
		events:  []protocol.Event{started("run", 11, "sleep", "9"), output("run", 2, protocol.KindStdout, "a")},
		pending: []protocol.Event{output("run", 3, protocol.KindStdout, "b")},
	}
	late := &fakeJob{
		info: protocol.JobInfo{JobID: "late", State: protocol.StateExited, Reason: protocol.ReasonOverallTimeout, Signal: "SIGTERM",
			Pid: 12, CreatedAt: 700, StartedAt: 701, LastSeq: 2},
		events: []protocol.Event{started("late", 12), ended("late", 2, protocol.ExitPayload{Reason: protocol.ReasonOverallTimeout, Signal: "SIGTERM"})},
	}
	return &fakeNative{t: t, jobs: []*fakeJob{done, run, late}, pageEvents: 2, maxJobs: 4,
		health: protocol.HealthResult{OK: true, UptimeMs: 1234, ActiveJobs: 1, TotalJobs: 3}}
}

func (f *fakeNative) ops() []protocol.Op {
	var ops []protocol.Op
	for _, a := range f.asked {
		if len(ops) == 0 || ops[len(ops)-1] != a.op || a.op != protocol.OpSubscribe && a.op != protocol.OpListJobs {
			ops = append(ops, a.op)
		}
	}
	return slices.Clip(ops)
}
