package lifecycle

import (
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func intp(v int) *int { return &v }

// TestBackoffAppSupervisionSchedule: the app-supervision seed's example
// with its defaults: crashes at T+0, 5, 10, 15 s are restarted after
// 1, 2, 4, 8 s; the crash at T+20 s disables the app.
func TestBackoffAppSupervisionSchedule(t *testing.T) {
	b := NewBackoff(protocol.RestartPolicy{Policy: protocol.RestartOnFailure})
	t0 := time.Unix(1_800_000_000, 0)
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for i, w := range want {
		d, n, limited := b.Next(t0.Add(time.Duration(i)*5*time.Second), time.Second)
		if limited || d != w || n != i+1 {
			t.Fatalf("crash %d: delay %v (want %v), in window %d, limited %v", i+1, d, w, n, limited)
		}
	}
	if _, n, limited := b.Next(t0.Add(20*time.Second), time.Second); !limited || n != 5 {
		t.Fatalf("crash 5: limited %v in window %d; want the restart limit", limited, n)
	}
}

// TestBackoffDaemonSchedule: the daemon-supervisor seed's table with no
// crash limit: 1, 2, 4, ... 256 s, then 300 s (5 min) for ever; a run of
// more than 5 minutes resets the delay.
func TestBackoffDaemonSchedule(t *testing.T) {
	b := NewBackoff(protocol.RestartPolicy{Policy: protocol.RestartAlways, MaxRestarts: intp(0)})
	now := time.Unix(1_800_000_000, 0)
	want := []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300, 300}
	for i, w := range want {
		d, _, limited := b.Next(now, 2*time.Second)
		if limited || d != time.Duration(w)*time.Second {
			t.Fatalf("crash %d: delay %v limited %v; want %ds", i+1, d, limited, w)
		}
		now = now.Add(d + 2*time.Second)
	}
	// A healthy run (longer than resetAfter, 5 min) starts over at 1 s.
	if d, _, _ := b.Next(now, 6*time.Minute); d != time.Second {
		t.Fatalf("after a healthy run: delay %v; want 1s", d)
	}
	if d, _, _ := b.Next(now, time.Second); d != 2*time.Second {
		t.Fatalf("crash after the reset: delay %v; want 2s", d)
	}
}

// TestBackoffWindow: failures older than the window no longer count
// toward the limit.
func TestBackoffWindow(t *testing.T) {
	b := NewBackoff(protocol.RestartPolicy{Policy: protocol.RestartOnFailure, MaxRestarts: intp(3), RestartWindowMs: 10_000, RestartDelayMs: 100, MaxDelayMs: 100})
	t0 := time.Unix(1_800_000_000, 0)
	for _, at := range []time.Duration{0, time.Second, 11 * time.Second, 12 * time.Second} {
		if _, n, limited := b.Next(t0.Add(at), 0); limited {
			t.Fatalf("limited at +%v with %d in the window", at, n)
		}
	}
	if _, n, limited := b.Next(t0.Add(13*time.Second), 0); !limited || n != 3 {
		t.Fatalf("third failure within 10 s: limited %v, in window %d", limited, n)
	}
	b.Reset()
	if _, n, limited := b.Next(t0.Add(14*time.Second), 0); limited || n != 1 {
		t.Fatalf("after reset: limited %v, in window %d", limited, n)
	}
}

func TestBackoffWants(t *testing.T) {
	zero, one := intp(0), intp(1)
	for _, c := range []struct {
		policy string
		reason protocol.Reason
		code   *int
		want   bool
	}{
		{protocol.RestartOnFailure, protocol.ReasonExit, zero, false},
		{protocol.RestartOnFailure, protocol.ReasonExit, one, true},
		{protocol.RestartOnFailure, protocol.ReasonSignal, nil, true},
		{protocol.RestartOnFailure, protocol.ReasonWatchdog, nil, true},
		{protocol.RestartOnFailure, protocol.ReasonNoOutputTimeout, nil, true},
		{protocol.RestartOnFailure, protocol.ReasonSpawnError, nil, true},
		{protocol.RestartAlways, protocol.ReasonExit, zero, true},
		{protocol.RestartAlways, protocol.ReasonManualCancel, nil, false},
		{protocol.RestartAlways, protocol.ReasonStopped, nil, false},
		{protocol.RestartAlways, protocol.ReasonShutdown, nil, false},
		{protocol.RestartNever, protocol.ReasonExit, one, false},
	} {
		b := NewBackoff(protocol.RestartPolicy{Policy: c.policy})
		if got := b.Wants(c.reason, c.code); got != c.want {
			t.Errorf("%s after %s: restart %v, want %v", c.policy, c.reason, got, c.want)
		}
	}
}

// TestBackoffHugeMultiplier: the delay saturates at maxDelay, never overflows.
func TestBackoffHugeMultiplier(t *testing.T) {
	b := NewBackoff(protocol.RestartPolicy{Policy: protocol.RestartAlways, MaxRestarts: intp(0), BackoffMultiplier: 100, MaxDelayMs: 60_000})
	now := time.Unix(1_800_000_000, 0)
	var d time.Duration
	for i := 0; i < 500; i++ {
		d, _, _ = b.Next(now, 0)
		now = now.Add(time.Hour) // outside every window
	}
	if d != time.Minute {
		t.Fatalf("delay after 500 failures: %v; want the 1 min cap", d)
	}
}

// TestBackoffKeepsFewEnds: a service restarting every few milliseconds
// keeps (and journals) a bounded number of run ends: the newest
// MaxRestarts decide the limit; without a limit, MaxEndsKept serve the
// report. (A leak audit saw a crash-looping service's journal record grow
// from 92 to 239 KB in three minutes.)
func TestBackoffKeepsFewEnds(t *testing.T) {
	now := time.Now()
	unlimited := NewBackoff(protocol.RestartPolicy{Policy: protocol.RestartAlways, MaxRestarts: intp(0)})
	for i := range 5000 {
		if _, _, limited := unlimited.Next(now.Add(time.Duration(i)*time.Millisecond), 0); limited {
			t.Fatal("limited without a limit")
		}
	}
	if n := len(unlimited.Ends); n > MaxEndsKept {
		t.Fatalf("%d ends kept", n)
	}
	limited := NewBackoff(protocol.RestartPolicy{Policy: protocol.RestartAlways, MaxRestarts: intp(50)})
	for i := range 49 {
		if _, in, lim := limited.Next(now.Add(time.Duration(i)*time.Millisecond), 0); lim || in != i+1 {
			t.Fatalf("end %d: in window %d, limited %v", i+1, in, lim)
		}
	}
	if _, in, lim := limited.Next(now.Add(49*time.Millisecond), 0); !lim || in != 50 {
		t.Fatalf("50th end: in window %d, limited %v", in, lim)
	}
	if len(limited.Ends) > 50 {
		t.Fatalf("%d ends kept with a limit of 50", len(limited.Ends))
	}
}
