package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// remotePolls is how many poll requests the supervisor answered.
func remotePolls(t *testing.T, s *supervisor) int {
	t.Helper()
	b := metricsText(t, s)
	n := 0
	for _, m := range regexp.MustCompile(`exec_supervisor_control_requests_total\{code="[a-z-]+",op="poll"\} (\d+)`).FindAllSubmatch(b, -1) {
		v, _ := strconv.Atoi(string(m[1]))
		n += v
	}
	return n
}

// TestPushPollReadsLocally: in push mode, a job polled is followed in the
// background and its later polls are answered locally (the supervisor
// answers no more polls of it): the same output, next and more as the
// supervisor's, the job's end once its output is all there, and still
// after the supervisor went away. A cursor outside what is held asks the
// supervisor.
func TestPushPollReadsLocally(t *testing.T) {
	s := start(t, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	ctx := ctxT(t, 30*time.Second)
	gate := filepath.Join(t.TempDir(), "go")
	j, err := s.c.Spawn(ctx, protocol.SpawnArgs{Shell: "echo a; while [ ! -e " + gate + " ]; do sleep 0.01; done; echo b; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	// Poll until its polls stop reaching the supervisor (the first one
	// does, and starts the following).
	before := remotePolls(t, s)
	for deadline := time.Now().Add(10 * time.Second); ; {
		n := remotePolls(t, s)
		r, err := s.c.Poll(ctx, j.JobID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if remotePolls(t, s) == n && len(r.Chunks) == 1 && string(r.Chunks[0].Data) == "a\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("polls still reach the supervisor after 10 s (%d of them)", remotePolls(t, s)-before)
		}
		time.Sleep(5 * time.Millisecond) // polling, as a gateway does
	}
	asked := remotePolls(t, s)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var local protocol.PollResult
	for deadline := time.Now().Add(10 * time.Second); !local.Job.Finished(); {
		if local, err = s.c.Poll(ctx, j.JobID, 0, 0); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's end never reached the local poll: %+v", local.Job)
		}
		time.Sleep(5 * time.Millisecond) // polling, as a gateway does
	}
	if n := remotePolls(t, s); n != asked {
		t.Fatalf("%d polls reached the supervisor after the job was followed", n-asked)
	}
	var out []byte
	for _, c := range local.Chunks {
		out = append(out, c.Data...)
	}
	if string(out) != "a\nb\n" || local.Next != 4 || local.More || local.Job.ExitCode == nil || *local.Job.ExitCode != 3 ||
		local.Job.Reason != protocol.ReasonExit || local.Job.OutputEnd != 4 || local.Job.StdoutBytes != 4 {
		t.Fatalf("local poll: %q next %d more %v job %+v", out, local.Next, local.More, local.Job)
	}
	// The supervisor's answer is the same.
	remote := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: s.cfg.Event, LocalPollJobs: -1})
	defer remote.Close()
	r, err := remote.Poll(ctx, j.JobID, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.c.Poll(ctx, j.JobID, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Chunks) != 1 || len(l.Chunks) != 1 || r.Chunks[0].Offset != l.Chunks[0].Offset || string(r.Chunks[0].Data) != string(l.Chunks[0].Data) ||
		r.Next != l.Next || r.More != l.More || r.InstanceID != l.InstanceID {
		t.Fatalf("remote %+v, local %+v", r, l)
	}
	// A caller that gave up gets its context's error, as from a remote
	// poll (a local answer hid it: a poll loop ran on past its deadline).
	done, stop := context.WithCancel(ctx)
	stop()
	if _, err := s.c.Poll(done, j.JobID, 1, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("local poll with a cancelled context: %v", err)
	}
	// Past what is held: the supervisor says what is wrong.
	if _, err := s.c.Poll(ctx, j.JobID, 100, 0); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("poll past the end: %v", err)
	}
	// The supervisor goes away: what is held is still there.
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Server.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if l, err := s.c.Poll(ctx, j.JobID, 0, 0); err != nil || len(l.Chunks) != 2 || !l.Job.Finished() {
		t.Fatalf("local poll without the supervisor: %+v (%v)", l, err)
	}
}

