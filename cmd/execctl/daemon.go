package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/keeper"
	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
)

// DaemonCommand runs a supervisor kept alive without a service manager:
// start (exec-supervisor --keep, detached), stop, status (with its crash
// history from crash.log). It reads and signals processes of this machine
// through the state directory, not the protocol.
type DaemonCommand struct{}

// Synopsis implements command.
func (*DaemonCommand) Synopsis() string {
	return "run the supervisor under a keeper, detached: daemon start|stop|status [--state-dir DIR] [-- SUPERVISOR FLAGS]"
}

// Run implements command.
func (*DaemonCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("daemon", g)
	dir := fs.String("state-dir", statedir.Default(), "the supervisor's state directory (keeper.json, crash.log, keeper.log)")
	bin := fs.String("supervisor", "", "the exec-supervisor binary (default: next to execctl, else in PATH)")
	crashes := fs.Int("crashes", 5, "status: how many of the latest crashes to show (0: all)")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if g.pool != nil {
		return 0, &usageError{msg: "daemon runs one supervisor on this machine: give one --control/--event (not a list, nor --endpoints-file)"}
	}
	if fs.NArg() == 0 {
		return 0, &usageError{msg: "daemon needs start, stop or status", hint: "execctl daemon status"}
	}
	switch fs.Arg(0) {
	case "start":
		return daemonStart(ctx, g, *dir, *bin, fs.Args()[1:])
	case "stop":
		return daemonStop(ctx, g, *dir)
	case "status":
		return daemonStatus(g, *dir, *crashes)
	}
	return 0, &usageError{msg: fmt.Sprintf("daemon %q: want start, stop or status", fs.Arg(0)), hint: "execctl daemon status"}
}

// supervisorBinary finds exec-supervisor: next to this execctl, else in
// PATH.
func findSupervisorBinary(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "exec-supervisor"); fileExists(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath("exec-supervisor")
	if err != nil {
		return "", &usageError{msg: "no exec-supervisor binary next to execctl or in PATH", hint: "pass it with --supervisor PATH"}
	}
	return p, nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// daemonStart starts exec-supervisor --keep in a session of its own, its
// output appended to keeper.log in the state directory, and waits (up to
// 15 s) until the supervisor answers.
func daemonStart(ctx context.Context, g *globals, dir, bin string, extra []string) (int, error) {
	if st, ok, err := keeper.ReadStatus(dir); err == nil && ok {
		fmt.Fprintf(g.stdout, "already running: keeper pid %d, supervisor pid %d\n", st.Pid, st.SupervisorPid)
		return exitOK, nil
	}
	path, err := findSupervisorBinary(bin)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "keeper.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	o := g.client.Options()
	args := append([]string{"--keep", "--control", o.ControlAddress, "--event", o.EventAddress, "--state-dir", dir}, extra...)
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // (detached: no terminal, not our group)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", path, err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release() // (it runs on by itself; init reaps it)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		hctx, hcancel := context.WithTimeout(wctx, time.Second)
		h, err := g.client.Health(hctx)
		hcancel()
		if err == nil {
			fmt.Fprintf(g.stdout, "started: keeper pid %d, supervisor pid %d (log: %s)\n", pid, h.Pid, filepath.Join(dir, "keeper.log"))
			return exitOK, nil
		}
		if wctx.Err() != nil {
			return exitUnreachable, fmt.Errorf("the supervisor did not answer within 15 s of starting (see %s)", filepath.Join(dir, "keeper.log"))
		}
		time.Sleep(100 * time.Millisecond) // polling while it starts
	}
}

// daemonStop sends the keeper SIGTERM (it stops the supervisor, which
// ends its jobs) and waits up to 60 s for it to go.
func daemonStop(ctx context.Context, g *globals, dir string) (int, error) {
	st, ok, err := keeper.ReadStatus(dir)
	if err != nil {
		return 0, err
	}
	if !ok {
		fmt.Fprintf(g.stdout, "not running (no keeper for %s)\n", dir)
		return exitOK, nil
	}
	if err := syscall.Kill(st.Pid, syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("signal keeper pid %d: %w", st.Pid, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for syscall.Kill(st.Pid, 0) == nil {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return exitFailed, fmt.Errorf("keeper pid %d still running 60 s after SIGTERM", st.Pid)
		}
		time.Sleep(100 * time.Millisecond) // polling for its exit (not our child)
	}
	fmt.Fprintf(g.stdout, "stopped (keeper pid %d)\n", st.Pid)
	return exitOK, nil
}

// daemonStatus shows whether a keeper runs, and the latest crashes.
func daemonStatus(g *globals, dir string, n int) (int, error) {
	st, ok, err := keeper.ReadStatus(dir)
	if err != nil {
		return 0, err
	}
	recent, total, err := keeper.ReadCrashes(dir, n)
	if err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, map[string]any{"running": ok, "keeper": st, "crashes": total, "recent": recent})
	}
	if ok {
		fmt.Fprintf(g.stdout, "running: keeper pid %d, supervisor pid %d, up %s, %d crashes since it started\n",
			st.Pid, st.SupervisorPid, humanDuration(time.Since(st.StartedAt)), st.Crashes)
	} else {
		fmt.Fprintf(g.stdout, "not running (no keeper for %s)\n", dir)
	}
	fmt.Fprintf(g.stdout, "crash.log: %d crashes\n", total)
	for _, c := range recent {
		fmt.Fprintf(g.stdout, "\n%s\n%s\n", c.Header, c.Detail)
	}
	return exitOK, nil
}
