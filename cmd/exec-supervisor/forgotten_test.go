package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/outlog"
	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// crashedNamedJob runs a named job with output on disk under a
// supervisor that is SIGKILLed before the job ends, once its output is
// in the files, and starts a supervisor that knows nothing of it (its
// own state directory, the first one's output directory): the job is
// only in its files. It returns that supervisor, the job's id and the
// output it printed.
func crashedNamedJob(t *testing.T, name string, lines int) (*sup, env, string, string) {
	t.Helper()
	e := newEnv(t)
	outDir := filepath.Join(e.state, "output")
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Name: name, Output: protocol.OutputDisk,
		Shell: fmt.Sprintf("seq 1 %d; echo done >&2; exec sleep 300", lines)})
	if err != nil {
		t.Fatal(err)
	}
	// (Cleanups run last first: the job is killed, then one more start
	// on the first state directory reaps what the killed supervisor
	// left, its job cgroups included.)
	t.Cleanup(func() { e.start(t) })
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	want.WriteString("done\n")
	// Wait until the files hold the whole output (read as a forgotten
	// job's are, by a store of the test's own on the directory).
	files, err := outlog.Open(outlog.Config{Dir: outDir})
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close(context.Background())
	for deadline := time.Now().Add(20 * time.Second); ; {
		if r, err := files.Poll(j.JobID, 0, 0); err == nil && r.Next == int64(want.Len()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job's output never reached its files")
		}
		time.Sleep(20 * time.Millisecond) // (the files have no change notification)
	}
	s.kill9()
	e2 := newEnv(t)
	return e2.start(t, "--output-dir", outDir), e2, j.JobID, want.String()
}

// TestForgottenAfterCrash: a named job whose supervisor died before the
// job ended, unknown to the next supervisor, is found in its files by
// its name (recorded when its files were made), polled whole, with an
// end said to be unknown (reason supervisor-restart), and followed
// (execctl logs -f) to that end.
func TestForgottenAfterCrash(t *testing.T) {
	s, e, id, want := crashedNamedJob(t, "crashy", 3000)
	ctx := ctxFor(t, 30*time.Second)
	var got strings.Builder
	var info protocol.JobInfo
	for cursor := int64(0); ; {
		r, err := s.client.Poll(ctx, "crashy", cursor, 0)
		if err != nil {
			t.Fatalf("poll by name after the crash: %v", err)
		}
		for _, c := range r.Chunks {
			got.WriteString(string(c.Data))
		}
		cursor, info = r.Next, r.Job
		if !r.More {
			break
		}
	}
	if got.String() != want || info.JobID != id || info.Name != "crashy" || info.State != protocol.StateExited ||
		!strings.Contains(info.Error, "without a record of how the job ended") {
		t.Fatalf("poll by name: %d bytes of %d, job %+v", got.Len(), len(want), info)
	}
	if _, err := s.client.Status(ctx, "crashy"); !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("status of the forgotten job: %v, want not-found", err)
	}
	// Followed by name: replayed from the files to an end said to be
	// unknown, nothing said lost.
	var stderr proctest.Buffer
	cmd := exec.CommandContext(ctx, execctlBinary, "--control", e.ctl, "--event", e.evt, "logs", "-f", "crashy")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if err != nil || stderr.String() != "" || len(lines) != 3002 || lines[0] != id+" | 1" || lines[3000] != id+" | done" ||
		lines[3001] != id+" | [ended: supervisor-restart]" {
		t.Fatalf("logs -f crashy: %v, stderr %q, %d lines, last %q", err, stderr.String(), len(lines), lines[len(lines)-1])
	}
}
