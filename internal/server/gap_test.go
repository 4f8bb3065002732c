package server

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestGapsAreAnnouncedAndBackfilled: with a tiny event queue, events are
// dropped at the high water mark; job.gap events name them; Follow
// backfills and reassembles exactly the bytes written, in order, once.
func TestGapsAreAnnouncedAndBackfilled(t *testing.T) {
	cfg := testConfig(t)
	cfg.EventHWM = 2
	cfg.EventsQueuedOnly = true // every event through the tiny queue
	cfg.Jobs.MergeMaxBytes = 512
	cfg.Jobs.MergeInterval = 0
	cfg.Jobs.RingBytes = 16 << 20
	ts := startServer(t, cfg)
	ctx := ctxT(t, 60*time.Second)
	// 20000 numbered lines (~250 KB), written as fast as the shell can.
	var want bytes.Buffer
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&want, "line %06d\n", i)
	}
	// Two jobs print at once into the tiny queue (EventsQueuedOnly: no
	// event skips it), which overflows.
	follow := func(id string) ([]byte, error) {
		var got bytes.Buffer
		var next int64
		lastSeq := uint64(0)
		err := ts.client.Follow(ctx, id, 1, func(ev protocol.Event) error {
			if ev.Kind == protocol.KindGap {
				return fmt.Errorf("follow reported lost events although all are retained: %s", ev.Payload)
			}
			if ev.Seq != lastSeq+1 {
				return fmt.Errorf("seq %d after %d", ev.Seq, lastSeq)
			}
			lastSeq = ev.Seq
			if ev.Kind == protocol.KindStdout {
				var p protocol.OutputPayload
				if err := ev.DecodePayload(&p); err != nil {
					return err
				}
				if p.Offset != next {
					return fmt.Errorf("offset %d, want %d", p.Offset, next)
				}
				next += int64(len(p.Data))
				got.Write(p.Data)
			}
			return nil
		})
		return got.Bytes(), err
	}
	var ids []string
	for i := 0; i < 2; i++ {
		job, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: `i=0; while [ $i -lt 20000 ]; do printf 'line %06d\n' $i; i=$((i+1)); done`})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, job.JobID)
	}
	otherErr := make(chan error, 1)
	go func() {
		b, err := follow(ids[1])
		if err == nil && !bytes.Equal(b, want.Bytes()) {
			err = fmt.Errorf("second job: %d bytes differ from the %d written", len(b), want.Len())
		}
		otherErr <- err
	}()
	b, err := follow(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := <-otherErr; err != nil {
		t.Fatal(err)
	}
	got := bytes.NewBuffer(b)
	if sha256.Sum256(got.Bytes()) != sha256.Sum256(want.Bytes()) {
		t.Fatalf("reassembled %d bytes, want %d; they differ", got.Len(), want.Len())
	}
	if d := ts.pub.dropped.Load(); d == 0 || ts.pub.gapEvents.Load() == 0 {
		t.Fatalf("the test must force drops: dropped %d, gap events %d", d, ts.pub.gapEvents.Load())
	} else {
		t.Logf("%d events dropped at the HWM, %d gap events, all recovered", d, ts.pub.gapEvents.Load())
	}
}

// TestPublisherGapRanges checks the queue's drop bookkeeping directly.
func TestPublisherGapRanges(t *testing.T) {
	p := newPublisher(discardLog(), nil, 3)
	ev := func(job string, seq uint64) protocol.Event {
		return protocol.Event{JobID: job, Seq: seq, Kind: protocol.KindStdout}
	}
	for s := uint64(1); s <= 5; s++ {
		p.Publish(ev("a", s))
	}
	p.Publish(ev("b", 1)) // drops a3
	// queue: a4 a5 b1; dropped a1..a3
	var kinds []string
	for {
		e, ok := p.next()
		if !ok {
			break
		}
		if e.Kind == protocol.KindGap {
			var g protocol.GapPayload
			_ = e.DecodePayload(&g)
			kinds = append(kinds, fmt.Sprintf("gap %s %d-%d", e.JobID, g.From, g.To))
		} else {
			kinds = append(kinds, fmt.Sprintf("%s%d", e.JobID, e.Seq))
		}
	}
	want := "[gap a 1-3 a4 a5 b1]"
	if fmt.Sprint(kinds) != want {
		t.Fatalf("got %v want %s", kinds, want)
	}
	if p.dropped.Load() != 3 {
		t.Fatalf("dropped %d", p.dropped.Load())
	}
}
