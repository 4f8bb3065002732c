package lifecycle

import (
	"math"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Backoff is a service's restart policy at work: whether a run that
// ended is followed by another and after how long (the Verdict the
// engine hands RunEnded). Like Step it is pure: times come from the
// caller (the engine's clock), so the schedules are tested without
// waiting.
//
// The delay starts at RestartDelay and is multiplied by BackoffMultiplier
// for each consecutive restart, capped at MaxDelay; a run that lasted
// ResetAfter or longer counts as healthy and resets it (daemon-supervisor
// design). Every run end that would be restarted is counted in the
// restart window; the one that brings the count within RestartWindow to
// MaxRestarts ends supervision instead (app-supervision design: with the
// default 5, a job failing at once is restarted after 1, 2, 4 and 8 s and
// its fifth failure disables it). MaxRestarts 0 never ends it.
type Backoff struct {
	Policy protocol.RestartPolicy // with defaults
	// Consecutive counts restarts since the last reset.
	Consecutive int
	// Ends are the times of run ends within the window (oldest first).
	Ends []time.Time
}

// MaxEndsKept bounds the run ends a backoff keeps (and reports as
// restartsInWindow) when its policy has no restart limit.
const MaxEndsKept = 1000

// NewBackoff is the backoff of a service with policy p (defaults filled
// in).
func NewBackoff(p protocol.RestartPolicy) *Backoff {
	return &Backoff{Policy: p.WithDefaults()}
}

// Wants reports whether the policy restarts after a run that ended with
// reason and exit code.
func (b *Backoff) Wants(reason protocol.Reason, exitCode *int) bool {
	switch reason {
	case protocol.ReasonManualCancel, protocol.ReasonStopped, protocol.ReasonShutdown, protocol.ReasonSupervisorRestart:
		return false // somebody ended it on purpose
	}
	switch b.Policy.Policy {
	case protocol.RestartAlways:
		return true
	case protocol.RestartOnFailure:
		return !(reason == protocol.ReasonExit && exitCode != nil && *exitCode == 0)
	}
	return false
}

// Next records a run end at now after a run of ran and returns the delay
// before the next run, the number of run ends in the window (this one
// included), and whether the limit was reached (no restart).
func (b *Backoff) Next(now time.Time, ran time.Duration) (delay time.Duration, inWindow int, limited bool) {
	window := time.Duration(b.Policy.RestartWindowMs) * time.Millisecond
	keep := b.Ends[:0]
	for _, t := range b.Ends {
		if now.Sub(t) < window {
			keep = append(keep, t)
		}
	}
	b.Ends = append(keep, now)
	// Only the newest MaxRestarts ends decide anything (without a limit,
	// MaxEndsKept serve the report): a service restarting every few ms
	// would otherwise keep, and journal, every end in the window.
	keepN := MaxEndsKept
	if max := *b.Policy.MaxRestarts; max > 0 && max < keepN {
		keepN = max
	}
	if n := len(b.Ends); n > keepN {
		b.Ends = append(b.Ends[:0], b.Ends[n-keepN:]...)
	}
	inWindow = len(b.Ends)
	if max := *b.Policy.MaxRestarts; max > 0 && inWindow >= max {
		return 0, inWindow, true
	}
	if ran >= time.Duration(b.Policy.ResetAfterMs)*time.Millisecond {
		b.Consecutive = 0
	}
	d := float64(b.Policy.RestartDelayMs) * math.Pow(b.Policy.BackoffMultiplier, float64(b.Consecutive))
	if capMs := float64(b.Policy.MaxDelayMs); d > capMs || math.IsInf(d, 0) || math.IsNaN(d) {
		d = capMs
	}
	b.Consecutive++
	return time.Duration(d) * time.Millisecond, inWindow, false
}

// InWindow counts run ends within the window as of now.
func (b *Backoff) InWindow(now time.Time) int {
	window := time.Duration(b.Policy.RestartWindowMs) * time.Millisecond
	n := 0
	for _, t := range b.Ends {
		if now.Sub(t) < window {
			n++
		}
	}
	return n
}

// Reset forgets the failures (a manual start or restart).
func (b *Backoff) Reset() {
	b.Consecutive = 0
	b.Ends = nil
}
