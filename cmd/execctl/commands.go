package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// examples are shown by 'execctl COMMAND --help'.
var examples = map[string]string{
	"spawn": "execctl spawn --follow -- make test\n  execctl spawn --timeout 5m --no-output-timeout 30s --shell 'npm ci && npm test'\n  id=$(execctl spawn --pty -- python3 -i)\n" +
		"  execctl spawn --restart on-failure --max-restarts 0 --limit-nofile 4096 -- ./server --port 8080\n" +
		"  execctl spawn --restart always --restart-delay 500ms --notify --watchdog 30s --memory-max 512M -- ./daemon",
	"wait":      "execctl wait JOB1 JOB2; echo \"last exit: $?\"",
	"logs":      "execctl logs -f JOB1 JOB2",
	"kill":      "execctl kill JOB\n  execctl kill --signal SIGINT JOB",
	"write":     "execctl write JOB 'print(1+1)'\n  cat input.txt | execctl write --eof JOB -",
	"send-keys": "execctl send-keys JOB C-c\n  execctl send-keys JOB Up Enter",
	"status":    "execctl status JOB\n  execctl --json status JOB | jq .job.usage",
	"list":      "execctl list --state running",
	"start":     "execctl start JOB   # after restart-limit or stop; at once while it waits to restart",
	"restart":   "execctl restart JOB",
	"stop":      "execctl stop JOB",
	"history":   "execctl history --lines 5 JOB\n  execctl --json history JOB | jq '.runs[] | {attempt, reason, exitCode}'",
	"top":       "execctl top --interval 1s",
}

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

