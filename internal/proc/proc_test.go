package proc

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestStartTicks: StartTicks agrees with a plain parse of
// /proc/self/stat, and odd comm fields do not confuse it.
func TestStartTicks(t *testing.T) {
	got, err := StartTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile("/proc/self/stat")
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	want, _ := strconv.ParseUint(f[19], 10, 64)
	if got != want {
		t.Fatalf("start ticks %d; want %d", got, want)
	}
	line := "42 (a) b) c (d) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 12345 99 100\\n"
	if v, err := parseStartTicks([]byte(strings.ReplaceAll(line, "\\n", "\n")), 42); err != nil || v != 12345 {
		t.Fatalf("odd comm: %d %v", v, err)
	}
	if _, err := parseStartTicks([]byte("42 (x) S 1 2"), 42); err == nil {
		t.Fatal("short line accepted")
	}
	if _, err := StartTicks(1 << 30); err == nil {
		t.Fatal("missing pid accepted")
	}
}
