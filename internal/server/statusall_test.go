package server

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// infoSizeBound is a bound: a job with every field set, its numbers at
// their widest, encodes to no more.
func TestInfoSizeBound(t *testing.T) {
	code, big := -1, int64(-1<<62)
	j := protocol.JobInfo{JobID: "j-0123456789abcdef", State: protocol.StateExited, Argv: []string{"a", strings.Repeat("b", 300)},
		Shell: "s", Cwd: "/c", Labels: map[string]string{"k": "v", "kk": strings.Repeat("v", 70000)}, SessionID: "sess",
		Pid: 1 << 30, Pgid: 1 << 30, CreatedAt: big, StartedAt: big, EndedAt: big, LastOutputAt: big, Reason: protocol.ReasonExit,
		ExitCode: &code, Signal: "SIGKILL", Error: "e", TimeoutMs: big, NoOutputTimeoutMs: big, StdoutBytes: big, StderrBytes: big,
		RetainedFrom: big, OutputEnd: big, LastSeq: 1 << 63, Pty: true, Rows: 65535, Cols: 65535, BracketedPaste: true, StdinOpen: true,
		OutputHeld: true, OutputPaced: true, Ownership: "cgroup", Cgroup: "/sys/fs/cgroup/x", Usage: &protocol.Usage{Processes: 1 << 30,
			RSSBytes: big, CPUSeconds: 1e300, CPUPercent: 1e300, SampledAt: big}, Restart: "on-failure", Attempt: 1 << 30, Restarts: 1 << 30,
		RestartsInWindow: 1 << 30, NextRestartAt: big, UptimeMs: big, Notify: true, Ready: true, NotifyStatus: "ready",
		LastWatchdogAt: big, Stopping: true, Limits: &protocol.LimitsInfo{Applied: []string{"maxOpenFiles=64"}, Unavailable: map[string]string{"memory.max": "no memory controller"}}}
	b, err := protocol.Marshal(&j)
	if err != nil {
		t.Fatal(err)
	}
	if bound := infoSizeBound(&j); bound < len(b) {
		t.Fatalf("bound %d < encoded %d", bound, len(b))
	}
}

// TestStatusAllBoundedBeforeBuilt: status of all jobs when their specs
// alone pass the reply limit is refused (too-large) without being
// encoded: eight at once allocate next to nothing (1,500 finished jobs of
// 200 KiB argv took 1.8 GB per call, 6.7 GB for eight, kept after).
func TestStatusAllBoundedBeforeBuilt(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 60*time.Second)
	// 340 finished jobs of 200 KiB argv (two arguments: the kernel takes
	// at most 128 KiB in one): 68 MB of specs.
	arg := strings.Repeat("x", 100<<10)
	const n = 340
	for i := range n {
		info, fin, err := ts.client.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"true", arg, arg}}, 10*time.Second)
		if err != nil || !fin {
			t.Fatalf("job %d: %+v %v %v", i, info, fin, err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res protocol.StatusResult
			errs <- ts.client.Call(ctx, protocol.OpStatus, &protocol.JobArgs{}, &res)
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	close(errs)
	for err := range errs {
		if protocol.CodeOf(err) != protocol.CodeTooLarge || !strings.Contains(err.Error(), "list-jobs") {
			t.Fatalf("status of all jobs: %v; want too-large pointing at list-jobs", err)
		}
	}
	// (what the whole process allocated meanwhile, test and server: the
	// jobs' specs alone are 68 MB)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("8 refused status calls allocated %d MB", alloc>>20)
	}
	// list-jobs pages through them.
	jobs, err := ts.client.ListJobs(ctx, protocol.ListJobsArgs{Brief: true})
	if err != nil || len(jobs) != n {
		t.Fatalf("list-jobs: %d jobs, %v", len(jobs), err)
	}
}
