package local_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
	"github.com/exec-supervisor/exec-supervisor/pkg/local"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func TestMain(m *testing.M) {
	// (TestLimits' jobs start through this binary as the helper.)
	local.MaybeRunLimitsHelper()
	os.Exit(testenv.Main(m))
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func readAll(t *testing.T, r io.Reader) (string, error) {
	t.Helper()
	var b bytes.Buffer
	_, err := io.Copy(&b, r)
	return b.String(), err
}

// TestStartCancelledContext: Start with a cancelled context starts
// nothing (it started the job anyway).
func TestStartCancelledContext(t *testing.T) {
	e := local.New(0)
	defer e.Close(context.Background())
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if j, err := e.Start(cancelled, protocol.SpawnArgs{Argv: []string{"true"}}, 0); err == nil {
		j.Close()
		t.Fatal("started with a cancelled context")
	}
}

// TestLimits: an Engine with a limits helper applies a job's rlimits
// and niceness before its program runs; without one, such a spawn fails
// saying what is missing, and nothing runs.
func TestLimits(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := local.NewWith(local.Options{NoCgroups: true, LimitsHelper: self})
	t.Cleanup(func() { e.Close(context.Background()) })
	nice := 7
	lim := &protocol.ResourceLimits{MaxOpenFiles: 77, MaxAddressSpaceBytes: 3 << 30, Nice: &nice}
	j, err := e.Start(ctx, protocol.SpawnArgs{Shell: `echo "$$ $(cut -d' ' -f5,19 /proc/$$/stat) $(ulimit -n) $(ulimit -v)"`, Limits: lim}, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := readAll(t, j.Stdout())
	ex, err := j.Wait(ctx)
	if err != nil || ex.Reason != protocol.ReasonExit || ex.ExitCode == nil || *ex.ExitCode != 0 {
		t.Fatalf("job ended %+v, %v; output %q", ex, err, out)
	}
	// pid, process group (the program leads the job's group: it kept the
	// helper's pid), nice, nofile, address space in KiB.
	f := strings.Fields(out)
	if len(f) != 5 || f[0] != f[1] || f[2] != "7" || f[3] != "77" || f[4] != strconv.Itoa((3<<30)/1024) {
		t.Fatalf("output %q, want \"PID PID 7 77 %d\"", out, (3<<30)/1024)
	}

	plain := local.NewWith(local.Options{NoCgroups: true})
	t.Cleanup(func() { plain.Close(context.Background()) })
	marker := filepath.Join(t.TempDir(), "ran")
	_, err = plain.Start(ctx, protocol.SpawnArgs{Argv: []string{"touch", marker}, Limits: lim}, 0)
	if err == nil || !strings.Contains(err.Error(), "LimitsHelper") {
		t.Fatalf("spawn with limits and no helper: %v, want an error naming Options.LimitsHelper", err)
	}
	if _, serr := os.Stat(marker); serr == nil {
		t.Fatal("the job ran although its limits could not be applied")
	}
}

// TestPacedJob: in origin mode (an Engine), a Job started with Pace is
// held to its reader's pace too, as a supervisor's is (Pace was ignored:
// a slow reader lost output in one mode and not in the other).
func TestPacedJob(t *testing.T) {
	e := local.NewWith(local.Options{NoCgroups: true})
	t.Cleanup(func() { e.Close(context.Background()) })
	ctx := ctxT(t, 60*time.Second)
	const cmd = "seq 1 600000" // (4 MB: more than the ring, far more than the buffer)
	want, err := exec.Command("sh", "-c", cmd).Output()
	if err != nil {
		t.Fatal(err)
	}
	j, err := e.Start(ctx, protocol.SpawnArgs{Shell: cmd, Pace: true}, 32<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	got := readSlowly(t, j.Stdout())
	if ex, err := j.Wait(ctx); err != nil || ex.Reason != protocol.ReasonExit || !bytes.Equal(got, want) {
		t.Fatalf("paced job: %+v, %v; %d of %d bytes", ex, err, len(got), len(want))
	}
}

// readSlowly reads r to its end as a reader that falls behind now and
// then, failing on any error (a loss included).
func readSlowly(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var got bytes.Buffer
	buf := make([]byte, 8<<10)
	for {
		n, err := r.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			return got.Bytes()
		}
		if err != nil {
			t.Fatalf("read: %v after %d bytes", err, got.Len())
		}
		if got.Len()%(512<<10) < n {
			time.Sleep(20 * time.Millisecond) // a reader that falls behind now and then (not a wait for anything)
		}
	}
}

// TestJobs: an Engine's jobs through their client.Job: output by stream,
// the exit, input, a kill and a spawn error, as a supervisor's.
func TestJobs(t *testing.T) {
	e := local.New(0)
	t.Cleanup(func() { e.Close(context.Background()) })
	ctx := ctxT(t, 30*time.Second)
	j, err := e.Start(ctx, protocol.SpawnArgs{Shell: "echo out; echo err >&2; exit 3"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := readAll(t, j.Stdout()); err != nil || out != "out\n" {
		t.Fatalf("stdout %q %v", out, err)
	}
	if errs, err := readAll(t, j.Stderr()); err != nil || errs != "err\n" {
		t.Fatalf("stderr %q %v", errs, err)
	}
	if ex, err := j.Wait(ctx); err != nil || ex.Reason != protocol.ReasonExit || *ex.ExitCode != 3 {
		t.Fatalf("exit %+v %v", ex, err)
	}
	j.Close()

	j, err = e.Start(ctx, protocol.SpawnArgs{Argv: []string{"cat"}, Stdin: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Write(ctx, []byte("typed"), true); err != nil {
		t.Fatal(err)
	}
	if out, err := readAll(t, j.Stdout()); err != nil || out != "typed" {
		t.Fatalf("stdin: %q %v", out, err)
	}
	j.Close()

	j, err = e.Start(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "30"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if ex, err := j.Wait(ctx); err != nil || ex.Reason != protocol.ReasonManualCancel {
		t.Fatalf("kill: %+v %v", ex, err)
	}
	j.Close()

	if _, err := e.Start(ctx, protocol.SpawnArgs{Argv: []string{"/nonexistent"}}, 0); protocol.CodeOf(err) != protocol.CodeSpawnError {
		t.Fatalf("spawn error: %v", err)
	}
}
