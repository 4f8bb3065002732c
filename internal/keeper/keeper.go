// Package keeper keeps a supervisor alive without systemd
// (exec-supervisor --keep): it runs the supervisor as its child, restarts
// it when it crashes after a backoff (1 s doubling to 5 min, reset after 5
// minutes of healthy running, no limit: the daemon seed's schedule),
// appends each crash to crash.log in the state directory (time, how long
// it ran, exit code or signal, its last 50 lines of output), forwards
// SIGTERM and SIGINT to it and stops once it exits cleanly (exit 0).
//
// It does not own the supervisor's jobs (the supervisor does, and the next
// run recovers those a crash left), nor does it detach from the terminal:
// start it under nohup/setsid, or as a service, to daemonize it.
package keeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Config is how to keep a supervisor alive. Zero durations take the
// daemon seed's defaults.
type Config struct {
	// Argv is the supervisor's command line (Argv[0] its binary).
	Argv []string
	// StateDir holds crash.log.
	StateDir string
	// Output receives the supervisor's output as it comes (besides the
	// lines kept for crash.log); nil discards it.
	Output io.Writer
	// Initial, Max and ResetAfter are the backoff: the first delay, its
	// cap, and how long a run must last to reset it.
	Initial, Max, ResetAfter time.Duration
}

func (c *Config) fill() {
	if c.Initial <= 0 {
		c.Initial = time.Second
	}
	if c.Max <= 0 {
		c.Max = 5 * time.Minute
	}
	if c.ResetAfter <= 0 {
		c.ResetAfter = 5 * time.Minute
	}
	if c.Output == nil {
		c.Output = io.Discard
	}
}

// tailLines is how many of the supervisor's last output lines a crash
// records.
const tailLines = 50

// Run keeps the supervisor alive until it exits cleanly (nil), or stop is
// cancelled: then the supervisor is sent SIGTERM (and the same again on a
// second cancellation of force: a fast shutdown) and waited for. An error
// says the supervisor could not be started at all.
func Run(stop, force context.Context, cfg Config, log *slog.Logger) error {
	cfg.fill()
	delay := cfg.Initial
	st := Status{Pid: os.Getpid(), StartedAt: time.Now().UTC()}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("keeper: state directory: %w", err)
	}
	defer os.Remove(filepath.Join(cfg.StateDir, statusFile))
	crashes := 0
	for {
		tail := newTail(tailLines)
		cmd := exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
		cmd.Stdout = io.MultiWriter(cfg.Output, tail)
		cmd.Stderr = cmd.Stdout
		// (its output pipe is copied until every holder closes it: a
		// process the supervisor left holding it must not hold us)
		cmd.WaitDelay = 2 * time.Second
		// Its own process group: a terminal's Ctrl-C reaches the keeper
		// only, which forwards it once (twice would be a fast shutdown).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		started := time.Now()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("keeper: start the supervisor: %w", err)
		}
		log.Info("keeper: supervisor started", "pid", cmd.Process.Pid, "crashes", crashes)
		st.SupervisorPid = cmd.Process.Pid
		if err := writeStatus(cfg.StateDir, st); err != nil {
			log.Warn("keeper: keeper.json not written", "err", err)
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		var err error
		select {
		case err = <-waited:
		case <-stop.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err = <-waited:
			case <-force.Done():
				_ = cmd.Process.Signal(syscall.SIGTERM) // (a second signal: fast)
				err = <-waited
			}
			log.Info("keeper: supervisor stopped", "err", err)
			return nil
		}
		ran := time.Since(started)
		if err == nil {
			log.Info("keeper: supervisor exited cleanly; stopping")
			return nil
		}
		crashes++
		st.Crashes, st.LastCrashAt, st.SupervisorPid = crashes, time.Now().UTC(), 0
		if err := writeStatus(cfg.StateDir, st); err != nil {
			log.Warn("keeper: keeper.json not written", "err", err)
		}
		if ran >= cfg.ResetAfter {
			delay = cfg.Initial // (it ran healthy long enough)
		}
		if werr := appendCrash(cfg.StateDir, started, ran, cmd.ProcessState, tail.lines()); werr != nil {
			log.Error("keeper: crash.log not written", "err", werr)
		}
		log.Warn("keeper: supervisor crashed; restarting", "ran", ran.Round(time.Millisecond), "exit", describe(cmd.ProcessState),
			"delay", delay, "crashes", crashes)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-stop.Done():
			t.Stop()
			return nil
		}
		delay = min(delay*2, cfg.Max)
	}
}

// describe says how a process ended: its exit code or the signal.
func describe(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit code %d", ps.ExitCode())
}

// appendCrash appends one crash's entry to <dir>/crash.log (0600).
func appendCrash(dir string, started time.Time, ran time.Duration, ps *os.ProcessState, lines []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "=== CRASH %s ===\n", time.Now().UTC().Format("2006-01-02 15:04:05Z"))
	fmt.Fprintf(&b, "Started: %s\n", started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Ran for: %s\n", ran.Round(time.Millisecond))
	fmt.Fprintf(&b, "Ended: %s\n", describe(ps))
	fmt.Fprintf(&b, "Last %d lines of output:\n", len(lines))
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	b.WriteString("\n")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "crash.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(b.String())
	return errors.Join(werr, f.Close())
}
