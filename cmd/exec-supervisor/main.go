// Command exec-supervisor runs child processes on behalf of clients that
// speak the exec-supervisor protocol over ZeroMQ. See docs/operations.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/exec-supervisor/exec-supervisor/internal/keeper"
	"github.com/exec-supervisor/exec-supervisor/internal/limits"
	"github.com/exec-supervisor/exec-supervisor/internal/server"
)

func main() {
	// A job with rlimits starts as this binary, which applies them and
	// execs the job's program: nothing else may run before.
	limits.MaybeRunHelper()
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	cfg := server.DefaultConfig()
	fs := pflag.NewFlagSet("exec-supervisor", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.BindFlags(fs)
	version := fs.Bool("version", false, "print the version and exit")
	configFile := fs.String("config", os.Getenv("EXEC_SUPERVISOR_CONFIG"), "configuration file: 'option = value' lines named like the flags; flags given here win (env EXEC_SUPERVISOR_CONFIG)")
	keep := fs.Bool("keep", false, "run under a keeper that restarts the supervisor when it crashes (1 s doubling to 5 min; crash.log in the state directory) and stops on a clean exit; SIGTERM ends both")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		// (pflag prints nothing itself with ContinueOnError)
		fmt.Fprintf(stderr, "exec-supervisor: %v (see exec-supervisor --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		// (a word after a boolean flag, "--no-cgroups false", is one: a
		// boolean takes its value as --no-cgroups=false)
		fmt.Fprintf(stderr, "exec-supervisor: unexpected argument %.80q: the supervisor takes flags only (a boolean flag takes its value as --flag=false) (see exec-supervisor --help)\n", fs.Arg(0))
		return 2
	}
	if *configFile != "" {
		if err := server.LoadConfigFile(fs, *configFile); err != nil {
			fmt.Fprintln(stderr, "exec-supervisor: invalid configuration:", err)
			return 2
		}
	}
	if *version {
		fmt.Println("exec-supervisor", server.Version)
		return 0
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "exec-supervisor: invalid configuration:", err)
		return 2
	}
	if exe, err := os.Executable(); err == nil {
		cfg.LimitsHelper = exe
	}
	cfg.NotifySocket, cfg.WatchdogInterval = systemdNotify()
	log := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if *keep {
		return runKeeper(args, cfg, stderr, log)
	}
	// The first SIGTERM/SIGINT starts a graceful shutdown; a second one
	// makes it fast (running jobs are SIGKILLed at once).
	ctx, stop := context.WithCancel(context.Background())
	force, forceNow := context.WithCancel(context.Background())
	defer stop()
	defer forceNow()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	// A log reader that goes away (stderr a pipe whose reader exited)
	// must not end the supervisor and leave its jobs without an owner:
	// by default a Go program dies of SIGPIPE writing to a broken fd 2.
	// Caught (nobody reads the channel: the signal is dropped), the write
	// fails with EPIPE and the log line is lost. Not ignored: an ignored
	// signal stays ignored in the jobs, a caught one is reset by exec.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	// Signals whose default action would end the supervisor at once and
	// leave its jobs without an owner: SIGHUP (the terminal it ran in
	// closed; an operator expecting a reload, which there is none of),
	// SIGUSR1/2, SIGALRM... are caught and logged; it keeps supervising.
	// (SIGQUIT keeps Go's default: a goroutine dump, then exit; its jobs
	// are recovered by the next start.) Caught, not ignored, for the jobs'
	// sake, as SIGPIPE above.
	others := make(chan os.Signal, 4)
	signal.Notify(others, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGIO, syscall.SIGPWR, syscall.SIGSTKFLT)
	defer signal.Stop(others)
	stopOthers, othersDone := make(chan struct{}), make(chan struct{})
	defer func() { close(stopOthers); <-othersDone }()
	go func() {
		defer close(othersDone)
		for {
			select {
			case sig := <-others:
				name := sig.String()
				if n, ok := sig.(syscall.Signal); ok {
					name = unix.SignalName(n)
				}
				log.Warn("signal ignored: the supervisor keeps running (stop it with SIGTERM or SIGINT; there is no reload)", "signal", name)
			case <-stopOthers:
				return
			}
		}
	}()
	go func() {
		select {
		case <-sigs:
			stop()
		case <-force.Done():
			return
		}
		select {
		case sig := <-sigs:
			log.Warn("second signal: forcing a fast shutdown", "signal", sig.String())
			forceNow()
		case <-force.Done():
		}
	}()
	if err := server.Run(ctx, force, cfg, log); err != nil {
		if ce := (*server.ConfigError)(nil); errors.As(err, &ce) {
			fmt.Fprintln(stderr, "exec-supervisor: invalid configuration:", err)
			return 2
		}
		log.Error("exec-supervisor failed", "err", err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(strings.ToUpper(level)))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// systemdNotify takes the service manager's notify socket and watchdog
// period from the environment (Type=notify, WatchdogSec=) and removes
// them from it, so that jobs do not inherit them (as sd_notify's
// unset_environment does). The watchdog counts only when WATCHDOG_PID is
// absent or this process's.
func systemdNotify() (socket string, watchdog time.Duration) {
	socket = os.Getenv("NOTIFY_SOCKET")
	usec, _ := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	pid := os.Getenv("WATCHDOG_PID")
	for _, k := range []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} {
		os.Unsetenv(k)
	}
	if usec > 0 && (pid == "" || pid == strconv.Itoa(os.Getpid())) {
		watchdog = time.Duration(usec) * time.Microsecond
	}
	return socket, watchdog
}

// runKeeper runs the supervisor of args (--keep left out) under a keeper
// (internal/keeper) until it exits cleanly or the keeper is told to stop
// (SIGTERM, SIGINT: forwarded; a second one makes the shutdown fast).
func runKeeper(args []string, cfg server.Config, stderr io.Writer, log *slog.Logger) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "exec-supervisor: --keep:", err)
		return 1
	}
	argv := []string{exe}
	for _, a := range args {
		if a != "--keep" && !strings.HasPrefix(a, "--keep=") {
			argv = append(argv, a)
		}
	}
	stop, stopNow := context.WithCancel(context.Background())
	force, forceNow := context.WithCancel(context.Background())
	defer stopNow()
	defer forceNow()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-sigs:
				if i == 0 {
					stopNow()
				} else {
					forceNow()
				}
			case <-done:
				return
			}
		}
	}()
	if err := keeper.Run(stop, force, keeper.Config{Argv: argv, StateDir: cfg.StateDir, Output: stderr}, log); err != nil {
		fmt.Fprintln(stderr, "exec-supervisor:", err)
		return 1
	}
	return 0
}
