package main

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// serviceOpts are spawn's flags for services (restart policy), notify
// jobs and resource limits.
type serviceOpts struct {
	restart                                                     *string
	restartDelay, maxDelay, resetAfter, restartWindow, watchdog *time.Duration
	backoff                                                     *float64
	maxRestarts, nice, cpuWeight                                *int
	notify                                                      *bool
	limitNofile                                                 *uint64
	limitAS, memoryMax                                          *string
}

// restartTuning are the flags that only mean something for a service.
var restartTuning = []string{"restart-delay", "backoff-multiplier", "max-delay", "reset-after", "max-restarts", "restart-window"}

func serviceFlags(fs *pflag.FlagSet) *serviceOpts {
	o := &serviceOpts{}
	o.restart = fs.String("restart", "", "make the job a service, restarted by `POLICY`: never (default: run once), on-failure (after a non-zero exit, a signal, a timeout), always (after any end)")
	o.restartDelay = fs.Duration("restart-delay", 0, fmt.Sprintf("services: delay before the first restart, multiplied by --backoff-multiplier for each consecutive one (default %v)", msDuration(protocol.DefaultRestartDelayMs)))
	o.backoff = fs.Float64("backoff-multiplier", 0, fmt.Sprintf("services: growth of the restart delay per consecutive restart, 1..100 (default %v)", protocol.DefaultBackoffMultiplier))
	o.maxDelay = fs.Duration("max-delay", 0, fmt.Sprintf("services: longest restart delay (default %v)", msDuration(protocol.DefaultMaxDelayMs)))
	o.resetAfter = fs.Duration("reset-after", 0, fmt.Sprintf("services: a run that lasts this long resets the restart delay to --restart-delay (default %v)", msDuration(protocol.DefaultResetAfterMs)))
	o.maxRestarts = fs.Int("max-restarts", 0, fmt.Sprintf("services: give up (reason restart-limit) when this many runs have ended within --restart-window; 0 = restart forever (default %d)", protocol.DefaultMaxRestarts))
	o.restartWindow = fs.Duration("restart-window", 0, fmt.Sprintf("services: the window in which --max-restarts counts run ends (default %v)", msDuration(protocol.DefaultRestartWindowMs)))
	o.notify = fs.Bool("notify", false, "give the job NOTIFY_SOCKET (systemd notify protocol: READY=1, STATUS=..., WATCHDOG=1, STOPPING=1)")
	o.watchdog = fs.Duration("watchdog", 0, "with --notify: kill a run that sends no WATCHDOG=1 for this long (reason watchdog; a service is restarted by its policy)")
	o.limitNofile = fs.Uint64("limit-nofile", 0, "RLIMIT_NOFILE: most open files per process")
	o.limitAS = fs.String("limit-as", "", "RLIMIT_AS: most address space per process, in `BYTES` (suffix K, M, G = KiB, MiB, GiB; e.g. 512M)")
	o.nice = fs.Int("nice", 0, "CPU niceness, -20..19 (below the supervisor's own needs privilege)")
	o.memoryMax = fs.String("memory-max", "", "cgroup memory.max of the job, in `BYTES` (suffix K, M, G; e.g. 1G; needs a cgroup per job)")
	o.cpuWeight = fs.Int("cpu-weight", 0, "cgroup cpu.weight of the job, 1..10000 (100 = normal; needs a cgroup per job)")
	return o
}