// resolveJob returns the job id that arg names: the id itself, or an
// unambiguous prefix of one (with or without its "j-"), as the ids execctl
// list shows. A whole id is taken as it is (no round trip).
func (g *globals) resolveJob(ctx context.Context, arg string) (string, error) {
	ids, err := g.resolveJobs(ctx, []string{arg}, false)
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// resolveJobs is resolveJob for several (a listing of the ids with that
// prefix for each that is not a whole id). patient
// commands (wait, logs) give a supervisor that does not answer yet (one
// restarting) as long as they would for a whole id (firstReachFor).
func (g *globals) resolveJobs(ctx context.Context, args []string, patient bool) ([]string, error) {
	out := slices.Clone(args)
	for i, arg := range args {
		digits := strings.TrimPrefix(jobPrefix(arg), "j-")
		if fullJobID(arg) || arg == "" || !hexDigits(digits) {
			continue // (not an id: the op says so)
		}
		if len(digits) < minPrefix {
			return nil, &usageError{msg: fmt.Sprintf("job %q: give at least %d characters of the id", arg, minPrefix), hint: "job ids are shown by: execctl list"}
		}
		// (the supervisor lists only the jobs with that prefix; one that
		// does not know idPrefix lists them all: matchJob filters anyway)
		var jobs []protocol.JobInfo
		for start, listed := time.Now(), false; !listed; {
			var err error
			jobs, err = g.client.ListJobs(ctx, protocol.ListJobsArgs{Brief: true, IDPrefix: jobPrefix(arg)})
			var ce *client.ConnectError
			switch {
			case err == nil:
				listed = true
			case !patient || !errors.As(err, &ce) || ctx.Err() != nil || time.Since(start) > firstReachFor:
				return nil, err
			default:
				select { // the supervisor may be restarting: ask again shortly
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		id, err := matchJob(arg, jobs)
		if err != nil {
			return nil, err
		}
		out[i] = id
	}
	return out, nil
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
	prefix := jobPrefix(arg)
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

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jsonEvent is an event as --json prints it: the wire's field names, the
// payload decoded to its fields (binary data, as output, in base64 as JSON
// has it).
type jsonEvent struct {
	JobID   string        `json:"jobId"`
	Seq     uint64        `json:"seq"`
	Ts      int64         `json:"ts"`
	Kind    protocol.Kind `json:"kind"`
	Attempt int           `json:"attempt,omitempty"`
	Payload any           `json:"payload,omitempty"`
}

func eventJSON(ev protocol.Event) jsonEvent {
	out := jsonEvent{JobID: ev.JobID, Seq: ev.Seq, Ts: ev.Ts, Kind: ev.Kind, Attempt: ev.Attempt}
	if len(ev.Payload) > 0 {
		var p map[string]any
		if ev.DecodePayload(&p) == nil {
			out.Payload = p
		}
	}
	return out
}

// gapNotice tells, on stderr, which of a job's events a follower did not
// get (their output is lost).
func gapNotice(g *globals, id string, ev protocol.Event) {
	var p protocol.GapPayload
	_ = ev.DecodePayload(&p)
	if p.Bytes > 0 {
		fmt.Fprintf(g.stderr, "execctl: [%s of %s's output lost: events %d..%d are no longer retained (the job printed faster than this follower read, past --ring-buffer)]\n", humanBytes(p.Bytes), id, p.From, p.To)
		return
	}
	fmt.Fprintf(g.stderr, "execctl: [events %d..%d of %s are missing (no longer retained, or not recorded before a supervisor crash): any output in them is lost]\n", p.From, p.To, id)
}

// lostExit is the exit code of a follow that ended with code but could
// not show all of the output: code, unless it says success.
func lostExit(g *globals, code int, lost bool) int {
	if code != exitOK || !lost {
		return code
	}
	return outputLost(g, "the job succeeded, but part of its output was lost")
}

// logsLostExit is logs -f's exit code: 5 when output was lost, whatever
// the jobs' ends (it does not report those).
func logsLostExit(g *globals, lost bool) int {
	if !lost {
		return exitOK
	}
	return outputLost(g, "part of the output was lost")
}

// outputLost reports exit code 5 (what says so: see above, or the gap
// events of --json).
func outputLost(g *globals, what string) int {
	if g.json {
		return g.fail(cliError{Code: codeOutputLost, Message: what + " (see the gap events)", ExitCode: exitOutputLost})
	}
	return g.fail(cliError{Code: codeOutputLost, Message: fmt.Sprintf("exit code %d: %s (see above)", exitOutputLost, what), ExitCode: exitOutputLost})
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

// SpawnCommand starts a job.
type SpawnCommand struct{}

// Synopsis implements command.
func (*SpawnCommand) Synopsis() string {
	return "start a job: spawn [--wait|--follow] [flags] -- CMD ARGS... (or --shell 'CMD')"
}

// Run implements command.
func (*SpawnCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("spawn", g)
	fs.SetInterspersed(false)
	wait := fs.Bool("wait", false, "wait for the job to end; exit with its exit code")
	follow := fs.BoolP("follow", "f", false, "stream the job's output live; exit with its exit code")
	timeout := fs.Duration("timeout", 0, "overall timeout (default: the supervisor's --default-timeout)")
	noOut := fs.Duration("no-output-timeout", 0, "kill the job after this long without output (default: none)")
	grace := fs.Duration("grace", 0, "SIGTERM-to-SIGKILL grace (default: the supervisor's --grace)")
	cwd := fs.String("cwd", "", "working directory")
	env := fs.StringArray("env", nil, "K=V added to the environment (repeatable)")
	clearEnv := fs.Bool("clear-env", false, "start from an empty environment instead of the supervisor's (the job still gets EXEC_SUPERVISOR_JOB_ID and EXEC_SUPERVISOR_STATE_ID)")
	shell := fs.String("shell", "", "run this command string with /bin/sh -c")
	labels := fs.StringArray("label", nil, "K=V label (repeatable)")
	session := fs.String("session", "", "session id to group jobs")
	usePty := fs.Bool("pty", false, "run on a pseudo-terminal (drive it with write, send-keys, resize)")
	rows := fs.Int("rows", 0, "terminal rows with --pty (default 24)")
	cols := fs.Int("cols", 0, "terminal columns with --pty (default 80)")
	stdin := fs.Bool("stdin", false, "keep the job's stdin open for 'execctl write' (default: /dev/null)")
	noPace := fs.Bool("no-pace", false, "with --follow: do not hold the job to execctl's pace (output it prints faster than execctl shows it may be lost)")
	svc := serviceFlags(fs)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if *wait && *follow {
		return 0, &usageError{msg: "--wait and --follow do not go together", hint: "--follow streams the output and waits; --wait waits without it"}
	}
	if *noPace && !*follow {
		return 0, &usageError{msg: "--no-pace is for --follow"}
	}
	a := protocol.SpawnArgs{Argv: fs.Args(), Shell: *shell, Cwd: *cwd, SessionID: *session}
	var err error
	if a.TimeoutMs, err = millis(*timeout, "--timeout"); err != nil {
		return 0, err
	}
	if a.NoOutputTimeoutMs, err = millis(*noOut, "--no-output-timeout"); err != nil {
		return 0, err
	}
	if a.GraceMs, err = millis(*grace, "--grace"); err != nil {
		return 0, err
	}
	if a.Cwd != "" && !filepath.IsAbs(a.Cwd) && strings.HasPrefix(g.client.Options().ControlAddress, "ipc://") {
		// The supervisor runs elsewhere (its own working directory): a
		// relative --cwd means the operator's, on this machine.
		if a.Cwd, err = filepath.Abs(a.Cwd); err != nil {
			return 0, &usageError{msg: "--cwd: " + err.Error()}
		}
	}
	if *shell != "" && len(a.Argv) > 0 {
		return 0, &usageError{msg: "give a command after -- or --shell, not both"}
	}
	if *shell == "" && len(a.Argv) == 0 {
		return 0, &usageError{msg: "no command given", hint: "execctl spawn -- echo hello   or   execctl spawn --shell 'echo hello'"}
	}
	if err = svc.apply(fs, &a); err != nil {
		return 0, err
	}
	if a.Env, err = kvs(*env, "--env"); err != nil {
		return 0, err
	}
	if a.Labels, err = kvs(*labels, "--label"); err != nil {
		return 0, err
	}
	if *clearEnv {
		a.EnvMode = protocol.EnvReplace
	}
	a.Stdin = *stdin
	// Following, the job waits for execctl as a command waits for its
	// terminal: nothing it prints is lost to the ring buffer.
	a.Pace = *follow && !*noPace
	if *usePty {
		a.Pty = &protocol.PtyArgs{Rows: *rows, Cols: *cols}
	} else if fs.Changed("rows") || fs.Changed("cols") {
		return 0, &usageError{msg: "--rows and --cols are for --pty jobs", hint: "execctl spawn --pty --rows 40 --cols 120 -- bash"}
	}
	// The job's id comes back at once, --wait or not (not with the job's
	// end, in a spawn's held reply): a supervisor that restarts while the
	// job runs is asked about it by id, and whatever goes wrong names it.
	// (The price: a job that ends at once can be forgotten before the wait
	// asks, when retention is tight and many jobs end at once; said so.)
	job, err := spawnJob(ctx, g, a)
	if pe := (*protocol.Error)(nil); errors.As(err, &pe) && pe.Code == protocol.CodeSpawnError && (*wait || *follow) {
		// The job exists and failed: report it like any other job end.
		return g.fail(cliError{Code: string(pe.Code), Message: pe.Message, ExitCode: 127, Command: "spawn", wire: true}), nil
	}
	if err != nil {
		return 0, err
	}
	switch {
	case *follow || *wait:
		var code int
		switch {
		case ctx.Err() != nil: // (interrupted during the spawn)
			err = ctx.Err()
		case *follow:
			code, err = followJob(ctx, g, job.JobID, a.Pace)
		default: // (through the wait op: no event socket needed)
			code, err = waitEnd(ctx, g, job.JobID, true)
			if protocol.CodeOf(err) == protocol.CodeNotFound {
				err = fmt.Errorf("job %s ended and was forgotten before its end could be read: finished jobs are kept within --max-finished-jobs and --max-finished-output, too small for this load (%w)", job.JobID, err)
			}
			if err == nil && code != exitOK && !g.json {
				// (its id, for a look at what went wrong: --wait shows no output)
				fmt.Fprintf(g.stderr, "execctl: job %s: exit code %d (its output: execctl poll %s)\n", job.JobID, code, job.JobID)
			}
		}
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			// Interrupted (Ctrl-C): the job is the supervisor's, and goes on.
			return g.fail(cliError{Code: codeInterrupted, Message: fmt.Sprintf("interrupted; job %s keeps running (stop it with: execctl kill %s)", job.JobID, job.JobID), ExitCode: exitInterrupted}), nil
		}
		return code, err
	case g.json:
		return exitOK, printJSON(g.stdout, protocol.SpawnResult{JobID: job.JobID, Job: job})
	}
	fmt.Fprintln(g.stdout, job.JobID)
	return exitOK, nil
}

// spawnJob starts a job. A Ctrl-C meanwhile still waits for the reply
// (for up to spawnReplyGrace): it names the job, which runs on.
func spawnJob(ctx context.Context, g *globals, a protocol.SpawnArgs) (protocol.JobInfo, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(spawnReplyGrace)
		defer t.Stop()
		select {
		case <-sctx.Done():
		case <-t.C:
			cancel()
		}
	})
	defer stop()
	return g.client.Spawn(sctx, a)
}

// spawnReplyGrace bounds how long an interrupted spawn waits for its reply.
const spawnReplyGrace = time.Second

func kvs(list []string, flag string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, &usageError{msg: fmt.Sprintf("%s %q: want KEY=VALUE", flag, kv), hint: "e.g. " + flag + " FOO=bar (repeat the flag for more)"}
		}
		m[k] = v
	}
	return m, nil
}

// followJob streams a job's events, printing its output, and returns the
// exit code that mirrors the job's end.
func followJob(ctx context.Context, g *globals, id string, paced bool) (int, error) {
	var final protocol.ExitPayload
	var mu sync.Mutex
	lost := false
	next := uint64(1)
	err := followOn(ctx, g, id, &next, paced, func(ev protocol.Event) error {
		mu.Lock()
		defer mu.Unlock()
		lost = lost || ev.Kind == protocol.KindGap
		if ev.Kind.Terminal() {
			if err := ev.DecodePayload(&final); err != nil {
				return err
			}
		}
		if g.json {
			return printJSON(g.stdout, eventJSON(ev))
		}
		switch ev.Kind {
		case protocol.KindStdout, protocol.KindStderr:
			var p protocol.OutputPayload
			if err := ev.DecodePayload(&p); err != nil {
				return err
			}
			w := g.stdout
			if ev.Kind == protocol.KindStderr {
				w = g.stderr
			}
			_, err := w.Write(p.Data)
			return err
		case protocol.KindGap:
			gapNotice(g, id, ev)
		case protocol.KindRestarting:
			var p protocol.RestartingPayload
			if err := ev.DecodePayload(&p); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "execctl: job %s: run %d ended: %s; attempt %d starts in %s\n",
				id, p.Attempt, runEnd(p.Reason, p.ExitCode, p.Signal), p.NextAttempt, humanDuration(msDuration(p.DelayMs)))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("following job %s: %w", id, err)
	}
	return lostExit(g, exitCodeOf(final, g, id), lost), nil
}

// followOn is client.Follow from *next on (advanced past every event
// delivered), going on across a supervisor that is restarting: execctl's
// client gives up on a connection at once (a missing supervisor is
// reported quickly), so the follow is resumed for up to reconnectFor.
func followOn(ctx context.Context, g *globals, id string, next *uint64, paced bool, fn client.FollowFunc) error {
	var opts []client.FollowOption
	if paced {
		opts = append(opts, client.Paced())
	}
	var lost time.Time
	// Output is shown once per offset: a restarted supervisor publishes
	// again, under new seqs, output its journal held as not yet published
	// (which the dead one may have published too), and a Follow begun
	// after the restart cannot know what the previous one delivered.
	var once client.OutputOnce
	for {
		err := g.client.Follow(ctx, id, *next, func(ev protocol.Event) error {
			ev, keep := once.Keep(ev)
			if !keep {
				*next = max(*next, ev.Seq+1)
				return nil
			}
			if err := fn(ev); err != nil {
				return err
			}
			if ev.Seq >= *next {
				*next = ev.Seq + 1
			}
			return nil
		}, opts...)
		var ce *client.ConnectError
		switch {
		case err == nil || !errors.As(err, &ce) || ctx.Err() != nil:
			return err
		case lost.IsZero():
			lost = time.Now()
		case time.Since(lost) > reconnectFor:
			return err
		}
		select { // the supervisor is restarting: follow again shortly
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// exitCodeOf maps a job's end to execctl's exit code: its own exit code;
// 128+N for death by signal N; 124 for timeouts; 127 for spawn errors.
func exitCodeOf(p protocol.ExitPayload, g *globals, id string) int {
	if p.Reason != protocol.ReasonExit && !g.json {
		msg := fmt.Sprintf("execctl: job %s ended: %s", id, p.Reason)
		if p.Signal != "" {
			msg += " (" + p.Signal + ")"
		}
		if p.Error != "" {
			msg += ": " + p.Error
		}
		fmt.Fprintln(g.stderr, msg)
	}
	switch {
	case p.Reason == protocol.ReasonSpawnError:
		return 127
	case p.Reason == protocol.ReasonOverallTimeout || p.Reason == protocol.ReasonNoOutputTimeout:
		return 124
	case p.Reason == protocol.ReasonRestartLimit && p.ExitCode != nil && *p.ExitCode == 0:
		return 1 // (gave up on a service whose runs exit 0 under "always": not a success)
	case p.ExitCode != nil:
		return *p.ExitCode
	case p.Signal != "":
		if sig, err := protocol.ParseSignal(p.Signal); err == nil {
			return 128 + int(sig)
		}
		return 128 + int(syscall.SIGKILL) // (a signal this execctl does not know by name)
	case p.Reason == protocol.ReasonSupervisorRestart || p.Reason == protocol.ReasonShutdown:
		// (its supervisor went away: the process was terminated, or its
		// fate is unknown)
		return 128 + int(syscall.SIGKILL)
	}
	// Ended without an exit status of its own: a service stopped, or at its
	// restart limit, between runs (no process was killed: not 137).
	return 1
}

// PollCommand prints retained output.
type PollCommand struct{}

// Synopsis implements command.
func (*PollCommand) Synopsis() string { return "print a job's retained output: poll JOB [--cursor N]" }

// Run implements command.
func (*PollCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("poll", g)
	cursor := fs.Int64("cursor", 0, "byte offset into the job's combined output to start from")
	maxB := fs.Int64("max-bytes", 0, "most bytes to fetch (default: the protocol maximum)")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if *cursor < 0 || *maxB < 0 {
		return 0, &usageError{msg: "--cursor and --max-bytes must not be negative", hint: "a cursor is a byte offset, from 0 (the next one is printed after each poll)"}
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	res, err := g.client.Poll(ctx, id, *cursor, *maxB)
	if err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, res)
	}
	if res.LostBytes > 0 {
		fmt.Fprintf(g.stderr, "execctl: %d bytes before offset %d are no longer retained\n", res.LostBytes, res.Job.RetainedFrom)
	}
	if res.CrashGap {
		fmt.Fprintf(g.stderr, "execctl: %s\n", crashGapNote)
	}
	for _, c := range res.Chunks {
		w := g.stdout
		if c.Stream == protocol.Stderr {
			w = g.stderr
		}
		_, _ = w.Write(c.Data)
	}
	if res.More {
		fmt.Fprintf(g.stderr, "execctl: more output follows; continue with --cursor %d\n", res.Next)
	}
	return exitOK, nil
}

// LogsCommand prints or follows the output of one or more jobs.
type LogsCommand struct{}

// Synopsis implements command.
func (*LogsCommand) Synopsis() string {
	return "print output of jobs, prefixed by job id: logs [-f] JOB..."
}

// Run implements command.
func (*LogsCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("logs", g)
	follow := fs.BoolP("follow", "f", false, "keep streaming until every job ended")
	pace := fs.Bool("pace", false, "with -f: hold the jobs to this follower's pace, so that none of their output is lost to the ring buffer (they wait for it; a follower that stops reading is let go after the supervisor's --pace-stall-limit, 2m by default)")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() == 0 {
		return 0, &usageError{msg: "want at least one JOB", hint: "execctl logs -f JOB1 JOB2"}
	}
	if *pace && !*follow {
		return 0, &usageError{msg: "--pace is for -f"}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, fs.NArg())
	color := useColor(g.stdout)
	ids, err := g.resolveJobs(ctx, fs.Args(), true)
	if err != nil {
		return 0, err
	}
	// Each job once, and every one of them known before any is shown.
	seen := map[string]bool{}
	ids = slices.DeleteFunc(ids, func(id string) bool {
		dup := seen[id]
		seen[id] = true
		return dup
	})
	for _, id := range ids {
		// (a supervisor not answering now is waited for by the follow,
		// which rides out a restart)
		var ce *client.ConnectError
		if _, err := g.client.Status(ctx, id); err != nil && !errors.As(err, &ce) {
			return 0, err
		}
	}
	var lost atomic.Bool
	for i, id := range ids {
		wg.Add(1)
		show := func() {
			defer wg.Done()
			prefix := id + " | "
			if color {
				// One color per job, only for a terminal (see useColor).
				prefix = fmt.Sprintf("\x1b[%dm%s\x1b[0m | ", 31+i%6, id)
			}
			lw := &lineWriter{prefix: prefix, mu: &mu}
			if !*follow {
				for cursor := int64(0); ; {
					res, err := g.client.Poll(ctx, id, cursor, 0)
					if err != nil {
						errs[i] = err
						return
					}
					if res.LostBytes > 0 && cursor == 0 {
						fmt.Fprintf(g.stderr, "execctl: [the first %s of %s's output are no longer retained]\n", humanBytes(res.LostBytes), id)
					} else if res.LostBytes > 0 {
						fmt.Fprintf(g.stderr, "execctl: [%s of %s's output are no longer retained here]\n", humanBytes(res.LostBytes), id)
					}
					if res.CrashGap {
						lw.flush(g.stdout)
						fmt.Fprintf(g.stderr, "execctl: [%s: %s]\n", id, crashGapNote)
					}
					for _, c := range res.Chunks {
						if g.json {
							mu.Lock()
							_ = printJSON(g.stdout, jsonChunk{JobID: id, Chunk: c})
							mu.Unlock()
						} else {
							lw.write(g.stdout, c.Data)
						}
					}
					if !res.More {
						break
					}
					cursor = res.Next
				}
				lw.flush(g.stdout)
				return
			}
			errs[i] = followPeriods(ctx, g, id, *pace, func(ev protocol.Event) error {
				if ev.Kind == protocol.KindGap {
					lost.Store(true)
				}
				if g.json {
					mu.Lock()
					defer mu.Unlock()
					return printJSON(g.stdout, eventJSON(ev))
				}
				if ev.Kind == protocol.KindGap {
					lw.flush(g.stdout)
					gapNotice(g, id, ev)
				}
				if ev.Kind == protocol.KindStdout || ev.Kind == protocol.KindStderr {
					var p protocol.OutputPayload
					if err := ev.DecodePayload(&p); err != nil {
						return err
					}
					lw.write(g.stdout, p.Data)
				}
				if ev.Kind == protocol.KindRestarting {
					lw.flush(g.stdout)
					var p protocol.RestartingPayload
					_ = ev.DecodePayload(&p)
					mu.Lock()
					fmt.Fprintf(g.stdout, "%s[run %d ended: %s; restarting in %s]\n", lw.prefix, p.Attempt, runEnd(p.Reason, p.ExitCode, p.Signal), humanDuration(msDuration(p.DelayMs)))
					mu.Unlock()
				}
				if ev.Kind.Terminal() {
					lw.flush(g.stdout)
					var p protocol.ExitPayload
					_ = ev.DecodePayload(&p)
					mu.Lock()
					fmt.Fprintf(g.stdout, "%s[ended: %s]\n", lw.prefix, runEnd(p.Reason, p.ExitCode, p.Signal))
					mu.Unlock()
				}
				return nil
			})
		}
		if *follow {
			go show() // (jobs followed at once, interleaved)
		} else {
			show() // (one job after the other, in the order given)
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return exitInterrupted, nil // (Ctrl-C: the way to stop following)
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return logsLostExit(g, lost.Load()), nil
}

// jsonChunk is a chunk of output as logs --json prints it: the wire's
// fields, and whose it is.
type jsonChunk struct {
	JobID string `json:"jobId"`
	protocol.Chunk
}

// followPeriods follows a job from its first event like client.Follow,
// and on past a terminal event when the job went on after it: a service
// started again once its supervision ended has several in its sequence.
func followPeriods(ctx context.Context, g *globals, id string, paced bool, fn client.FollowFunc) error {
	from := uint64(1)
	for {
		var end uint64
		err := followOn(ctx, g, id, &from, paced, func(ev protocol.Event) error {
			if ev.Kind.Terminal() {
				end = ev.Seq
			}
			return fn(ev)
		})
		if err != nil || end == 0 {
			return err
		}
		info, err := g.client.Status(ctx, id)
		if err != nil {
			return err
		}
		if info.Finished() && info.LastSeq <= end {
			return nil
		}
		from = end + 1
	}
}

// lineWriter prefixes whole lines so interleaved jobs stay readable.
type lineWriter struct {
	prefix string
	buf    []byte
	mu     *sync.Mutex
}

func (l *lineWriter) write(w io.Writer, p []byte) {
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			return
		}
		l.mu.Lock()
		fmt.Fprintf(w, "%s%s\n", l.prefix, l.buf[:i])
		l.mu.Unlock()
		l.buf = l.buf[i+1:]
	}
}

func (l *lineWriter) flush(w io.Writer) {
	if len(l.buf) > 0 {
		l.mu.Lock()
		fmt.Fprintf(w, "%s%s\n", l.prefix, l.buf)
		l.mu.Unlock()
		l.buf = nil
	}
}

// KillCommand terminates a job.
type KillCommand struct{}

// Synopsis implements command.
func (*KillCommand) Synopsis() string {
	return "terminate a job (SIGTERM, grace, SIGKILL) or signal it: kill JOB [--signal SIG]"
}

// Run implements command.
func (*KillCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("kill", g)
	sig := fs.StringP("signal", "s", "", "send this signal instead (SIGKILL kills at once; others are just delivered)")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if *sig != "" {
		if _, err := protocol.ParseSignal(*sig); err != nil {
			return 0, &usageError{msg: err.Error()}
		}
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	res, err := g.client.Kill(ctx, id, *sig)
	if err != nil {
		return 0, err
	}
	return exitOK, printKillResult(g, id, res)
}

// printKillResult prints the result of kill or stop.
func printKillResult(g *globals, id string, res protocol.KillResult) error {
	if g.json {
		return printJSON(g.stdout, res)
	}
	if res.AlreadyFinished {
		fmt.Fprintf(g.stdout, "%s had already ended (%s)\n", id, res.Job.Reason)
	} else {
		fmt.Fprintf(g.stdout, "%s %s\n", id, res.Job.State)
	}
	return nil
}

// StatusCommand shows one job, or all.
type StatusCommand struct{}

// Synopsis implements command.
func (*StatusCommand) Synopsis() string { return "show a job in detail (or all jobs): status [JOB]" }

// Run implements command.
func (*StatusCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("status", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() == 0 {
		return listJobs(ctx, g, protocol.ListJobsArgs{})
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	info, err := g.client.Status(ctx, id)
	if err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, protocol.StatusResult{Job: &info})
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("job", info.JobID)
	row("state", info.State)
	row("command", commandLine(info))
	if info.Cwd != "" {
		row("cwd", info.Cwd)
	}
	row("pid", info.Pid)
	if info.Ownership != "" {
		row("ownership", info.Ownership)
	}
	if info.Pty {
		t := fmt.Sprintf("pty %dx%d", info.Rows, info.Cols)
		if info.BracketedPaste {
			t += ", bracketed paste on"
		}
		row("terminal", t)
	}
	row("created", fmtTime(info.CreatedAt))
	row("started", fmtTime(info.StartedAt))
	if info.Finished() {
		row("ended", fmtTime(info.EndedAt))
		row("reason", info.Reason)
		if info.ExitCode != nil {
			row("exit code", *info.ExitCode)
		}
		if info.Signal != "" {
			row("signal", info.Signal)
		}
		if info.Error != "" {
			row("error", info.Error)
		}
	}
	row("runtime", runtime(info))
	serviceRows(row, info)
	if u := info.Usage; u != nil {
		row("usage", fmt.Sprintf("%d processes, RSS %s, CPU %s (%.0f%%)", u.Processes, humanBytes(u.RSSBytes), humanDuration(time.Duration(u.CPUSeconds*float64(time.Second))), u.CPUPercent))
	}
	row("output", fmt.Sprintf("%d bytes stdout, %d bytes stderr (retained from offset %d)", info.StdoutBytes, info.StderrBytes, info.RetainedFrom))
	if info.OutputHeld {
		row("output held", "not read until the supervisor's journal can be written (disk full? see its log); the job waits on its output")
	}
	if info.OutputPaced {
		row("output paced", "waiting for a client that paces it (spawn --follow, logs -f --pace) to take its output")
	}
	row("timeouts", fmt.Sprintf("overall %v, no-output %v", noneIfZero(info.TimeoutMs), noneIfZero(info.NoOutputTimeoutMs)))
	if len(info.Labels) > 0 {
		keys := make([]string, 0, len(info.Labels))
		for k := range info.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, k+"="+info.Labels[k])
		}
		row("labels", strings.Join(parts, " "))
	}
	return exitOK, tw.Flush()
}

func noneIfZero(ms int64) string {
	if ms == 0 {
		return "none"
	}
	return humanDuration(msDuration(ms))
}

func fmtTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Format("2006-01-02 15:04:05.000")
}

func runtime(j protocol.JobInfo) string {
	if j.StartedAt == 0 {
		return "-"
	}
	end := j.EndedAt
	if end == 0 {
		end = time.Now().UnixMilli()
	}
	return humanDuration(msDuration(end - j.StartedAt))
}

func commandLine(j protocol.JobInfo) string {
	s := j.Shell
	if s == "" {
		s = strings.Join(j.Argv, " ")
	}
	if s == "" {
		s = "-" // (list --brief)
	}
	// One line, whatever the command holds (a shell script's newlines
	// and tabs broke the table's rows and columns).
	s = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// ListCommand lists jobs.
type ListCommand struct{}

// Synopsis implements command.
func (*ListCommand) Synopsis() string { return "list jobs: list [--state S] [--session ID] [--brief]" }

// Run implements command.
func (*ListCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("list", g)
	state := fs.String("state", "", "only jobs in this state (starting, running, exiting, restarting, exited)")
	session := fs.String("session", "", "only jobs of this session")
	brief := fs.Bool("brief", false, "without the jobs' commands, cwd and labels (much less to transfer when commands are long)")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	switch protocol.State(*state) {
	case "", protocol.StateStarting, protocol.StateRunning, protocol.StateExiting, protocol.StateRestarting, protocol.StateExited:
	default:
		return 0, &usageError{msg: fmt.Sprintf("--state %q: want starting, running, exiting, restarting or exited", *state)}
	}
	return listJobs(ctx, g, protocol.ListJobsArgs{State: protocol.State(*state), SessionID: *session, Brief: *brief})
}

// listJobs lists every job a selects, page after page (a supervisor sends
// a long listing in pages of about protocol.MaxListBytes).
func listJobs(ctx context.Context, g *globals, a protocol.ListJobsArgs) (int, error) {
	jobs, err := g.client.ListJobs(ctx, a)
	if err != nil {
		return 0, err
	}
	if g.json {
		if jobs == nil {
			jobs = []protocol.JobInfo{}
		}
		return exitOK, printJSON(g.stdout, protocol.ListJobsResult{Jobs: jobs})
	}
	return exitOK, printJobTable(g, jobs)
}

// printJobTable prints jobs as an aligned table.
func printJobTable(g *globals, jobs []protocol.JobInfo) error {
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tPID\tRUNTIME\tCPU\tRSS\tREASON\tEXIT\tOUTPUT\tCOMMAND")
	for _, j := range jobs {
		exit := "-"
		if j.ExitCode != nil {
			exit = fmt.Sprint(*j.ExitCode)
		} else if j.Signal != "" {
			exit = j.Signal
		}
		reason := string(j.Reason)
		if reason == "" {
			reason = "-"
		}
		cpu, rss := "-", "-"
		if u := j.Usage; u != nil {
			cpu, rss = fmt.Sprintf("%.0f%%", u.CPUPercent), humanBytes(u.RSSBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.JobID, j.State, j.Pid, runtime(j), cpu, rss, reason, exit, humanBytes(j.StdoutBytes+j.StderrBytes), commandLine(j))
	}
	return tw.Flush()
}

// RemoveCommand forgets a finished job.
type RemoveCommand struct{}

// Synopsis implements command.
func (*RemoveCommand) Synopsis() string { return "forget a finished job: remove JOB" }

// Run implements command.
func (*RemoveCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("remove", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	if err := g.client.Remove(ctx, id); err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, protocol.RemoveResult{JobID: id})
	}
	fmt.Fprintf(g.stdout, "%s removed\n", id)
	return exitOK, nil
}

// HealthCommand checks the supervisor.
type HealthCommand struct{}

// Synopsis implements command.
func (*HealthCommand) Synopsis() string { return "check that the supervisor answers" }

// Run implements command.
func (*HealthCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("health", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	h, err := g.client.Health(ctx)
	if err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, h)
	}
	status := "ok"
	if !h.OK {
		status = "draining"
	}
	fmt.Fprintf(g.stdout, "%s: exec-supervisor %s (protocol %d), instance %s, pid %d, up %s, %d/%d jobs running, %d known\n",
		status, h.Version, h.Protocol, h.InstanceID, h.Pid, humanDuration(msDuration(h.UptimeMs)), h.ActiveJobs, h.MaxJobs, h.TotalJobs)
	if !h.Cgroups && h.CgroupsNote != "" {
		fmt.Fprintf(g.stdout, "no cgroup per job (%s): process groups only\n", h.CgroupsNote)
	}
	if h.JournalError != "" {
		fmt.Fprintf(g.stdout, "JOURNAL FAILING, %s: a crash now would be recovered from an older record of the jobs (see its log; disk full?)\n", h.JournalError)
	}
	if !h.OK || h.JournalError != "" {
		return exitFailed, nil
	}
	return exitOK, nil
}

// WriteCommand sends input to a job.
type WriteCommand struct{}

// Synopsis implements command.
func (*WriteCommand) Synopsis() string {
	return "send input to a job's stdin or terminal: write JOB DATA|- [--eof] [--no-newline]"
}

// Run implements command.
func (*WriteCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("write", g)
	eof := fs.Bool("eof", false, "then close stdin (pipe jobs) or send Ctrl-D (pty jobs)")
	raw := fs.BoolP("no-newline", "n", false, "do not append a newline (Enter, \\r, for a pty job) to DATA")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return 0, &usageError{msg: "want JOB and DATA (or - to read standard input)", hint: "execctl write JOB 'ls -l'   or   echo hi | execctl write JOB -"}
	}
	if fs.NArg() == 1 && !*eof {
		return 0, &usageError{msg: "nothing to write", hint: "give DATA, - for standard input, or --eof"}
	}
	id, err := g.resolveJob(ctx, fs.Arg(0))
	if err != nil {
		return 0, err
	}
	var data []byte
	switch {
	case fs.NArg() == 2 && fs.Arg(1) == "-":
		return writeStdin(ctx, g, id, *eof)
	case fs.NArg() == 2:
		data = []byte(fs.Arg(1))
		if !*raw {
			// Enter, as a terminal sends it, for a PTY job (a program
			// reading its terminal raw tells Ctrl-J from Enter); a line's
			// end for a pipe.
			nl := byte('\n')
			if st, err := g.client.Status(ctx, id); err == nil && st.Pty {
				nl = '\r'
			}
			data = append(data, nl)
		}
	}
	res, err := g.client.Write(ctx, id, data, *eof)
	if err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, res)
	}
	return exitOK, nil
}

