package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func newFlags(name string, g *globals) *pflag.FlagSet {
	fs := pflag.NewFlagSet("execctl "+name, pflag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() {
		// A synopsis is "what it does: how to call it".
		what, how, ok := strings.Cut(commands[name].Synopsis(), ": ")
		if !ok { // (no arguments: the synopsis says what it does)
			how = name
		}
		fmt.Fprintf(g.stderr, "usage: execctl [global flags] %s\n", how)
		if what != "" {
			fmt.Fprintf(g.stderr, "%s\n", what)
		}
		if fl := fs.FlagUsages(); fl != "" {
			fmt.Fprintf(g.stderr, "\nflags:\n%s", fl)
		}
		if ex := examples[name]; ex != "" {
			fmt.Fprintf(g.stderr, "\nexamples:\n  %s\n", ex)
		}
		fmt.Fprintf(g.stderr, "\nGlobal flags (--json, --control, ...: see execctl --help) may be given here too.\n")
	}
	return fs
}

// oneJob returns the command's one JOB argument, resolved (see resolveJob).
func (g *globals) oneJob(ctx context.Context, fs *pflag.FlagSet) (string, error) {
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return "", &usageError{msg: fmt.Sprintf("want exactly one JOB argument, got %q", fs.Args()), hint: "usage: " + fs.Name() + " JOB (ids are shown by: execctl list)"}
	}
	return g.resolveJob(ctx, fs.Arg(0))
}

// resolveJob returns the job id that arg names: a job's id or its name
// (spawn --name), of a job in memory, else of a job no longer in memory
// whose output the supervisor keeps in files; only when none has it, an
// unambiguous prefix of the id of a job in memory (with or without its
// "j-"), as the ids execctl list shows. A name made of hex digits
// ("beef", "123") is a name first. A job no longer in memory is returned
// as arg names it (the op resolves it, among the files). A whole
// generated id is taken as it
// is (no round trip); anything else is asked of the supervisor, so that
// the commands that follow events (logs -f, wait) know the id their
// topics carry.
func (g *globals) resolveJob(ctx context.Context, arg string) (string, error) {
	ids, err := g.resolveJobs(ctx, []string{arg}, false)
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// resolveJobs is resolveJob for several (a status for each that is not a
// generated id, then a poll for each the status does not find, then a
// listing of the ids with that prefix for each that names no job whole). patient commands (wait, logs) give a supervisor
// that does not answer yet (one restarting) as long as they would for a
// whole id (firstReachFor).
func (g *globals) resolveJobs(ctx context.Context, args []string, patient bool) ([]string, error) {
	if g.pool != nil {
		return g.resolvePool(ctx, args, patient)
	}
	out := slices.Clone(args)
	for i, arg := range args {
		if fullJobID(arg) || arg == "" {
			continue
		}
		// A whole id or a name: the supervisor finds the job (its id
		// first, then its name; a job id chosen at spawn may look like an
		// abbreviation: "beef", "1234").
		info, err := patiently(ctx, patient, func() (protocol.JobInfo, error) { return g.client.Status(ctx, arg) })
		if err == nil {
			out[i] = info.JobID
			continue
		}
		if protocol.CodeOf(err) != protocol.CodeNotFound {
			return nil, err
		}
		// Not in memory: a job of that id or name in the supervisor's
		// files (poll reads them: a forgotten job), before any prefix.
		// The reference stays as given: the op resolves it again as it
		// must (remove refuses a name several forgotten jobs have, where
		// poll reads the newest), and logs maps it to the id it follows.
		if _, err := g.client.Poll(ctx, arg, 0, 1); err == nil {
			continue
		}
		digits := strings.TrimPrefix(jobPrefix(arg), "j-")
		if !hexDigits(digits) {
			continue // (not an id: the op says so)
		}
		if len(digits) < minPrefix {
			return nil, &usageError{msg: fmt.Sprintf("job %q: no job has that name or id; give at least %d characters of an id", arg, minPrefix), hint: "job ids and names are shown by: execctl list"}
		}
		// (the supervisor lists only the jobs with that prefix; one that
		// does not know idPrefix lists them all: matchJob filters anyway)
		jobs, err := patiently(ctx, patient, func() ([]protocol.JobInfo, error) {
			return g.client.ListJobs(ctx, protocol.ListJobsArgs{Brief: true, IDPrefix: jobPrefix(arg)})
		})
		if err != nil {
			return nil, err
		}
		id, err := matchJob(arg, jobs)
		if err != nil {
			return nil, err
		}
		out[i] = id
	}
	return out, nil
}

// patiently returns f's result; if patient, it calls f again while the
// supervisor cannot be reached, for up to firstReachFor (one restarting).
func patiently[T any](ctx context.Context, patient bool, f func() (T, error)) (T, error) {
	for start := time.Now(); ; {
		v, err := f()
		var ce *client.ConnectError
		if err == nil || !patient || !errors.As(err, &ce) || ctx.Err() != nil || time.Since(start) > firstReachFor {
			return v, err
		}
		select { // the supervisor may be restarting: ask again shortly
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// minPrefix is the shortest job id prefix taken (after "j-"): a shorter
// one is too easily someone else's job, for kill and remove.
const minPrefix = 4

// jobPrefix is the id prefix arg stands for: "j-" and hex digits, lower case.
func jobPrefix(arg string) string {
	prefix := strings.ToLower(arg)
	if !strings.HasPrefix(prefix, "j-") {
		prefix = "j-" + prefix
	}
	return prefix
}

// matchJob finds the one job of jobs whose id is arg or starts with it
// (hex digits in any case).
func matchJob(arg string, jobs []protocol.JobInfo) (string, error) {
	return matchPrefix(arg, jobPrefix(arg), jobs)
}

// matchPrefix finds the one job of jobs whose id is arg or starts with
// prefix.
func matchPrefix(arg, prefix string, jobs []protocol.JobInfo) (string, error) {
	var found []string
	for _, j := range jobs {
		if j.JobID == arg {
			return arg, nil // (an id of another shape, taken whole)
		}
		if strings.HasPrefix(j.JobID, prefix) {
			found = append(found, j.JobID)
		}
	}
	switch len(found) {
	case 0:
		return arg, nil // (the op says it is not found)
	case 1:
		return found[0], nil
	}
	shown := strings.Join(found, ", ")
	if len(found) > 5 {
		shown = strings.Join(found[:5], ", ") + ", ..."
	}
	return "", &usageError{msg: fmt.Sprintf("job %q is ambiguous: %d jobs start with it (%s)", arg, len(found), shown),
		hint: "give more of the id (execctl list shows them)"}
}

// fullJobID reports whether id has the shape of a job id ("j-" and 16 hex
// digits).
func fullJobID(id string) bool {
	return len(id) == 18 && strings.HasPrefix(id, "j-") && hexDigits(id[2:])
}

// hexDigits reports whether s is lowercase hex digits only.
func hexDigits(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// millis converts a duration flag to ms, refusing what would round to 0
// (0 means "the default": 500us must not become 10 minutes).
func millis(d time.Duration, flag string) (int64, error) {
	if d < 0 {
		return 0, &usageError{msg: flag + " must not be negative"}
	}
	if d > 0 && d < time.Millisecond {
		return 0, &usageError{msg: fmt.Sprintf("%s %v is below the protocol's 1ms resolution", flag, d)}
	}
	return d.Milliseconds(), nil
}