// apply checks the flags and sets the service, notify and limits fields of a.
func (o *serviceOpts) apply(fs *pflag.FlagSet, a *protocol.SpawnArgs) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"restart-delay", *o.restartDelay}, {"max-delay", *o.maxDelay}, {"reset-after", *o.resetAfter}, {"restart-window", *o.restartWindow}, {"watchdog", *o.watchdog}} {
		if d.v < 0 {
			return &usageError{msg: fmt.Sprintf("--%s %v: durations must not be negative", d.name, d.v)}
		}
		if d.v > 0 && d.v < time.Millisecond {
			return &usageError{msg: fmt.Sprintf("--%s %v: less than the protocol's unit, 1ms", d.name, d.v)}
		}
	}
	switch *o.restart {
	case "", protocol.RestartNever, protocol.RestartOnFailure, protocol.RestartAlways:
	default:
		return &usageError{msg: fmt.Sprintf("--restart %q: want never, on-failure or always", *o.restart),
			hint: "on-failure restarts after a non-zero exit, a signal or a timeout; always also after exit 0"}
	}
	var tuning []string
	for _, name := range restartTuning {
		if fs.Changed(name) {
			tuning = append(tuning, "--"+name)
		}
	}
	p := &protocol.RestartPolicy{Policy: *o.restart}
	if !p.Enabled() {
		if len(tuning) > 0 {
			msg := strings.Join(tuning, ", ") + " only applies to services, and there is no --restart policy"
			if *o.restart == protocol.RestartNever {
				msg = strings.Join(tuning, ", ") + " only applies to services, and --restart never runs the job once"
			}
			return &usageError{msg: msg, hint: "add --restart on-failure (restart after a failure) or --restart always (restart after any end)"}
		}
	} else {
		p.RestartDelayMs, p.MaxDelayMs = o.restartDelay.Milliseconds(), o.maxDelay.Milliseconds()
		p.ResetAfterMs, p.RestartWindowMs = o.resetAfter.Milliseconds(), o.restartWindow.Milliseconds()
		p.BackoffMultiplier = *o.backoff
		if fs.Changed("max-restarts") {
			if *o.maxRestarts < 0 {
				return &usageError{msg: fmt.Sprintf("--max-restarts %d: must not be negative", *o.maxRestarts), hint: "--max-restarts 0 restarts forever"}
			}
			n := *o.maxRestarts
			p.MaxRestarts = &n
		}
		a.Restart = p
	}
	if *o.watchdog > 0 && !*o.notify {
		return &usageError{msg: "--watchdog needs --notify", hint: "the job feeds the watchdog by sending WATCHDOG=1 to $NOTIFY_SOCKET (e.g. systemd-notify WATCHDOG=1)"}
	}
	a.Notify, a.WatchdogIntervalMs = *o.notify, o.watchdog.Milliseconds()

	var l protocol.ResourceLimits
	l.MaxOpenFiles = *o.limitNofile
	var err error
	if l.MaxAddressSpaceBytes, err = parseBytes("--limit-as", *o.limitAS, math.MaxUint64); err != nil {
		return err
	}
	mem, err := parseBytes("--memory-max", *o.memoryMax, math.MaxInt64)
	if err != nil {
		return err
	}
	l.MemoryMaxBytes = int64(mem)
	if fs.Changed("nice") {
		n := *o.nice
		l.Nice = &n
	}
	if *o.cpuWeight < 0 {
		return &usageError{msg: fmt.Sprintf("--cpu-weight %d: must be 1..10000", *o.cpuWeight)}
	}
	l.CPUWeight = *o.cpuWeight
	if l != (protocol.ResourceLimits{}) {
		a.Limits = &l
	}
	return nil
}

// sizeRE is a size: bytes ("100", "100B"), or K, M, G units of 1024^n
// ("512M", "512MB", "512MiB", any case).
var sizeRE = regexp.MustCompile(`(?i)^(\d+)(?:([KMG])(?:i?b)?|b)?$`)

// parseBytes reads a size for flag (empty is 0) of at most most bytes.
func parseBytes(flag, s string, most uint64) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, &usageError{msg: fmt.Sprintf("%s %q: want a size in bytes, e.g. 1048576, 512M or 2G", flag, s), hint: "suffixes K, M, G mean KiB, MiB, GiB"}
	}
	v, err := strconv.ParseUint(m[1], 10, 64)
	mult := uint64(1)
	if m[2] != "" {
		mult = 1 << (10 * (strings.Index("KMG", strings.ToUpper(m[2])) + 1))
	}
	if err != nil || v > most/mult {
		return 0, &usageError{msg: fmt.Sprintf("%s %q is too large", flag, s)}
	}
	return v * mult, nil
}

// StartCommand starts a service job again.
type StartCommand struct{}

// Synopsis implements command.
func (*StartCommand) Synopsis() string {
	return "run a service again (at once if waiting to restart; anew after restart-limit or stop): start JOB"
}

// Run implements command.
func (*StartCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	return serviceOp(ctx, g, "start", args)
}

// RestartCommand ends a service's current run and starts the next.
type RestartCommand struct{}

// Synopsis implements command.
func (*RestartCommand) Synopsis() string {
	return "end a service's current run gracefully and start the next at once: restart JOB"
}

// Run implements command.
func (*RestartCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	return serviceOp(ctx, g, "restart", args)
}

func serviceOp(ctx context.Context, g *globals, name string, args []string) (int, error) {
	fs := newFlags(name, g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	op := g.on(id).StartService
	if name == "restart" {
		op = g.on(id).Restart
	}
	info, err := op(ctx, id)
	if err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, protocol.StatusResult{Job: &info})
	}
	if name == "restart" && info.State == protocol.StateExiting {
		fmt.Fprintf(g.stdout, "%s exiting (attempt %d ends; attempt %d starts once it has)\n", id, info.Attempt, info.Attempt+1)
		return exitOK, nil
	}
	fmt.Fprintf(g.stdout, "%s %s (attempt %d)\n", id, info.State, info.Attempt)
	return exitOK, nil
}

// StopCommand ends a job for good.
type StopCommand struct{}

// Synopsis implements command.
func (*StopCommand) Synopsis() string {
	return "end a job gracefully (SIGTERM, grace, SIGKILL); a service is not restarted: stop JOB"
}

