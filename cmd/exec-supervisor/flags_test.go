package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestInvalidFlags: a bad value is refused before anything starts, with
// exit code 2 and a message naming the flag.
func TestInvalidFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-finished-jobs", "0"}, "--max-finished-jobs"},
		{[]string{"--max-finished-jobs", "-5"}, "--max-finished-jobs"},
		{[]string{"--max-finished-output", "1000"}, "--max-finished-output"},
		{[]string{"--max-finished-output", "lots"}, "max-finished-output"},
		{[]string{"--max-jobs", "0"}, "--max-jobs"},
		{[]string{"--ring-buffer", "10"}, "--ring-buffer"},
		{[]string{"--finished-job-retention", "0s"}, "--finished-job-retention"},
		{[]string{"--reply-queue-bytes", "1000"}, "--reply-queue-bytes"},
		{[]string{"--allow-uid", "-1"}, "--allow-uid"},
		{[]string{"--allow-gid", "4294967295"}, "--allow-gid"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"--metrics-addr", "notanaddr"}, "--metrics-addr"},
		{[]string{"--metrics-addr", "127.0.0.1:99999"}, "--metrics-addr"},
		{[]string{"--control", "tcp://127.0.0.1:abc"}, "--control"},
		{[]string{"--event", "tcp://127.0.0.1:70000"}, "--event"},
		{[]string{"--pace-stall-limit", "-1s"}, "--pace-stall-limit"},
		// (found by an operations audit: 1ns kept an idle supervisor at 98% CPU)
		{[]string{"--cleanup-interval", "1ns"}, "--cleanup-interval"},
		// (a directory's path: listening made the directory, then failed,
		// and the directory was in the way of the next start)
		{[]string{"--event", "ipc:///tmp/es-flags-test/events.sock/"}, "--event"},
		{[]string{"--control", "ipc:///tmp/es-flags-test/c.sock", "--event", "ipc:///tmp/es-flags-test//c.sock"}, "must differ"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestInvalidPathsAtStart: options that only the start can check (a
// --journal in a directory that does not exist: no journal could ever be
// written, so nothing would be recovered after a crash; a --cgroup-parent
// that cannot be used: every job would quietly lose its cgroup) stop it
// with exit code 2 naming the option, and leave nothing behind.
func TestInvalidPathsAtStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--journal", "/nonexistent-es-dir/journal.json"}, "--journal"},
		{[]string{"--cgroup-parent", "/sys/fs/cgroup/unified/no-such-es-slice.slce"}, "--cgroup-parent"},
		// A journal path that names something else was moved aside as a
		// corrupt journal (the state directory itself, its lock: a second
		// supervisor could then take the directory; found by an
		// operations audit).
		{[]string{"--journal", "{dir}/state"}, "the supervisor's own"},
		{[]string{"--journal", "{dir}/state/lock"}, "the supervisor's own"},
		{[]string{"--journal", "{dir}"}, "not a regular file"},
		// (a token file that cannot be one is a configuration error, not
		// a failure worth restarting for: it exited 1)
		{[]string{"--control", "tcp://127.0.0.1:0", "--event", "tcp://127.0.0.2:0", "--token-file", "{dir}"}, "--token-file"},
	} {
		dir := t.TempDir()
		var extra []string
		for _, a := range tc.args {
			extra = append(extra, strings.ReplaceAll(a, "{dir}", dir))
		}
		args := append([]string{"--control", "ipc://" + filepath.Join(dir, "c.sock"), "--event", "ipc://" + filepath.Join(dir, "e.sock"),
			"--state-dir", filepath.Join(dir, "state"), "--metrics-addr", ""}, extra...)
		var stderr bytes.Buffer
		if code := run(args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", tc.args, code, stderr.String(), tc.want)
		}
		for _, f := range []string{"c.sock", "e.sock"} {
			if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
				t.Errorf("%v: %s left behind", tc.args, f)
			}
		}
		// The state directory's lock was let go.
		if l, err := journal.Acquire(filepath.Join(dir, "state"), "next"); err != nil {
			t.Errorf("%v: state directory still locked: %v", tc.args, err)
		} else {
			l.Release()
		}
	}
}

// TestStrayArguments: a word the flags do not take ("--no-cgroups false":
// a boolean takes its value as --no-cgroups=false) stops the start with
// exit code 2; it was dropped, and the supervisor ran with cgroups off.
func TestStrayArguments(t *testing.T) {
	for _, args := range [][]string{{"--no-cgroups", "false"}, {"extra-arg"}} {
		var stderr bytes.Buffer
		if code := run(args, &stderr); code != 2 || !strings.Contains(stderr.String(), "unexpected argument") {
			t.Errorf("%v: exit %d, stderr %q; want 2, unexpected argument", args, code, stderr.String())
		}
	}
}

// TestSignalsThatWouldOrphan: SIGHUP (a closed terminal), SIGUSR1 and
// the like leave the supervisor running and supervising (it died at once
// and left its jobs without an owner; found by an operations audit),
// while its jobs keep the default disposition (SIGHUP ends a job).
func TestSignalsThatWouldOrphan(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 30*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGALRM} {
		if err := s.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	waitLog(t, s, "signal=SIGALRM")
	if _, err := s.client.Health(ctx); err != nil {
		t.Fatalf("after the signals: %v", err)
	}
	if st, err := s.client.Status(ctx, j.JobID); err != nil || st.State != protocol.StateRunning {
		t.Fatalf("the job after the signals: %+v, %v", st, err)
	}
	if err := syscall.Kill(j.Pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	end, fin, err := s.client.Wait(ctx, j.JobID, 10*time.Second)
	if err != nil || !fin || end.Signal != "SIGHUP" {
		t.Fatalf("the job sent SIGHUP: %+v, %v, %v; want killed by it (default disposition)", end, fin, err)
	}
}

// TestFewFileDescriptorsWarned: a supervisor whose limits (--max-jobs,
// --max-connections) can take more descriptors than it may open says so
// at start, naming both figures, and serves on; under a limit that fits
// them it says nothing.
func TestFewFileDescriptorsWarned(t *testing.T) {
	const warning = "file descriptors may run out"
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Max < 8192 {
		t.Skipf("needs a hard limit of 8192 open files at least (this one: %d, %v): the limits tried are set with ulimit", rl.Max, err)
	}
	e := newEnv(t)
	e.wrap = []string{"sh", "-c", `ulimit -n 400 && exec "$0" "$@"`}
	s := e.start(t, "--max-jobs", "100")
	// (100 jobs x 9 + 2 sockets x 2 x 1024 connections + 96)
	if log := s.log.String(); !strings.Contains(log, warning) || !strings.Contains(log, "need=5092") || !strings.Contains(log, "limit=400") {
		t.Fatalf("no warning naming need=5092 and limit=400 at start:\n%s", log)
	}
	info, done, err := s.client.SpawnWait(ctxFor(t, 10*time.Second), protocol.SpawnArgs{Argv: []string{"/bin/true"}}, 5*time.Second)
	if err != nil || !done || info.ExitCode == nil || *info.ExitCode != 0 {
		t.Fatalf("a job under the low limit: %+v finished %v, %v", info, done, err)
	}

	e2 := newEnv(t)
	e2.wrap = []string{"sh", "-c", `ulimit -n 8192 && exec "$0" "$@"`}
	if log := e2.start(t).log.String(); strings.Contains(log, warning) {
		t.Fatalf("warned with defaults under a limit of 8192:\n%s", log)
	}
}
