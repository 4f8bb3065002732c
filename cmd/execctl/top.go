package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
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
		snap, err := topSnapshot(ctx, g, *all)
		if err != nil {
			if ctx.Err() != nil {
				return exitOK, nil
			}
			return 0, err
		}
		var b bytes.Buffer
		if live {
			b.WriteString("\x1b[H\x1b[2J") // home, clear
			fmt.Fprintf(&b, "%s  %s  (every %s, q quits)\n", snap.header, time.Now().Format("15:04:05"), humanDuration(*interval))
		} else {
			fmt.Fprintf(&b, "%s  %s\n", snap.header, time.Now().Format("15:04:05"))
		}
		if live && snap.failed != nil {
			for _, me := range snap.failed.Errs {
				fmt.Fprintf(&b, "host %s not answering: %v\n", hostName(me.Member), me.Err)
			}
		}
		b.WriteString("\n")
		gg := *g
		gg.stdout = &b
		gg.json = false
		printJobTable(&gg, snap.jobs, snap.hosts)
		if !live {
			if _, err := g.stdout.Write(b.Bytes()); err != nil {
				return 0, err
			}
			if snap.failed != nil {
				return g.hostsFailed("top", snap.failed), nil
			}
			return exitOK, nil
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

// topView is one refresh of top: its header line, the jobs (and, with
// several supervisors, each one's host), the hosts that did not answer.
type topView struct {
	header string
	jobs   []protocol.JobInfo
	hosts  []string
	failed *client.PartialError
}

// topSnapshot lists the jobs shown (live ones, or all), busiest first,
// and the supervisors' job counts.
func topSnapshot(ctx context.Context, g *globals, all bool) (topView, error) {
	var v topView
	if g.pool == nil {
		jobs, err := g.client.ListJobs(ctx, protocol.ListJobsArgs{})
		if err != nil {
			return v, err
		}
		h, _ := g.client.Health(ctx)
		v.header = fmt.Sprintf("exec-supervisor %s  %d/%d jobs running", h.InstanceID, h.ActiveJobs, h.MaxJobs)
		v.jobs = jobs
	} else {
		jobs, hosts, err := g.listPool(ctx, protocol.ListJobsArgs{})
		if err != nil && !errors.As(err, &v.failed) {
			return v, err
		}
		hs, _ := g.pool.Health(ctx)
		active, maxJobs, up := 0, 0, 0
		for _, h := range hs {
			if h.Err == nil {
				active, maxJobs, up = active+h.Health.ActiveJobs, maxJobs+h.Health.MaxJobs, up+1
			}
		}
		v.header = fmt.Sprintf("exec-supervisor: %d of %d hosts answering  %d/%d jobs running", up, len(hs), active, maxJobs)
		v.jobs, v.hosts = jobs, hosts
	}
	// (indices: a job's host moves with it)
	idx := make([]int, 0, len(v.jobs))
	for i, j := range v.jobs {
		if all || !j.Finished() { // live jobs: running ones, and services between runs
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return cpuOf(v.jobs[idx[a]]) > cpuOf(v.jobs[idx[b]]) })
	jobs := make([]protocol.JobInfo, len(idx))
	var hosts []string
	if v.hosts != nil {
		hosts = make([]string, len(idx))
	}
	for k, i := range idx {
		jobs[k] = v.jobs[i]
		if hosts != nil {
			hosts[k] = v.hosts[i]
		}
	}
	v.jobs, v.hosts = jobs, hosts
	return v, nil
}