// Run implements command.
func (*StopCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("stop", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	res, err := g.on(id).Stop(ctx, id)
	if err != nil {
		return 0, err
	}
	return exitOK, printKillResult(g, id, res)
}

// HistoryCommand shows a service's ended runs.
type HistoryCommand struct{}

// Synopsis implements command.
func (*HistoryCommand) Synopsis() string {
	return "show a service's ended runs with their last output lines: history JOB [--lines N]"
}

// Run implements command.
func (*HistoryCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("history", g)
	lines := fs.IntP("lines", "n", protocol.HistoryLines, "show at most this many of each run's last output lines (0: none)")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if *lines < 0 {
		return 0, &usageError{msg: fmt.Sprintf("--lines %d: must not be negative", *lines)}
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	runs, err := g.on(id).History(ctx, id)
	if err != nil {
		return 0, err
	}
	if runs == nil {
		runs = []protocol.RunRecord{}
	}
	for i := range runs {
		if t := runs[i].Tail; len(t) > *lines {
			runs[i].Tail = t[len(t)-*lines:]
		} else if t == nil {
			runs[i].Tail = []string{}
		}
	}
	if g.json {
		return exitOK, printJSON(g.stdout, protocol.HistoryResult{JobID: id, Runs: runs})
	}
	if len(runs) == 0 {
		info, err := g.on(id).Status(ctx, id)
		if err != nil {
			return 0, err
		}
		switch {
		case info.Restart == "":
			fmt.Fprintf(g.stdout, "%s has no ended runs: history is kept for services (spawned with --restart); see: execctl status %s\n", id, id)
		case info.Finished():
			fmt.Fprintf(g.stdout, "%s has no ended runs (it ended: %s); see: execctl status %s\n", id, info.Reason, id)
		default:
			fmt.Fprintf(g.stdout, "%s has no ended runs yet (attempt %d is %s)\n", id, info.Attempt, info.State)
		}
		return exitOK, nil
	}
	// Columns: #attempt, started, ran, reason, exit, restarted.
	cells := make([][]string, len(runs))
	width := make([]int, 6)
	for i, r := range runs {
		restarted := "no"
		if r.Restarted {
			restarted = "yes"
		}
		cells[i] = []string{"#" + strconv.Itoa(r.Attempt), fmtTime(r.StartedAt), "ran " + humanDuration(msDuration(r.DurationMs)),
			string(r.Reason), exitText(r.ExitCode, r.Signal), "restarted " + restarted}
		for c, v := range cells[i] {
			width[c] = max(width[c], len(v))
		}
	}
	for i, r := range runs {
		var b strings.Builder
		for c, v := range cells[i] {
			if c < len(cells[i])-1 {
				fmt.Fprintf(&b, "%-*s  ", width[c], v)
			} else {
				b.WriteString(v)
			}
		}
		fmt.Fprintln(g.stdout, b.String())
		if r.Error != "" {
			fmt.Fprintf(g.stdout, "    error: %s\n", r.Error)
		}
		for _, l := range r.Tail {
			fmt.Fprintf(g.stdout, "    | %s\n", l)
		}
	}
	return exitOK, nil
}

// exitText is "exit N", the signal's name, or "-".
func exitText(code *int, signal string) string {
	switch {
	case code != nil:
		return "exit " + strconv.Itoa(*code)
	case signal != "":
		return signal
	}
	return "-"
}

// runEnd describes how a run ended: "exit code 1", "watchdog (SIGTERM)".
func runEnd(reason protocol.Reason, code *int, signal string) string {
	switch {
	case reason == protocol.ReasonExit && code != nil:
		return fmt.Sprintf("exit code %d", *code)
	case code != nil:
		return fmt.Sprintf("%s (exit code %d)", reason, *code)
	case signal != "":
		return fmt.Sprintf("%s (%s)", reason, signal)
	}
	return string(reason)
}

// serviceRows adds the service, notify and limits lines of status.
func serviceRows(row func(string, any), info protocol.JobInfo) {
	if info.Restart != "" {
		row("restart", info.Restart)
		row("attempt", info.Attempt)
		row("restarts", fmt.Sprintf("%d (%d run ends within the restart window)", info.Restarts, info.RestartsInWindow))
		if info.State == protocol.StateRunning || info.State == protocol.StateExiting {
			row("uptime", humanDuration(msDuration(info.UptimeMs)))
		}
		if info.NextRestartAt != 0 {
			in := time.Until(time.UnixMilli(info.NextRestartAt))
			row("next restart", fmt.Sprintf("%s (in %s, attempt %d)", fmtTime(info.NextRestartAt), humanDuration(max(in, 0)), info.Attempt+1))
		}
	}
	if info.Notify {
		row("ready", yesNo(info.Ready))
		if info.NotifyStatus != "" {
			row("notify status", oneLine(info.NotifyStatus))
		}
		if info.LastWatchdogAt != 0 {
			row("last watchdog", fmtTime(info.LastWatchdogAt))
		}
		if info.Stopping {
			row("stopping", "yes (the job sent STOPPING=1)")
		}
	}
	if l := info.Limits; l != nil {
		if len(l.Applied) > 0 {
			row("limits", strings.Join(l.Applied, " "))
		}
		keys := make([]string, 0, len(l.Unavailable))
		for k := range l.Unavailable {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			row("limit not applied", k+": "+oneLine(l.Unavailable[k]))
		}
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// oneLine keeps text sent by a job from breaking the status layout.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
