package client

import (
	"fmt"
	"strings"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestApplyInSeqOrder: a subscribe result's missing ranges and events are
// delivered interleaved in seq order. A retained event between two missing
// ranges (the started event before evicted output; a restored job's output
// tail before its renumbered end) was skipped as a duplicate when every
// gap went first.
func TestApplyInSeqOrder(t *testing.T) {
	ev := func(seq uint64, kind protocol.Kind) protocol.Event {
		e, _ := protocol.NewEvent("j", seq, 0, kind, nil)
		return e
	}
	for _, c := range []struct {
		from    uint64
		missing []protocol.SeqRange
		events  []protocol.Event
		want    string
	}{
		{1, []protocol.SeqRange{{From: 2, To: 5}, {From: 7, To: 7}},
			[]protocol.Event{ev(1, protocol.KindStarted), ev(6, protocol.KindStdout), ev(8, protocol.KindExited)},
			"1:job.started gap:2-5 6:job.stdout gap:7-7 8:job.exited"},
		{4, []protocol.SeqRange{{From: 4, To: 5}},
			[]protocol.Event{ev(6, protocol.KindStdout)},
			"gap:4-5 6:job.stdout"},
		{3, []protocol.SeqRange{{From: 2, To: 5}}, // a range that began before from
			[]protocol.Event{ev(6, protocol.KindStdout)},
			"gap:3-5 6:job.stdout"},
		{1, []protocol.SeqRange{{From: 3, To: 9}}, // a trailing range (no event after it)
			[]protocol.Event{ev(1, protocol.KindStarted), ev(2, protocol.KindStdout)},
			"1:job.started 2:job.stdout gap:3-9"},
	} {
		var got []string
		f := follower{jobID: "j", next: c.from, fn: func(e protocol.Event) error {
			if e.Kind == protocol.KindGap {
				var g protocol.GapPayload
				if err := e.DecodePayload(&g); err != nil {
					return err
				}
				got = append(got, fmt.Sprintf("gap:%d-%d", g.From, g.To))
				return nil
			}
			got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Kind))
			return nil
		}}
		if _, err := f.apply(c.missing, c.events, 0, func(protocol.Event, bool) bool { return false }); err != nil {
			t.Fatal(err)
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("from %d: got %q, want %q", c.from, s, c.want)
		}
	}
}

// TestOutputOncePerOffsetAcrossRestart: after a supervisor restart, output
// at offsets already delivered (what the new supervisor publishes again
// from its journal, which the old one had published too) is not delivered
// again; output that overlaps is cut to its new part. Before a restart
// nothing is dropped.
func TestOutputOncePerOffsetAcrossRestart(t *testing.T) {
	var got []string
	f := follower{jobID: "j", next: 1, fn: func(ev protocol.Event) error {
		var p protocol.OutputPayload
		if err := ev.DecodePayload(&p); err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%d@%d:%s/%d", ev.Seq, p.Offset, p.Data, ev.Attempt))
		return nil
	}}
	out := func(seq uint64, off int64, data string) protocol.Event {
		ev := protocol.NewOutputEvent("j", seq, 0, protocol.KindStdout, off, []byte(data))
		ev.Attempt = 2
		return ev
	}
	f.seen("instance-1")
	for _, ev := range []protocol.Event{out(1, 0, "abcd"), out(2, 4, "efgh")} {
		if _, err := f.deliver(ev); err != nil {
			t.Fatal(err)
		}
	}
	f.seen("instance-2") // restarted
	for _, ev := range []protocol.Event{out(100003, 4, "efgh"), out(100004, 6, "ghij"), out(100005, 10, "kl")} {
		if _, err := f.deliver(ev); err != nil {
			t.Fatal(err)
		}
	}
	want := "1@0:abcd/2 2@4:efgh/2 100004@8:ij/2 100005@10:kl/2"
	if s := strings.Join(got, " "); s != want || f.next != 100006 {
		t.Fatalf("delivered %q (next %d), want %q", s, f.next, want)
	}
	// The restored end says the output ends at 10 (the dead supervisor had
	// published up to 12, after its last journal write): a resumed
	// service's next run writes from 10, and none of it is dropped.
	got = nil
	f.fn = func(ev protocol.Event) error {
		if ev.Kind.Terminal() {
			got = append(got, "end")
			return nil
		}
		var p protocol.OutputPayload
		if err := ev.DecodePayload(&p); err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%d@%d:%s", ev.Seq, p.Offset, p.Data))
		return nil
	}
	end, _ := protocol.NewEvent("j", 100006, 0, protocol.KindFailed, protocol.ExitPayload{Reason: protocol.ReasonSupervisorRestart, OutputEnd: 10})
	for _, ev := range []protocol.Event{end, out(100008, 10, "NEW1"), out(100009, 14, "NEW2")} {
		if _, err := f.deliver(ev); err != nil {
			t.Fatal(err)
		}
	}
	if s, want := strings.Join(got, " "), "end 100008@10:NEW1 100009@14:NEW2"; s != want {
		t.Fatalf("after the restored end: %q, want %q", s, want)
	}
}
