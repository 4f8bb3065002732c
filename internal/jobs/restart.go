package jobs

import (
	"math"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// backoff decides, for a service job, whether a run that ended is
// followed by another and after how long. It is pure: times come from the
// caller (the Manager's clock), so the schedules are unit-tested without
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
type backoff struct {
	p protocol.RestartPolicy // with defaults
	// consecutive counts restarts since the last reset.
	consecutive int
	// ends are the times of run ends within the window (oldest first).
	ends []time.Time
}

// maxEndsKept bounds the run ends a backoff keeps (and reports as
// restartsInWindow) when its policy has no restart limit.
const maxEndsKept = 1000

func newBackoff(p protocol.RestartPolicy) *backoff {
	return &backoff{p: p.WithDefaults()}
}

// wants reports whether the policy restarts after a run that ended with
// reason and exit code.
func (b *backoff) wants(reason protocol.Reason, exitCode *int) bool {
	switch reason {
	case protocol.ReasonManualCancel, protocol.ReasonStopped, protocol.ReasonShutdown, protocol.ReasonSupervisorRestart:
		return false // somebody ended it on purpose
	}
	switch b.p.Policy {
	case protocol.RestartAlways:
		return true
	case protocol.RestartOnFailure:
		return !(reason == protocol.ReasonExit && exitCode != nil && *exitCode == 0)
	}
	return false
}

// next records a run end at now after a run of ran and returns the delay
// before the next run, the number of run ends in the window (this one
// included), and whether the limit was reached (no restart).
func (b *backoff) next(now time.Time, ran time.Duration) (delay time.Duration, inWindow int, limited bool) {
	window := time.Duration(b.p.RestartWindowMs) * time.Millisecond
	keep := b.ends[:0]
	for _, t := range b.ends {
		if now.Sub(t) < window {
			keep = append(keep, t)
		}
	}
	b.ends = append(keep, now)
	// Only the newest MaxRestarts ends decide anything (without a limit,
	// maxEndsKept serve the report): a service restarting every few ms
	// would otherwise keep, and journal, every end in the window.
	keepN := maxEndsKept
	if max := *b.p.MaxRestarts; max > 0 && max < keepN {
		keepN = max
	}
	if n := len(b.ends); n > keepN {
		b.ends = append(b.ends[:0], b.ends[n-keepN:]...)
	}
	inWindow = len(b.ends)
	if max := *b.p.MaxRestarts; max > 0 && inWindow >= max {
		return 0, inWindow, true
	}
	if ran >= time.Duration(b.p.ResetAfterMs)*time.Millisecond {
		b.consecutive = 0
	}
	d := float64(b.p.RestartDelayMs) * math.Pow(b.p.BackoffMultiplier, float64(b.consecutive))
	if capMs := float64(b.p.MaxDelayMs); d > capMs || math.IsInf(d, 0) || math.IsNaN(d) {
		d = capMs
	}
	b.consecutive++
	return time.Duration(d) * time.Millisecond, inWindow, false
}

// inWindow counts run ends within the window as of now.
func (b *backoff) inWindow(now time.Time) int {
	window := time.Duration(b.p.RestartWindowMs) * time.Millisecond
	n := 0
	for _, t := range b.ends {
		if now.Sub(t) < window {
			n++
		}
	}
	return n
}

// reset forgets the failures (a manual start or restart).
func (b *backoff) reset() {
	b.consecutive = 0
	b.ends = nil
}