// writeStdin sends standard input to job id in writes of at most
// protocol.MaxWriteBytes each, in order (one at a time), then eof with the
// last.
func writeStdin(ctx context.Context, g *globals, id string, eof bool) (int, error) {
	buf := make([]byte, protocol.MaxWriteBytes)
	var total int
	var last protocol.WriteResult
	for {
		n, rerr := io.ReadFull(g.stdin, buf)
		end := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
		if rerr != nil && !end {
			return 0, fmt.Errorf("read standard input: %w", rerr)
		}
		if n > 0 || (end && eof) {
			res, err := g.client.Write(ctx, id, buf[:n], end && eof)
			if err != nil {
				if total > 0 {
					return 0, fmt.Errorf("after %d bytes written: %w", total, err)
				}
				return 0, err
			}
			total += res.Written
			last = res
		}
		if end {
			break
		}
	}
	if g.json {
		last.Written = total
		return exitOK, printJSON(g.stdout, last)
	}
	return exitOK, nil
}

// SendKeysCommand sends named keys to a PTY job.
type SendKeysCommand struct{}

// Synopsis implements command.
func (*SendKeysCommand) Synopsis() string {
	return "send keys to a pty job: send-keys JOB KEY... (Enter, Tab, Up, C-c, F1, ...)"
}

