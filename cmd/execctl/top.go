package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TopCommand shows running jobs, refreshed.
type TopCommand struct{}

// Synopsis implements command.
func (*TopCommand) Synopsis() string {
	return "live view of jobs with CPU, RSS, state and age (q or Ctrl-C quits; one snapshot when not on a terminal): top [--interval 2s]"
}

// Run implements command.
func (*TopCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("top", g)
	interval := fs.Duration("interval", 2*time.Second, "refresh period")
	all := fs.Bool("all", false, "also show finished jobs")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if *interval < 100*time.Millisecond {
		return 0, &usageError{msg: "--interval must be at least 100ms"}
	}
	// Not a terminal (a pipe, a file): one plain snapshot, no screen
	// control, as top -b -n 1.
	live := isTTY(g.stdout)
	// q quits, typed on the terminal top runs in (in the foreground).
	var quit <-chan struct{}
	if in, ok := g.stdin.(*os.File); ok && live && isTerminal(int(in.Fd())) && !background(int(in.Fd())) {
		typed, stop, err := watchKey(in, "qQ")
		if err != nil {
			return 0, fmt.Errorf("top: terminal: %w", err)
		}
		defer stop()
		quit = typed
	}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		jobs, err := g.client.ListJobs(ctx, protocol.ListJobsArgs{})
		if err != nil {
			if ctx.Err() != nil {
				return exitOK, nil
			}
			return 0, err
		}
		if !*all {
			// Live jobs: running ones, and services between runs.
			jobs = slices.DeleteFunc(jobs, func(j protocol.JobInfo) bool { return j.Finished() })
		}
		h, _ := g.client.Health(ctx)
		var b bytes.Buffer
		if live {
			b.WriteString("\x1b[H\x1b[2J") // home, clear
			fmt.Fprintf(&b, "exec-supervisor %s  %d/%d jobs running  %s  (every %s, q quits)\n\n",
				h.InstanceID, h.ActiveJobs, h.MaxJobs, time.Now().Format("15:04:05"), humanDuration(*interval))
		} else {
			fmt.Fprintf(&b, "exec-supervisor %s  %d/%d jobs running  %s\n\n", h.InstanceID, h.ActiveJobs, h.MaxJobs, time.Now().Format("15:04:05"))
		}
		sort.SliceStable(jobs, func(i, j int) bool { return cpuOf(jobs[i]) > cpuOf(jobs[j]) })
		gg := *g
		gg.stdout = &b
		gg.json = false
		printJobTable(&gg, jobs)
		if !live {
			_, err := g.stdout.Write(b.Bytes())
			return exitOK, err
		}
		_, _ = g.stdout.Write(bytes.ReplaceAll(b.Bytes(), []byte("\n"), []byte("\r\n")))
		select {
		case <-ctx.Done():
			return exitOK, nil
		case <-quit:
			return exitOK, nil
		case <-t.C:
		}
	}
}

func cpuOf(j protocol.JobInfo) float64 {
	if j.Usage == nil {
		return -1
	}
	return j.Usage.CPUPercent
}
