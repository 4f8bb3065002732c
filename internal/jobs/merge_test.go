package jobs

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// chanSink hands the published events to a test, in order. Publish runs
// under the job's lock and must not block: a test that lets more than
// the buffer's worth pile up fails (overflow).
type chanSink struct {
	ch       chan protocol.Event
	overflow atomic.Bool
}

func newChanSink() *chanSink { return &chanSink{ch: make(chan protocol.Event, 4096)} }

func (s *chanSink) Publish(ev protocol.Event) {
	select {
	case s.ch <- ev:
	default:
		s.overflow.Store(true)
	}
}

// next returns the next event of one of kinds, failing the test when none
// comes within d.
func (s *chanSink) next(t *testing.T, d time.Duration, kinds ...protocol.Kind) protocol.Event {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case ev := <-s.ch:
			for _, k := range kinds {
				if ev.Kind == k {
					return ev
				}
			}
		case <-deadline.C:
			t.Fatalf("no %v event within %v (overflow: %v)", kinds, d, s.overflow.Load())
		}
	}
}

func outputData(t *testing.T, ev protocol.Event) string {
	t.Helper()
	p, err := ev.Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(p.Data)
}

// waitRead waits until the job has read n bytes of stdout and e of stderr.
func waitRead(t *testing.T, j *Job, n, e int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j.mu.Lock()
		read := j.out.streamN == [2]int64{n, e}
		j.mu.Unlock()
		if read {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's output was never read (want %d and %d bytes)", n, e)
		}
		time.Sleep(5 * time.Millisecond) // polling the job's counters
	}
}

// TestFirstOutputNotMerged: a job's first output goes out at once, long
// before its merge window (a minute here) would have ended; output that
// follows within the window waits for it; output after a whole quiet
// window (the engine's clock moved on by one) goes out at once again,
// with what waited before it.
func TestFirstOutputNotMerged(t *testing.T) {
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	sink := newChanSink()
	m := New(Config{MergeInterval: time.Minute}, nil, sink, WithClock(clock))
	defer m.Close(context.Background())
	j, _, err := m.SpawnJob(protocol.SpawnArgs{Shell: "printf a; read l; printf b; read l; printf c; exec sleep 300", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Kill(protocol.ReasonManualCancel, syscall.SIGKILL)
	start := time.Now()
	if got := outputData(t, sink.next(t, 20*time.Second, protocol.KindStdout)); got != "a" {
		t.Fatalf("first output %q, want \"a\"", got)
	}
	t.Logf("first output after %v (window 1m)", time.Since(start))

	if _, err := j.Write([]byte("\n"), false); err != nil {
		t.Fatal(err)
	}
	waitRead(t, j, 2, 0)
	if info := j.Info(); info.OutputEnd != 1 {
		t.Fatalf("output end %d: \"b\", read within the window, was published before it ended", info.OutputEnd)
	}

	skew.Add(int64(2 * time.Minute)) // (a whole window since the last flush)
	if _, err := j.Write([]byte("\n"), false); err != nil {
		t.Fatal(err)
	}
	if got := outputData(t, sink.next(t, 20*time.Second, protocol.KindStdout)); got != "bc" {
		t.Fatalf("output after a quiet window %q, want \"bc\" (the waiting \"b\" with it)", got)
	}
}

// TestChattyOutputMergedPerWindow: a job printing a line every few
// milliseconds makes at most one output event per merge window: its
// events (but the last, flushed at its exit) are a window apart or more,
// whatever the machine's load, and nothing is lost.
func TestChattyOutputMergedPerWindow(t *testing.T) {
	const window, lines = 100 * time.Millisecond, 200
	sink := newChanSink()
	m := New(Config{MergeInterval: window}, nil, sink)
	defer m.Close(context.Background())
	j, _, err := m.SpawnJob(protocol.SpawnArgs{Shell: fmt.Sprintf("for i in $(seq %d); do echo $i; sleep 0.003; done", lines)})
	if err != nil {
		t.Fatal(err)
	}
	var ts []int64
	var out strings.Builder
	for {
		ev := sink.next(t, 60*time.Second, protocol.KindStdout, protocol.KindStderr, protocol.KindExited, protocol.KindFailed)
		if ev.JobID != j.ID() {
			continue
		}
		if ev.Kind.Terminal() {
			break
		}
		if ev.Kind != protocol.KindStdout {
			t.Fatalf("%s event: %q", ev.Kind, outputData(t, ev))
		}
		ts = append(ts, ev.Ts)
		out.WriteString(outputData(t, ev))
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if out.String() != want.String() {
		t.Fatalf("output %q, want %q", out.String(), want.String())
	}
	for k := 1; k < len(ts)-1; k++ { // (ts in ms)
		if gap := time.Duration(ts[k]-ts[k-1]) * time.Millisecond; gap < window-time.Millisecond {
			t.Fatalf("events %d and %d of %d only %v apart (window %v): %v", k, k+1, len(ts), gap, window, ts)
		}
	}
	span := time.Duration(ts[len(ts)-1]-ts[0]) * time.Millisecond
	if len(ts) > lines/2 {
		t.Fatalf("%d events for %d lines in %v (window %v): not merged", len(ts), lines, span, window)
	}
	t.Logf("%d events for %d lines in %v (window %v)", len(ts), lines, span, window)
}
