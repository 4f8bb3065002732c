package main

import (
	"fmt"
	"time"
)

// Sizes and durations as execctl shows them to people (tables, status,
// history, top). --json prints the wire's numbers instead.

// humanBytes prints a size with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// humanDuration prints d rounded to two units at most, as people read
// it: 850ms, 4.2s, 42s, 3m21s, 2h05m, 3d04h; a second unit of 0 is left
// out (10m, 2h, 1s). Rounded, not truncated: 59.7s is 1m.
func humanDuration(d time.Duration) string {
	if d < 0 {
		return "-" + humanDuration(-d)
	}
	const day = 24 * time.Hour
	// two prints r in units big and small ("3m21s"; "10m" for "10m00s").
	two := func(r, big, small time.Duration, bu, su string) string {
		if r%big == 0 {
			return fmt.Sprintf("%d%s", r/big, bu)
		}
		return fmt.Sprintf("%d%s%02d%s", r/big, bu, r%big/small, su)
	}
	switch ms := d.Round(time.Millisecond); {
	case ms == 0:
		return "0s"
	case ms < time.Second:
		return fmt.Sprintf("%dms", ms.Milliseconds())
	}
	if r := d.Round(100 * time.Millisecond); r < 10*time.Second {
		if tenths := r / (100 * time.Millisecond); tenths%10 != 0 {
			return fmt.Sprintf("%d.%ds", tenths/10, tenths%10)
		}
		return fmt.Sprintf("%ds", r/time.Second)
	}
	if r := d.Round(time.Second); r < time.Minute {
		return fmt.Sprintf("%ds", r/time.Second)
	} else if r < time.Hour {
		return two(r, time.Minute, time.Second, "m", "s")
	}
	if r := d.Round(time.Minute); r < day {
		return two(r, time.Hour, time.Minute, "h", "m")
	}
	return two(d.Round(time.Hour), day, time.Hour, "d", "h")
}

// msDuration is a wire field of milliseconds as a time.Duration.
func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
