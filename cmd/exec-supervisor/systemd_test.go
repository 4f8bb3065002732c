package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSystemdUnitVerifies: the shipped unit (Type=notify, WatchdogSec=)
// passes systemd-analyze verify, its ExecStart pointed at the binary
// under test.
func TestSystemdUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (systemd)")
	}
	unit, err := os.ReadFile("../../deploy/exec-supervisor.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "\nType=notify\n") || !strings.Contains(string(unit), "\nWatchdogSec=") {
		t.Fatal("the unit is not Type=notify with a WatchdogSec")
	}
	path := filepath.Join(t.TempDir(), "exec-supervisor.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/exec-supervisor", binary)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sa, "verify", path).CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestSystemdNotifyFromEnv: the notify socket and watchdog period come
// from the environment and leave it (jobs must not inherit them); a
// watchdog meant for another pid does not count.
func TestSystemdNotifyFromEnv(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "@sd")
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	sock, wd := systemdNotify()
	if sock != "@sd" || wd != 30*time.Second {
		t.Fatalf("got %q %v", sock, wd)
	}
	for _, k := range []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} {
		if _, set := os.LookupEnv(k); set {
			t.Errorf("%s still set", k)
		}
	}
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", "1")
	if _, wd := systemdNotify(); wd != 0 {
		t.Fatalf("a watchdog for pid 1 counted: %v", wd)
	}
}
