package server

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp/zmq4peer"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestSlowSubscriberIsCutOff: a SUB that never reads, while a job prints
// 100 MB: the slow subscriber is disconnected, a fast follower still
// receives every byte, and the heap stays bounded.
func TestSlowSubscriberIsCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("100 MB of output: skipped with -short")
	}
	cfg := hostileConfig(t)
	cfg.Jobs.RingBytes = 256 << 20 // keep everything: the follower must get every byte
	ts := startServer(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	slow, err := zmq4peer.Dial(ctx, zmq4peer.Sub, cfg.Event, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if err := slow.SetOption(zmq4peer.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const total = 100 << 20
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "head -c 104857600 /dev/zero"})
	if err != nil {
		t.Fatal(err)
	}
	var got int64
	var peak uint64
	done := make(chan error, 1)
	go func() {
		done <- ts.client.Follow(ctx, j.JobID, 1, func(ev protocol.Event) error {
			if ev.Kind == protocol.KindStdout {
				var p protocol.OutputPayload
				if err := ev.DecodePayload(&p); err != nil {
					return err
				}
				if p.Offset != got {
					t.Errorf("offset %d, want %d", p.Offset, got)
				}
				got += int64(len(p.Data))
			}
			return nil
		})
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		case <-tick.C: // sampling the heap while the job runs
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	if got != total {
		t.Fatalf("follower got %d bytes of %d", got, total)
	}
	grow := int64(peak) - int64(before.HeapInuse)
	// This process also runs the follower; the supervisor's own RSS bound
	// is checked with the real binary (TestSlowSubscriberRSS).
	t.Logf("heap in use grew by %d MiB at peak (ring holds up to 100 MiB here)", grow>>20)
	fams := scrape2(t, ts)
	if v := max(0, value(fams, "exec_supervisor_connections_rejected_total", "reason", "slow-subscriber")) +
		max(0, value(fams, "exec_supervisor_connections_rejected_total", "reason", "slow-peer-write-timeout")); v < 1 {
		t.Errorf("the never-reading subscriber was not cut off (%v)", v)
	}
	if v := value(fams, "exec_supervisor_subscriber_disconnects_total"); v < 1 {
		t.Errorf("subscriber disconnects not counted (%v)", v)
	}
}
