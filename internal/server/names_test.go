package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestJobNameInEveryOp: a job spawned with a name is found by it in every
// op that takes a jobId, and the replies carry its id; a second live job
// cannot take the name (name-taken, naming the holder); once the job has
// finished the name is free, and names the live job, else the one that
// finished last.
func TestJobNameInEveryOp(t *testing.T) {
	ts := startServer(t, testConfig(t))
	c := ts.client
	ctx := ctxT(t, 30*time.Second)
	j, err := c.Spawn(ctx, protocol.SpawnArgs{Name: "build", Argv: []string{"sh", "-c", "echo ready; cat"}, Stdin: true,
		Labels: map[string]string{"team": "infra"}})
	if err != nil {
		t.Fatal(err)
	}
	id := j.JobID
	defer c.Kill(context.Background(), id, "SIGKILL")
	if j.Name != "build" || id == "build" {
		t.Fatalf("spawned job %s named %q", id, j.Name)
	}
	_, err = c.Spawn(ctx, protocol.SpawnArgs{Name: "build", Argv: []string{"true"}})
	if pe := asProtoErr(err); pe == nil || pe.Code != protocol.CodeNameTaken || pe.Details["jobId"] != id {
		t.Fatalf("second spawn named build: %v, want name-taken naming %s", err, id)
	}
	if _, err := c.Spawn(ctx, protocol.SpawnArgs{Name: "j-build", Argv: []string{"true"}}); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("name j-build: %v, want invalid-argument", err)
	}

	info, err := c.Status(ctx, "build")
	if err != nil || info.JobID != id || info.Name != "build" {
		t.Fatalf("status build: %+v, %v", info, err)
	}
	if _, err := c.Write(ctx, "build", []byte("typed\n"), false); err != nil {
		t.Fatalf("write build: %v", err)
	}
	var poll protocol.PollResult
	eventually(t, 10*time.Second, "the job's output by name", func() bool {
		poll, err = c.Poll(ctx, "build", 0, 0)
		return err == nil && string(joinChunks(poll.Chunks)) == "ready\ntyped\n"
	})
	if poll.Job.JobID != id {
		t.Fatalf("poll build answered for %s", poll.Job.JobID)
	}
	sub, err := c.Subscribe(ctx, "build", 1, 0)
	if err != nil || sub.Job.JobID != id || len(sub.Events) == 0 || sub.Events[0].JobID != id {
		t.Fatalf("subscribe build: %+v, %v", sub.Job, err)
	}
	var pace protocol.PaceResult
	if err := c.Call(ctx, protocol.OpPace, &protocol.PaceArgs{JobID: "build", Release: true}, &pace); err != nil || pace.Job.JobID != id {
		t.Fatalf("pace build: %v", err)
	}
	// (a pipe job has no terminal: refused as such, so found)
	if err := c.Resize(ctx, "build", 30, 100); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("resize build: %v, want invalid-argument (not a terminal)", err)
	}
	if runs, err := c.History(ctx, "build"); err != nil || len(runs) != 0 {
		t.Fatalf("history build: %v, %v", runs, err)
	}
	if w, finished, err := c.Wait(ctx, "build", 10*time.Millisecond); err != nil || finished || w.JobID != id {
		t.Fatalf("wait build: %s finished %v, %v", w.JobID, finished, err)
	}
	if err := c.Remove(ctx, "build"); protocol.CodeOf(err) != protocol.CodeJobRunning {
		t.Fatalf("remove build while it runs: %v, want job-running", err)
	}
	if res, err := c.Kill(ctx, "build", ""); err != nil || res.Job.JobID != id {
		t.Fatalf("kill build: %v", err)
	}
	if w, finished, err := c.Wait(ctx, "build", 10*time.Second); err != nil || !finished || w.JobID != id || w.Name != "build" {
		t.Fatalf("wait build: %+v finished %v, %v", w, finished, err)
	}

	// Finished: the name is free again, and names the live job first.
	j2, err := c.Spawn(ctx, protocol.SpawnArgs{Name: "build", Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatalf("spawn named build once the first one finished: %v", err)
	}
	defer c.Kill(context.Background(), j2.JobID, "SIGKILL")
	if info, err := c.Status(ctx, "build"); err != nil || info.JobID != j2.JobID {
		t.Fatalf("status build: %s, %v; want the live %s", info.JobID, err, j2.JobID)
	}
	if _, err := c.Kill(ctx, "build", "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if _, finished, err := c.Wait(ctx, "build", 10*time.Second); err != nil || !finished {
		t.Fatalf("wait build: finished %v, %v", finished, err)
	}
	if info, err := c.Status(ctx, "build"); err != nil || info.JobID != j2.JobID {
		t.Fatalf("status build: %s, %v; want %s, which finished last", info.JobID, err, j2.JobID)
	}
	var removed protocol.RemoveResult
	if err := c.Call(ctx, protocol.OpRemove, &protocol.JobArgs{JobID: "build"}, &removed); err != nil || removed.JobID != j2.JobID {
		t.Fatalf("remove build: %+v, %v; want %s removed", removed, err, j2.JobID)
	}
	if info, err := c.Status(ctx, "build"); err != nil || info.JobID != id {
		t.Fatalf("status build: %s, %v; want the older %s", info.JobID, err, id)
	}
	if _, err := c.Status(ctx, "nobody"); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("status of an unknown name: %v, want not-found", err)
	}
}