// Run implements command.
func (*SendKeysCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("send-keys", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() < 2 {
		return 0, &usageError{msg: "want JOB and at least one KEY", hint: "execctl send-keys JOB C-c   (keys: Enter Tab Shift-Tab Escape Up Down Left Right Home End PageUp PageDown Delete Backspace F1..F12 C-a..C-z C-\\ C-] ..., M-x or Alt-x, any single character)"}
	}
	var data []byte
	for _, k := range fs.Args()[1:] {
		b, err := client.KeyBytes(k)
		if err != nil {
			return 0, &usageError{msg: err.Error()}
		}
		data = append(data, b...)
	}
	id, err := g.resolveJob(ctx, fs.Arg(0))
	if err != nil {
		return 0, err
	}
	res, err := g.client.Write(ctx, id, data, false)
	if err != nil {
		return 0, err
	}
	if g.json { // (the write op's result, as execctl write prints it)
		return exitOK, printJSON(g.stdout, res)
	}
	return exitOK, nil
}

// ResizeCommand resizes a PTY job's terminal.
type ResizeCommand struct{}

// Synopsis implements command.
func (*ResizeCommand) Synopsis() string { return "resize a pty job's terminal: resize JOB ROWS COLS" }

// Run implements command.
func (*ResizeCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("resize", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() != 3 {
		return 0, &usageError{msg: "want JOB ROWS COLS", hint: "execctl resize JOB 40 120"}
	}
	// (strconv, not fmt.Sscan: "40abc" and "0x20" were taken)
	r, err := strconv.Atoi(fs.Arg(1))
	if err != nil || r < 1 || r > protocol.MaxTermSize {
		return 0, &usageError{msg: fmt.Sprintf("ROWS %q must be a number in 1..%d", fs.Arg(1), protocol.MaxTermSize)}
	}
	c, err := strconv.Atoi(fs.Arg(2))
	if err != nil || c < 1 || c > protocol.MaxTermSize {
		return 0, &usageError{msg: fmt.Sprintf("COLS %q must be a number in 1..%d", fs.Arg(2), protocol.MaxTermSize)}
	}
	id, err := g.resolveJob(ctx, fs.Arg(0))
	if err != nil {
		return 0, err
	}
	var res protocol.StatusResult // (the resize op's result: {job})
	if err := g.client.Call(ctx, protocol.OpResize, &protocol.ResizeArgs{JobID: id, Rows: r, Cols: c}, &res); err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, res)
	}
	return exitOK, nil
}

