package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

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
	id := fs.String("id", "", "the job's id, chosen by you: ASCII letters, digits and ._:- (default: the supervisor makes one up; a retried spawn with the same id never starts a second job)")
	name := fs.String("name", "", "name the job: every command that takes a JOB takes the name too; unique among jobs not finished (ASCII letters, digits and ._:-, at most 64, not beginning with j-)")
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
	output := fs.String("output", "", "where the output is kept besides the supervisor's ring buffer: disk (also in files, readable by logs/poll after the job left memory and across supervisor restarts, until remove or the supervisor's --output-max-age) or memory (default: the supervisor's --output-disk: disk for services, memory for other jobs)")
	queue := fs.Bool("queue", false, "when --max-jobs are running, wait in state queued for a slot (in order) instead of being refused")
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
	a := protocol.SpawnArgs{JobID: *id, Name: *name, Argv: fs.Args(), Shell: *shell, Cwd: *cwd, SessionID: *session}
	var err error
	if fs.Changed("name") {
		var pe *protocol.Error
		if err := protocol.ValidJobName(a.Name); errors.As(err, &pe) {
			return 0, &usageError{msg: "--name: " + pe.Message, hint: "a name is like build, web-1 or nightly.backup"}
		}
	}
	if a.TimeoutMs, err = millis(*timeout, "--timeout"); err != nil {
		return 0, err
	}
	if a.NoOutputTimeoutMs, err = millis(*noOut, "--no-output-timeout"); err != nil {
		return 0, err
	}
	if a.GraceMs, err = millis(*grace, "--grace"); err != nil {
		return 0, err
	}
	if a.Cwd != "" && !filepath.IsAbs(a.Cwd) && g.onThisMachine() {
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
	a.Queue = *queue
	switch *output {
	case "", protocol.OutputDisk, protocol.OutputMemory:
		a.Output = *output
	default:
		return 0, &usageError{msg: fmt.Sprintf("--output %q: want disk or memory", *output), hint: "execctl spawn --output disk -- make"}
	}
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
		return exitOK, printJSON(g.stdout, g.spawnResultJSON(protocol.SpawnResult{JobID: job.JobID, Job: job}))
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
	if g.pool != nil { // (placed by the pool: see docs/pool.md)
		pj, err := g.pool.Spawn(sctx, a)
		if err == nil {
			g.setHost(pj.JobID, pj.Member)
		}
		return pj.JobInfo, err
	}
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
		lost = lost || lostOutput(ev)
		if ev.Kind.Terminal() {
			if err := ev.DecodePayload(&final); err != nil {
				return err
			}
		}
		if g.json {
			return printJSON(g.stdout, g.eventJSON(ev))
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
		err := g.on(id).Follow(ctx, id, *next, func(ev protocol.Event) error {
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
