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