// crashGapNote explains a poll's crashGap: output may be missing here.
const crashGapNote = "output may be missing here: the supervisor crashed, and what it had read of this job since its last journal write is lost (how much is unknown)"

// WaitCommand waits for jobs to end.
type WaitCommand struct{}

// Synopsis implements command.
func (*WaitCommand) Synopsis() string {
	return "wait for jobs to end: wait JOB... (exit code: the last job's, as with spawn --wait)"
}

// Run implements command.
func (*WaitCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("wait", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() == 0 {
		return 0, &usageError{msg: "want at least one JOB", hint: "execctl wait JOB1 JOB2"}
	}
	code, reached := exitOK, false
	ids, err := g.resolveJobs(ctx, fs.Args(), true)
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		c, err := waitEnd(ctx, g, id, reached)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return exitInterrupted, nil // (Ctrl-C: the jobs go on)
		}
		if err != nil {
			return 0, err
		}
		code, reached = c, true
	}
	return code, nil
}

// waitEnd waits for job id to end through the wait op (no event socket
// needed; a wait that runs out is renewed) and returns its exit code (as
// followJob). A supervisor that goes away meanwhile is waited for up to
// reconnectFor: one that restarts knows the job from its journal (and
// ended it, if it was running when the supervisor died). Until a
// supervisor was reached (reached: it answered, or took a request here
// before), only for firstReachFor: there is probably none.
func waitEnd(ctx context.Context, g *globals, id string, reached bool) (int, error) {
	var lost time.Time
	// shutdownEnd is the end (endedAt) of the last supervisor-shutdown
	// waited through: reported again, the service was not resumed.
	var shutdownEnd int64
	for {
		job, finished, err := g.client.Wait(ctx, id, protocol.MaxWaitMs*time.Millisecond)
		var ce *client.ConnectError
		switch {
		case err == nil && finished && job.Restart != "" && job.Reason == protocol.ReasonShutdown && job.EndedAt != shutdownEnd:
			// A service its supervisor's shutdown ended goes on under the
			// next one (--resume-services): wait for it and ask it (each
			// time: a later shutdown too).
			shutdownEnd = job.EndedAt
			if awaitNextSupervisor(ctx, g) {
				lost, reached = time.Time{}, true
				continue
			}
			return waitEnded(g, id, job)
		case err == nil && finished:
			return waitEnded(g, id, job)
		case err == nil: // (the wait ran out: wait again)
			lost, reached = time.Time{}, true
			continue
		case !errors.As(err, &ce) || ctx.Err() != nil:
			return 0, fmt.Errorf("waiting for job %s: %w", id, err)
		case ce.Lost:
			// It had taken the connection (a held wait, say): a
			// supervisor was there, and may be restarting.
			reached = true
		}
		if lost.IsZero() {
			lost = time.Now()
		}
		if time.Since(lost) > reconnectFor || !reached && time.Since(lost) > firstReachFor {
			return 0, fmt.Errorf("waiting for job %s: %w", id, err)
		}
		select { // the supervisor is restarting: ask again shortly
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// awaitNextSupervisor waits (up to reconnectFor) for a supervisor other
// than the one shutting down now (or none) to answer, and reports whether
// one did. One answering that is not shutting down is the next already:
// true at once (ask it; if it did not resume the service, it says so).
func awaitNextSupervisor(ctx context.Context, g *globals) bool {
	prev := ""
	if h, err := g.client.Health(ctx); err == nil {
		if !h.Draining {
			return true
		}
		prev = h.InstanceID
	}
	deadline := time.Now().Add(reconnectFor)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond): // (the supervisor is restarting)
		}
		if h, err := g.client.Health(ctx); err == nil && h.InstanceID != prev {
			return true
		}
	}
	return false
}

// waitEnded reports the end of job id (finished: its final state) as
// wait does: the wait op's result with --json, and its exit code.
func waitEnded(g *globals, id string, job protocol.JobInfo) (int, error) {
	if g.json { // (the wait op's result, as on the wire)
		if err := printJSON(g.stdout, protocol.SpawnResult{JobID: id, Job: job, Finished: true}); err != nil {
			return 0, err
		}
	}
	return exitCodeOf(protocol.ExitPayload{Reason: job.Reason, ExitCode: job.ExitCode, Signal: job.Signal, Error: job.Error}, g, id), nil
}

// reconnectFor bounds how long waitEnd waits for a supervisor that went
// away to answer again (a variable for tests).
var reconnectFor = 30 * time.Second

// firstReachFor bounds how long wait tries to reach a supervisor it has
// not reached yet (one restarting just then is back within it).
const firstReachFor = 3 * time.Second

// isTTY reports whether w is a terminal.
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(int(f.Fd()))
}