// TestLocalPollBounds: at most LocalPollJobs jobs are followed for polls
// (one more, polled while they all were polled recently, is answered by
// the supervisor rather than taking a place: no churn), a job printing
// more than LocalPollBytes keeps its newest output locally and polls
// below it ask the supervisor, and Close stops every follower (the
// test's leak check).
func TestLocalPollBounds(t *testing.T) {
	s := start(t, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	ctx := ctxT(t, 30*time.Second)
	c := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: s.cfg.Event, LocalPollJobs: 2, LocalPollBytes: 64 << 10})
	defer c.Close()
	gate := filepath.Join(t.TempDir(), "go")
	var ids []string
	for range 3 {
		j, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "head -c 300000 /dev/zero; while [ ! -e " + gate + " ]; do sleep 0.01; done"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Kill(ctx, j.JobID, "KILL")
		ids = append(ids, j.JobID)
	}
	// Polled until answered locally, all of the output there.
	settle := func(id string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; { // (all printed first)
			if info, err := c.Status(ctx, id); err != nil || info.OutputEnd == 300000 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never printed its output", id)
			}
			time.Sleep(5 * time.Millisecond) // polling the job's progress
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			n := remotePolls(t, s)
			r, err := c.Poll(ctx, id, 300000-1000, 0)
			if err != nil {
				t.Fatal(err)
			}
			if remotePolls(t, s) == n && r.Next == 300000 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: polls still reach the supervisor", id)
			}
			time.Sleep(5 * time.Millisecond) // polling, as a gateway does
		}
	}
	settle(ids[0])
	settle(ids[1])
	// Below the 64 KiB held locally: asked remotely (the ring has it).
	n := remotePolls(t, s)
	if r, err := c.Poll(ctx, ids[0], 0, 1000); err != nil || remotePolls(t, s) != n+1 || len(r.Chunks) == 0 {
		t.Fatalf("poll below the local buffer: %d remote polls (want 1), %v", remotePolls(t, s)-n, err)
	}
	// A third job, while the others are polled: asked remotely, every
	// time, and the two stay followed.
	for range 5 {
		n := remotePolls(t, s)
		if _, err := c.Poll(ctx, ids[2], 300000-1000, 0); err != nil || remotePolls(t, s) != n+1 {
			t.Fatalf("the third job: %d remote polls (want 1), %v", remotePolls(t, s)-n, err)
		}
		for _, id := range ids[:2] {
			n := remotePolls(t, s)
			if _, err := c.Poll(ctx, id, 300000-1000, 0); err != nil || remotePolls(t, s) != n {
				t.Fatalf("%s, followed: %d remote polls (want 0), %v", id, remotePolls(t, s)-n, err)
			}
		}
	}
}

// TestLocalPollServiceStartedAgain: a service polled locally whose
// supervision ended and that is started again is answered by the
// supervisor (not as ended forever by the local copy).
func TestLocalPollServiceStartedAgain(t *testing.T) {
	s := start(t, nil)
	ctx := ctxT(t, 30*time.Second)
	gate := filepath.Join(t.TempDir(), "go")
	j, err := s.c.Spawn(ctx, protocol.SpawnArgs{Shell: "echo run; while [ ! -e " + gate + " ]; do sleep 0.01; done",
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.c.Stop(ctx, j.JobID)
	poll := func(cursor int64, cond func(protocol.PollResult) bool) protocol.PollResult {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			r, err := s.c.Poll(ctx, j.JobID, cursor, 0)
			if err != nil {
				t.Fatal(err)
			}
			if cond(r) {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("poll from %d: %+v", cursor, r)
			}
			time.Sleep(5 * time.Millisecond) // polling, as a gateway does
		}
	}
	poll(0, func(r protocol.PollResult) bool { return r.Next == 4 && r.Job.State == protocol.StateRunning })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	poll(4, func(r protocol.PollResult) bool { return r.Job.Finished() }) // (exit 0: supervision ends)
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.StartService(ctx, j.JobID); err != nil {
		t.Fatal(err)
	}
	r := poll(4, func(r protocol.PollResult) bool { return !r.Job.Finished() && len(r.Chunks) > 0 })
	if string(r.Chunks[0].Data) != "run\n" || r.Job.Attempt != 2 {
		t.Fatalf("after the start: %+v", r)
	}
}

// TestLocalPollEndExact: a job polled to its end through the local buffer
// reports the same byte counts and times as the supervisor: the counts
// were pieced together from the events (output read but not yet
// published when following began was counted twice or not at all, by
// stream: 226000 for 231000 bytes of stdout), the times were the events'.
// The terminal event now carries them.
func TestLocalPollEndExact(t *testing.T) {
	s := start(t, nil)
	ctx := ctxT(t, 60*time.Second)
	remote := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: s.cfg.Event, LocalPollJobs: -1})
	defer remote.Close()
	const cmd = `for b in $(seq 1 20); do seq $((b*1000)) $((b*1000+999)); seq 1 100 >&2; sleep 0.02; done`
	var ids []string
	for range 3 {
		j, err := s.c.Spawn(ctx, protocol.SpawnArgs{Shell: cmd})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.JobID)
	}
	for _, id := range ids {
		var local protocol.PollResult
		for cursor := int64(0); !local.Job.Finished() || local.More; {
			var err error
			if local, err = s.c.Poll(ctx, id, cursor, 0); err != nil {
				t.Fatal(err)
			}
			cursor = local.Next
			time.Sleep(3 * time.Millisecond) // polling, as a gateway does
		}
		st, err := remote.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		l := local.Job
		if l.StdoutBytes != st.StdoutBytes || l.StderrBytes != st.StderrBytes || l.EndedAt != st.EndedAt || l.LastOutputAt != st.LastOutputAt || l.OutputEnd != st.OutputEnd {
			t.Errorf("job %s: local stdout %d stderr %d ended %d last output %d end %d; supervisor %d %d %d %d %d", id,
				l.StdoutBytes, l.StderrBytes, l.EndedAt, l.LastOutputAt, l.OutputEnd, st.StdoutBytes, st.StderrBytes, st.EndedAt, st.LastOutputAt, st.OutputEnd)
		}
	}
}
