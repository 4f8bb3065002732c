package jobs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// bigSpawn is a job within the protocol's limits that holds far more in
// its spec than a job without output is thought to cost: argv of two
// 120 KiB arguments, env of two 60 KiB values (a resource audit held
// ~1.1 MB per finished job of this kind, none of it charged).
func bigSpawn(tag string) protocol.SpawnArgs {
	return protocol.SpawnArgs{
		Argv:   []string{"true", tag + strings.Repeat("a", 120<<10), strings.Repeat("b", 120<<10)},
		Env:    map[string]string{"BIG_A": strings.Repeat("c", 60<<10), "BIG_B": strings.Repeat("d", 60<<10)},
		Labels: map[string]string{"tag": tag},
	}
}

// TestFinishedSpecCharged: what a finished job keeps of its spec (argv,
// labels, its job.started event) is charged to MaxFinishedOutput with its
// output: past the budget the oldest are forgotten; env is not kept once
// it finished; the counts stay exact through remove and sweep; subscribe
// still gets the job.started event whole.
func TestFinishedSpecCharged(t *testing.T) {
	const budget = 1 << 20
	m := New(Config{MaxJobs: 10, MaxFinishedOutput: budget}, nil, nil)
	defer m.Close(context.Background())
	var ids []string
	for i := range 8 {
		info, out := runJob(t, m, bigSpawn(string(rune('A'+i))))
		if out != "" || info.State != protocol.StateExited {
			t.Fatalf("job %d: state %s, output %q", i, info.State, out)
		}
		ids = append(ids, info.JobID)
	}
	// Each keeps ~240 KiB of argv (env dropped): four fit in 1 MiB.
	for i, id := range ids {
		_, err := m.Get(id)
		if forgotten := i < 4; forgotten != (err != nil) {
			t.Fatalf("job %d of 8: Get error %v; want forgotten=%v (the newest 4 fit in %d bytes)", i, err, forgotten, budget)
		}
	}
	if got := m.Forgotten(); got != 4 {
		t.Fatalf("Forgotten() = %d, want 4", got)
	}
	n, b := m.FinishedRetained()
	if n != 4 || b > budget || b < 4*240<<10 {
		t.Fatalf("retained %d jobs charged %d bytes; want 4 jobs, 983040..%d bytes", n, b, budget)
	}
	if active, total := m.Counts(); active != 0 || total != 4 {
		t.Fatalf("Counts() = %d active, %d known; want 0, 4", active, total)
	}
	j, err := m.Get(ids[7])
	if err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	env, fin := j.spec.Env, j.acct.finBytes
	j.mu.Unlock()
	if env != nil {
		t.Fatal("a finished one-shot job still holds its env")
	}
	// subscribe: job.started as published (its payload is rebuilt).
	res, err := j.Events(1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 2 || res.Events[0].Kind != protocol.KindStarted || len(res.Missing) != 0 {
		t.Fatalf("events %+v missing %v; want started and exited", res.Events, res.Missing)
	}
	var sp protocol.StartedPayload
	if err := res.Events[0].DecodePayload(&sp); err != nil {
		t.Fatal(err)
	}
	want := bigSpawn("H")
	if !slices.Equal(sp.Argv, want.Argv) || sp.Labels["tag"] != "H" || sp.Pid != res.Job.Pid || sp.Pgid != res.Job.Pid || res.Events[0].Seq != 1 {
		t.Fatalf("rebuilt job.started: pid %d pgid %d seq %d labels %v, argv equal %v", sp.Pid, sp.Pgid, res.Events[0].Seq, sp.Labels, slices.Equal(sp.Argv, want.Argv))
	}

	// Remove and sweep keep the charge exact.
	if err := m.Remove(ids[7]); err != nil {
		t.Fatal(err)
	}
	n2, b2 := m.FinishedRetained()
	if n2 != 3 || b2 != b-fin {
		t.Fatalf("after remove: %d jobs, %d bytes; want 3, %d", n2, b2, b-fin)
	}
	m.Sweep()
	if n3, b3 := m.FinishedRetained(); n3 != n2 || b3 != b2 {
		t.Fatalf("sweep recounted %d jobs, %d bytes; incremental counts were %d, %d", n3, b3, n2, b2)
	}
	// A job with output is charged its output and its spec: one more big
	// job forgets the oldest kept again.
	info, _ := runJob(t, m, bigSpawn("I"))
	info2, _ := runJob(t, m, bigSpawn("J"))
	if _, err := m.Get(ids[4]); err == nil {
		t.Fatal("the oldest kept job survived past the budget")
	}
	for _, id := range []string{ids[5], ids[6], info.JobID, info2.JobID} {
		if _, err := m.Get(id); err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
	}
	if _, b := m.FinishedRetained(); b > budget {
		t.Fatalf("retained %d bytes, over the %d budget", b, budget)
	}
}

// lockedBuf is a log destination safe for the job goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// TestLogLinesClipInput: the log lines of a job (started, spawn failed,
// exited) show the beginning of its argv and cwd, not all of it, with a
// marker; a spawn error quoting its input is bounded too (the job keeps
// it, the client gets it).
func TestLogLinesClipInput(t *testing.T) {
	var logs lockedBuf
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := New(Config{MaxJobs: 10}, log, nil)
	defer m.Close(context.Background())
	huge := strings.Repeat("x", 200<<10)
	args := make([]string, 0, 2000)
	args = append(args, "true", huge[:100<<10]) // (exec takes up to 128 KiB per argument)
	for range 1998 {
		args = append(args, "y")
	}
	if info, _ := runJob(t, m, protocol.SpawnArgs{Argv: args, Cwd: "/" + strings.Repeat("./", 600)}); info.ExitCode == nil || *info.ExitCode != 0 {
		t.Fatalf("job with a big argv: %+v", info)
	}
	// Spawn errors quoting a huge argv[0] and a huge cwd.
	for _, a := range []protocol.SpawnArgs{
		{Argv: []string{"no-such-" + huge}},
		{Argv: []string{"/no/such/" + huge}},
		{Argv: []string{"true"}, Cwd: "/no/such/" + huge},
	} {
		_, err := m.Spawn(a)
		var se *SpawnError
		if !errors.Is(err, ErrSpawn) || !errors.As(err, &se) {
			t.Fatalf("spawn %.40q: %v; want a spawn error", a.Argv, err)
		}
		if msg := err.Error(); len(msg) > 4<<10 || !strings.Contains(msg, "truncated") {
			t.Fatalf("spawn error of %d bytes: %.200s", len(msg), msg)
		}
		j, err := m.Get(se.JobID)
		if err != nil {
			t.Fatal(err)
		}
		<-j.Done()
		if e := j.Info().Error; len(e) > 4<<10 {
			t.Fatalf("the job keeps a %d-byte error", len(e))
		}
	}
	var started, failed int
	for _, l := range m.logLines(t, &logs) {
		if len(l.raw) > 8<<10 {
			t.Errorf("log line of %d bytes: %.300s", len(l.raw), l.raw)
		}
		switch l.Msg {
		case "job started":
			started++
			if !strings.Contains(l.raw, "truncated") || !strings.Contains(l.raw, "more arguments") {
				t.Errorf("job started line without a truncation marker: %.300s", l.raw)
			}
		case "job spawn failed":
			failed++
			if !strings.Contains(l.raw, "truncated") {
				t.Errorf("spawn failed line without a truncation marker: %.300s", l.raw)
			}
		}
	}
	if started != 1 || failed != 3 {
		t.Fatalf("%d job started lines, %d spawn failed; want 1, 3", started, failed)
	}
}

type logLine struct {
	Msg string `json:"msg"`
	raw string
}

func (m *Manager) logLines(t *testing.T, l *lockedBuf) []logLine {
	t.Helper()
	var out []logLine
	for _, s := range l.lines() {
		var ll logLine
		if err := json.Unmarshal([]byte(s), &ll); err != nil {
			t.Fatalf("log line %.100q: %v", s, err)
		}
		ll.raw = s
		out = append(out, ll)
	}
	return out
}

func TestClip(t *testing.T) {
	if got := Clip("short", 10); got != "short" {
		t.Fatal(got)
	}
	if got := Clip("héllo wörld", 2); got != "h...[truncated, 13 bytes]" { // (not inside é)
		t.Fatal(got)
	}
	argv := []string{"a", "b"}
	if got := ClipArgv(argv, 16, 10, 100); &got[0] != &argv[0] {
		t.Fatal("an argv within bounds was copied")
	}
	got := ClipArgv([]string{"prog", strings.Repeat("z", 50), "c", "d"}, 3, 20, 30)
	want := []string{"prog", strings.Repeat("z", 20) + "...[truncated, 50 bytes]", "c", "...[1 more arguments, 1 bytes]"}
	if !slices.Equal(got, want) {
		t.Fatalf("ClipArgv = %q, want %q", got, want)
	}
}
