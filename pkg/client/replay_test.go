package client_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp/zmq4peer"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestOverlappingReplaysNeverDuplicate: the client's event socket is fed
// by a relay (real ZeroMQ SUB -> PUB between the supervisor and the
// client) that republishes every event, replays the last ten again every
// seventh one, and drops every thirteenth (so the client also backfills
// over the control socket, overlapping with the replays). The client must
// still deliver every seq exactly once, in order, and the exact bytes.
func TestOverlappingReplaysNeverDuplicate(t *testing.T) {
	// The ring holds the whole output: any loss would be the client's.
	s := start(t, func(c *server.Config) { c.Jobs.RingBytes = 64 << 20 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	in, err := zmq4peer.Dial(ctx, zmq4peer.Sub, s.cfg.Event, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := in.SetOption(zmq4peer.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	relayAddr := "ipc://" + filepath.Join(t.TempDir(), "relay.sock")
	out, err := zmq4peer.ListenBare(ctx, zmq4peer.Pub, relayAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var replayed, dropped atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var hist []zmq4peer.Msg
		for i := 1; ; i++ {
			m, err := in.Recv()
			if err != nil {
				return
			}
			if i%13 == 0 {
				dropped.Add(1)
			} else if out.Send(m) != nil {
				return
			}
			hist = append(hist, m)
			if len(hist) > 10 {
				hist = hist[1:]
			}
			if i%7 == 0 {
				for _, old := range hist {
					if out.Send(old) != nil {
						return
					}
					replayed.Add(1)
				}
			}
		}
	}()
	defer func() { in.Close(); out.Close(); wg.Wait() }()

	c := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: relayAddr, RequestTimeout: 10 * time.Second})
	defer c.Close()
	args, want := patterned(8 << 20)
	job, err := c.Spawn(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	var last uint64
	var exit protocol.ExitPayload
	err = c.Follow(ctx, job.JobID, 1, func(ev protocol.Event) error {
		if ev.Seq != last+1 {
			t.Fatalf("seq %d after %d: delivered out of order or twice", ev.Seq, last)
		}
		last = ev.Seq
		switch ev.Kind {
		case protocol.KindStdout:
			p, err := ev.Output()
			if err != nil {
				return err
			}
			h.Write(p.Data)
		case protocol.KindExited, protocol.KindFailed:
			return ev.DecodePayload(&exit)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got [32]byte
	copy(got[:], h.Sum(nil))
	if got != want || exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Fatalf("sha256 mismatch or bad exit %+v", exit)
	}
	if replayed.Load() == 0 || dropped.Load() == 0 {
		t.Fatalf("the relay neither replayed (%d) nor dropped (%d): the test proved nothing", replayed.Load(), dropped.Load())
	}
	t.Logf("%d seqs delivered once each; the relay replayed %d events and dropped %d", last, replayed.Load(), dropped.Load())
}

// TestEventSocketRestartMidJob: the supervisor's event socket is closed
// (every subscriber cut off) and opened again while a job prints; the
// client's reader still gets every line exactly once and in order, and
// its follower subscribes to the new socket again.
func TestEventSocketRestartMidJob(t *testing.T) {
	s := start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const lines = 120 // ~6 s at 50 ms per line
	j, err := s.c.Start(ctx, protocol.SpawnArgs{Shell: fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line $i"; i=$((i+1)); sleep 0.05; done`, lines)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	r := bufio.NewReader(j.Stdout())
	restarted := false
	for i := 1; i <= lines; i++ {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if want := fmt.Sprintf("line %d\n", i); l != want {
			t.Fatalf("got %q; want %q", l, want)
		}
		if i == 10 {
			if s.EventSubscribers() == 0 {
				t.Fatal("the client never subscribed to events")
			}
			if err := s.RestartEventSocket(); err != nil {
				t.Fatal(err)
			}
			restarted = true
			if n := s.EventSubscribers(); n != 0 {
				t.Fatalf("%d subscribers right after the restart", n)
			}
		}
		if restarted && i == lines-20 && s.EventSubscribers() == 0 {
			// The follower re-dials after 3 s of silence; by now (5 s
			// later) it must be back on the new socket.
			t.Fatal("the client did not subscribe to the restarted event socket")
		}
	}
	if _, err := r.ReadString('\n'); err != io.EOF {
		t.Fatalf("after the last line: %v", err)
	}
	exit, err := j.Wait(ctx)
	if err != nil || exit.Reason != protocol.ReasonExit {
		t.Fatalf("exit %+v %v", exit, err)
	}
}

// TestFollowGoesThroughEarlierSupervisionPeriods: a service that ended
// and was started again has two terminal events; following from seq 1
// delivers both and ends at the last one.
func TestFollowGoesThroughEarlierSupervisionPeriods(t *testing.T) {
	s := start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	two := 2
	info, err := s.c.Spawn(ctx, protocol.SpawnArgs{Shell: "echo run; exit 1",
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, RestartDelayMs: 10, MaxRestarts: &two}})
	if err != nil {
		t.Fatal(err)
	}
	terminals := func() (n int, last protocol.ExitPayload) {
		err := s.c.Follow(ctx, info.JobID, 1, func(ev protocol.Event) error {
			if ev.Kind.Terminal() {
				n++
				return ev.DecodePayload(&last)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return n, last
	}
	if n, last := terminals(); n != 1 || last.Reason != protocol.ReasonRestartLimit {
		t.Fatalf("first period: %d terminal events, last %+v", n, last)
	}
	if _, err := s.c.StartService(ctx, info.JobID); err != nil {
		t.Fatal(err)
	}
	if n, last := terminals(); n != 2 || last.Reason != protocol.ReasonRestartLimit {
		t.Fatalf("after a second period: %d terminal events, last %+v", n, last)
	}
	st, err := s.c.Status(ctx, info.JobID)
	if err != nil || st.Attempt != 4 || st.State != protocol.StateExited {
		t.Fatalf("status %+v %v", st, err)
	}
}
