package openclaw

import (
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestEndingOf: every native termination reason has a dialect state and
// reason; the process's own end is "exited", the supervisor giving up
// "failed".
func TestEndingOf(t *testing.T) {
	for _, tc := range []struct {
		reason        protocol.Reason
		signal        string
		state, dialed string
		failedErr     string
	}{
		{protocol.ReasonExit, "", stateExited, reasonExit, "exit"},
		{protocol.ReasonSignal, "SIGSEGV", stateExited, reasonSignal, "signal"},
		{protocol.ReasonManualCancel, "SIGTERM", stateExited, reasonSignal, "manual-cancel"},
		{protocol.ReasonManualCancel, "", stateExited, reasonExit, "manual-cancel"}, // (it trapped TERM and exited)
		{protocol.ReasonStopped, "SIGTERM", stateExited, reasonSignal, "stopped"},
		{protocol.ReasonOverallTimeout, "SIGTERM", stateFailed, reasonTimeout, "timeout"},
		{protocol.ReasonNoOutputTimeout, "SIGKILL", stateFailed, reasonNoOutputTimeout, "no-output-timeout"},
		{protocol.ReasonSpawnError, "", stateFailed, reasonSpawnError, "spawn-error"},
		{protocol.ReasonSupervisorRestart, "", stateFailed, reasonSpawnError, "supervisor-restart"},
		{protocol.ReasonShutdown, "SIGTERM", stateFailed, reasonSpawnError, "supervisor-shutdown"},
		{protocol.ReasonOwnershipEscape, "SIGKILL", stateFailed, reasonSpawnError, "ownership-escape"},
		{protocol.ReasonWatchdog, "SIGTERM", stateFailed, reasonSpawnError, "watchdog"},
		{protocol.ReasonRestartLimit, "", stateFailed, reasonSpawnError, "restart-limit"},
	} {
		e := endingOf(tc.reason, tc.signal)
		if e.state != tc.state || e.reason != tc.dialed {
			t.Errorf("%s/%q: %s/%s, want %s/%s", tc.reason, tc.signal, e.state, e.reason, tc.state, tc.dialed)
		}
		if got := failedError(tc.reason, ""); got != tc.failedErr {
			t.Errorf("failedError(%s) = %q, want %q", tc.reason, got, tc.failedErr)
		}
		info := protocol.JobInfo{State: protocol.StateExited, Reason: tc.reason, Signal: tc.signal}
		if got := stateOf(&info); got != tc.state {
			t.Errorf("stateOf(exited, %s) = %s", tc.reason, got)
		}
	}
	for _, tc := range []struct {
		r      protocol.Reason
		msg    string
		failed string
	}{
		{protocol.ReasonSpawnError, "working directory /x: no such file", "working directory /x: no such file"},
		{protocol.ReasonSupervisorRestart, "orphan terminated", "supervisor-restart: orphan terminated"},
		{protocol.ReasonOverallTimeout, "ran 500ms", "timeout"},
	} {
		if got := failedError(tc.r, tc.msg); got != tc.failed {
			t.Errorf("failedError(%s, %q) = %q, want %q", tc.r, tc.msg, got, tc.failed)
		}
	}
	for native, want := range map[protocol.State]string{
		protocol.StateQueued: statePending, protocol.StateStarting: statePending, protocol.StateRunning: stateRunning,
		protocol.StateRestarting: stateRunning, protocol.StateExiting: stateExiting,
	} {
		if got := stateOf(&protocol.JobInfo{State: native}); got != want {
			t.Errorf("stateOf(%s) = %s, want %s", native, got, want)
		}
	}
}

func TestSeqsAndCommands(t *testing.T) {
	for d, n := range map[int64]uint64{-3: 1, 0: 1, 1: 2, 41: 42, 1 << 62: 1 << 62, 1<<53 - 1: 1 << 53} {
		if got := nativeFrom(d); got != n {
			t.Errorf("nativeFrom(%d) = %d, want %d", d, got, n)
		}
	}
	if dialectSeq(1) != 0 || dialectSeq(42) != 41 {
		t.Fatal("dialect seqs are native seqs - 1")
	}
	for _, tc := range []struct {
		argv  []string
		shell string
		want  string
	}{
		{[]string{"/bin/bash", "-c", "echo a; echo b"}, "", "echo a; echo b"},
		{nil, "make test", "make test"},
		{[]string{"sleep", "9"}, "", "sleep 9"},
		{[]string{"/bin/bash", "-x", "s.sh"}, "", "/bin/bash -x s.sh"},
	} {
		if got := commandOf(tc.argv, tc.shell); got != tc.want {
			t.Errorf("commandOf(%q, %q) = %q, want %q", tc.argv, tc.shell, got, tc.want)
		}
	}
}