// TestServiceNameOps: start, restart and stop take a service's name, which
// it keeps across its runs.
func TestServiceNameOps(t *testing.T) {
	ts := startServer(t, testConfig(t))
	c := ts.client
	ctx := ctxT(t, 30*time.Second)
	svc, err := c.Spawn(ctx, protocol.SpawnArgs{Name: "web", Argv: []string{"sleep", "300"},
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill(context.Background(), svc.JobID, "SIGKILL")
	info, err := c.Restart(ctx, "web")
	if err != nil || info.JobID != svc.JobID {
		t.Fatalf("restart web: %v", err)
	}
	eventually(t, 10*time.Second, "the second run", func() bool {
		info, err = c.Status(ctx, "web")
		return err == nil && info.Attempt == 2 && info.State == protocol.StateRunning
	})
	if info.Name != "web" {
		t.Fatalf("second run named %q", info.Name)
	}
	if _, err := c.Spawn(ctx, protocol.SpawnArgs{Name: "web", Argv: []string{"true"}}); protocol.CodeOf(err) != protocol.CodeNameTaken {
		t.Fatalf("spawn named web while the service runs: %v", err)
	}
	if runs, err := c.History(ctx, "web"); err != nil || len(runs) != 1 {
		t.Fatalf("history web: %d runs, %v", len(runs), err)
	}
	if res, err := c.Stop(ctx, "web"); err != nil || res.Job.JobID != svc.JobID {
		t.Fatalf("stop web: %v", err)
	}
	if _, finished, err := c.Wait(ctx, "web", 10*time.Second); err != nil || !finished {
		t.Fatalf("wait web: %v %v", finished, err)
	}
	if info, err := c.StartService(ctx, "web"); err != nil || info.JobID != svc.JobID || info.Name != "web" {
		t.Fatalf("start web: %+v, %v", info, err)
	}
}

// TestListFiltersByNameAndLabels: list-jobs keeps the jobs whose name
// matches a glob and that have every label asked for, page after page;
// brief listings keep names.
func TestListFiltersByNameAndLabels(t *testing.T) {
	ts := startServer(t, testConfig(t))
	c := ts.client
	ctx := ctxT(t, 30*time.Second)
	spawn := func(name string, labels map[string]string) string {
		t.Helper()
		j, finished, err := c.SpawnWait(ctx, protocol.SpawnArgs{Name: name, Labels: labels, Argv: []string{"true"}}, 10*time.Second)
		if err != nil || !finished {
			t.Fatalf("spawn %q: %v", name, err)
		}
		return j.JobID
	}
	b1 := spawn("build-1", map[string]string{"team": "infra", "env": "prod"})
	b2 := spawn("build-2", map[string]string{"team": "infra", "env": "dev"})
	w := spawn("web", map[string]string{"team": "web", "env": "prod"})
	anon := spawn("", map[string]string{"team": "infra", "env": "prod"})
	for _, tc := range []struct {
		args protocol.ListJobsArgs
		want []string
	}{
		{protocol.ListJobsArgs{}, []string{b1, b2, w, anon}},
		{protocol.ListJobsArgs{Name: "build-*"}, []string{b1, b2}},
		{protocol.ListJobsArgs{Name: "*"}, []string{b1, b2, w}},
		{protocol.ListJobsArgs{Name: "web"}, []string{w}},
		{protocol.ListJobsArgs{Labels: map[string]string{"team": "infra"}}, []string{b1, b2, anon}},
		{protocol.ListJobsArgs{Labels: map[string]string{"team": "infra", "env": "prod"}}, []string{b1, anon}},
		{protocol.ListJobsArgs{Labels: map[string]string{"env": "prod"}, Name: "*", Limit: 1}, []string{b1, w}},
		{protocol.ListJobsArgs{Labels: map[string]string{"team": "nobody"}}, nil},
		{protocol.ListJobsArgs{Name: "build-*", Brief: true}, []string{b1, b2}},
	} {
		jobs, err := c.ListJobs(ctx, tc.args)
		if err != nil {
			t.Fatalf("%+v: %v", tc.args, err)
		}
		var got []string
		for _, j := range jobs {
			got = append(got, j.JobID)
			if j.JobID == b1 && j.Name != "build-1" {
				t.Errorf("%+v: %s named %q", tc.args, j.JobID, j.Name)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("list %+v: %v, want %v", tc.args, got, tc.want)
		}
	}
	if _, err := c.ListJobs(ctx, protocol.ListJobsArgs{Name: "build-["}); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("a malformed name pattern: %v, want invalid-argument", err)
	}
}

// TestJobNamesSurviveRestart: names are journaled: after a supervisor
// restart a finished job is found by its name, a resumed service holds its
// own (a spawn of it is refused), and a job the shutdown ended has let its
// name go.
func TestJobNamesSurviveRestart(t *testing.T) {
	cfg := testConfig(t)
	s1 := startServer(t, cfg)
	ctx := ctxT(t, 60*time.Second)
	once, finished, err := s1.client.SpawnWait(ctx, protocol.SpawnArgs{Name: "once", Argv: []string{"true"}}, 10*time.Second)
	if err != nil || !finished {
		t.Fatalf("spawn once: %v", err)
	}
	svc, err := s1.client.Spawn(ctx, protocol.SpawnArgs{Name: "svc", Argv: []string{"sleep", "300"},
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	long, err := s1.client.Spawn(ctx, protocol.SpawnArgs{Name: "long", Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Server.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := startServer(t, cfg)
	c := s2.client
	defer c.Kill(context.Background(), svc.JobID, "SIGKILL")
	if info, err := c.Status(ctx, "once"); err != nil || info.JobID != once.JobID || info.Name != "once" {
		t.Fatalf("status once after the restart: %+v, %v", info, err)
	}
	var info protocol.JobInfo
	eventually(t, 10*time.Second, "the service resumed", func() bool {
		info, err = c.Status(ctx, "svc")
		return err == nil && info.State == protocol.StateRunning && info.Attempt > 1
	})
	if info.JobID != svc.JobID || info.Name != "svc" {
		t.Fatalf("status svc after the restart: %s named %q", info.JobID, info.Name)
	}
	if _, err := c.Spawn(ctx, protocol.SpawnArgs{Name: "svc", Argv: []string{"true"}}); protocol.CodeOf(err) != protocol.CodeNameTaken {
		t.Fatalf("spawn named svc while the resumed service runs: %v, want name-taken", err)
	}
	if info, err := c.Status(ctx, "long"); err != nil || info.JobID != long.JobID || info.Reason != protocol.ReasonShutdown {
		t.Fatalf("status long after the restart: %+v, %v", info, err)
	}
	again, err := c.Spawn(ctx, protocol.SpawnArgs{Name: "long", Argv: []string{"true"}})
	if err != nil {
		t.Fatalf("spawn named long, whose job the shutdown ended: %v", err)
	}
	if jobs, err := c.ListJobs(ctx, protocol.ListJobsArgs{Name: "long"}); err != nil || len(jobs) != 2 || jobs[1].JobID != again.JobID {
		t.Fatalf("list --name long: %v, %v", jobs, err)
	}
}

// TestHostileJobNames: names and name patterns that are not UTF-8 (sent
// as bin), oversized, or hold control characters, spaces or glob
// characters are refused and start nothing.
func TestHostileJobNames(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 10*time.Second)
	type rawSpawn struct {
		Argv []string `msgpack:"argv"`
		Name []byte   `msgpack:"name"`
	}
	type rawList struct {
		Name []byte `msgpack:"name"`
	}
	for _, tc := range []struct {
		name string
		code protocol.Code
	}{
		{"a\xffb", protocol.CodeBadRequest}, {"\xc0\x80", protocol.CodeBadRequest},
		{strings.Repeat("n", protocol.MaxNameBytes+1), protocol.CodeInvalidArgument}, {strings.Repeat("n", 1<<16), protocol.CodeInvalidArgument},
		{"a\nb", protocol.CodeInvalidArgument}, {"a\x00", protocol.CodeInvalidArgument}, {"\x1b[2J", protocol.CodeInvalidArgument},
		{"a b", protocol.CodeInvalidArgument}, {"build*", protocol.CodeInvalidArgument}, {"../x", protocol.CodeInvalidArgument},
		{"j-0123456789abcdef", protocol.CodeInvalidArgument}, {"\u202ebuild", protocol.CodeInvalidArgument},
	} {
		var res protocol.SpawnResult
		err := ts.client.Call(ctx, protocol.OpSpawn, &rawSpawn{Argv: []string{"true"}, Name: []byte(tc.name)}, &res)
		if protocol.CodeOf(err) != tc.code {
			t.Errorf("spawn named %.40q: %v, want %s", tc.name, err, tc.code)
		}
	}
	var page protocol.ListJobsResult
	if err := ts.client.Call(ctx, protocol.OpListJobs, &rawList{Name: []byte("b\xff*")}, &page); protocol.CodeOf(err) != protocol.CodeBadRequest {
		t.Errorf("list-jobs with a name pattern not UTF-8: %v", err)
	}
	if err := ts.client.Call(ctx, protocol.OpListJobs, &rawList{Name: []byte(strings.Repeat("*", 1<<12))}, &page); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Errorf("list-jobs with an oversized name pattern: %v", err)
	}
	if _, total := ts.jobs.Counts(); total != 0 {
		t.Fatalf("refused spawns made %d jobs", total)
	}
}

// asProtoErr is err's wire error, nil if it has none.
func asProtoErr(err error) *protocol.Error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

func joinChunks(cs []protocol.Chunk) []byte {
	var b []byte
	for _, c := range cs {
		b = append(b, c.Data...)
	}
	return b
}
