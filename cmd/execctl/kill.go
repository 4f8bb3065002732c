package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// KillCommand terminates jobs.
type KillCommand struct{}

// Synopsis implements command.
func (*KillCommand) Synopsis() string {
	return "terminate jobs (SIGTERM, grace, SIGKILL) or signal them: kill JOB... | --label K=V... [--signal SIG]"
}

// killParallel bounds the kills of one execctl kill in flight at once:
// each reply waits for its change to reach the disk, and those of
// concurrent kills share one sync.
const killParallel = 16

// Run implements command.
func (*KillCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("kill", g)
	sig := fs.StringP("signal", "s", "", "send this signal instead (SIGKILL kills at once; others are just delivered)")
	labels := fs.StringArray("label", nil, "K=V: every job not yet ended with this label, instead of JOBs (repeatable: all must match)")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if *sig != "" {
		if _, err := protocol.ParseSignal(*sig); err != nil {
			return 0, &usageError{msg: err.Error()}
		}
	}
	var ids []string
	var unasked *client.PartialError // (kill --label: hosts that did not list)
	switch {
	case len(*labels) > 0 && fs.NArg() > 0:
		return 0, &usageError{msg: "give JOBs or --label, not both"}
	case len(*labels) > 0:
		want, err := kvs(*labels, "--label")
		if err != nil {
			return 0, err
		}
		if ids, err = labelled(ctx, g, want); err != nil && !errors.As(err, &unasked) {
			return 0, err
		}
		if len(ids) == 0 && unasked != nil {
			return g.hostsFailed("kill", unasked), nil
		}
		if len(ids) == 0 {
			fmt.Fprintf(g.stderr, "execctl kill: no job not yet ended has the labels %s\n", strings.Join(*labels, " "))
			return exitOK, nil
		}
	case fs.NArg() == 0 || slices.Contains(fs.Args(), ""):
		return 0, &usageError{msg: fmt.Sprintf("want one or more JOB arguments, got %q", fs.Args()), hint: "usage: kill JOB... or kill --label K=V (ids are shown by: execctl list)"}
	default:
		var err error
		if ids, err = g.resolveJobs(ctx, fs.Args(), false); err != nil {
			return 0, err
		}
	}
	// All at once (a few in flight at a time), reported in the order
	// given: many jobs end together, not one grace period after another.
	type result struct {
		res protocol.KillResult
		err error
	}
	results := make([]result, len(ids))
	var wg sync.WaitGroup
	slots := make(chan struct{}, killParallel)
	for i, id := range ids {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			results[i].res, results[i].err = g.on(id).Kill(ctx, id, *sig)
			results[i].err = g.hostErr(id, results[i].err)
		}()
	}
	wg.Wait()
	var first error
	failed := 0
	for i, r := range results {
		if r.err != nil {
			if first == nil {
				first = r.err
			} else {
				fmt.Fprintf(g.stderr, "execctl kill %s: %v\n", ids[i], r.err)
			}
			failed++
			continue
		}
		if err := printKillResult(g, ids[i], r.res); err != nil {
			return 0, err
		}
	}
	switch {
	case first == nil && unasked != nil:
		return g.hostsFailed("kill", unasked), nil
	case first == nil:
		return exitOK, nil
	case len(ids) == 1:
		return 0, first
	}
	fmt.Fprintf(g.stderr, "execctl kill: %d of %d kills failed; the first:\n", failed, len(ids))
	return 0, first
}

// labelled returns the ids of the jobs not yet ended that have every
// label of want (filtered here too: a supervisor older than the label
// filter lists every job). With several supervisors, a
// *client.PartialError names those that did not answer.
func labelled(ctx context.Context, g *globals, want map[string]string) ([]string, error) {
	var jobs []protocol.JobInfo
	var err error
	if g.pool != nil {
		jobs, _, err = g.listPool(ctx, protocol.ListJobsArgs{Labels: want})
	} else {
		jobs, err = g.client.ListJobs(ctx, protocol.ListJobsArgs{Labels: want})
	}
	var pe *client.PartialError
	if err != nil && !errors.As(err, &pe) {
		return nil, err
	}
	var ids []string
	for _, j := range jobs {
		if !j.Finished() && protocol.MatchLabels(want, j.Labels) {
			ids = append(ids, j.JobID)
		}
	}
	return ids, err
}
