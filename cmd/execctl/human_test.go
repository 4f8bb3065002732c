package main

import (
	"testing"
	"time"
)

func TestHumanDuration(t *testing.T) {
	ms, s, m, h := time.Millisecond, time.Second, time.Minute, time.Hour
	for d, want := range map[time.Duration]string{
		0: "0s", 400 * time.Microsecond: "0s", 600 * time.Microsecond: "1ms", 850 * ms: "850ms", 999*ms + 400*time.Microsecond: "999ms",
		999*ms + 600*time.Microsecond: "1s", s: "1s", 1249 * ms: "1.2s", 1250 * ms: "1.3s", 4*s + 200*ms: "4.2s", 9960 * ms: "10s",
		42*s + 400*ms: "42s", 59*s + 700*ms: "1m", 3*m + 20*s + 965*ms: "3m21s", 3*m + 5*s: "3m05s", 10 * m: "10m",
		59*m + 59*s + 600*ms: "1h", 2*h + 5*m: "2h05m", 2*h + 4*m + 31*s: "2h05m", 23*h + 59*m + 40*s: "1d",
		3*24*h + 4*h + 10*m: "3d04h", 30 * 24 * h: "30d", -1500 * ms: "-1.5s",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
