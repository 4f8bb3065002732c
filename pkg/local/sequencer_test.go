package local

import (
	"fmt"
	"strings"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestSequencer: pages of events become one stream in seq order, each
// event once, missing ranges as gaps where they fall (a range the
// follower is already inside of without its bytes), up to the terminal
// event; taken follows the output given.
func TestSequencer(t *testing.T) {
	var got []string
	s := sequencer{jobID: "j", next: 1, fn: func(ev protocol.Event) error {
		if ev.Kind == protocol.KindGap {
			var g protocol.GapPayload
			if err := ev.DecodePayload(&g); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("gap%d-%d/%d", g.From, g.To, g.Bytes))
			return nil
		}
		got = append(got, fmt.Sprintf("%s%d", ev.Kind, ev.Seq))
		return nil
	}}
	out := func(seq uint64, off int64, data string) protocol.Event {
		return protocol.NewOutputEvent("j", seq, 0, protocol.KindStdout, off, []byte(data))
	}
	started, _ := protocol.NewEvent("j", 1, 0, protocol.KindStarted, protocol.StartedPayload{Pid: 1})
	exited, _ := protocol.NewEvent("j", 9, 0, protocol.KindExited, protocol.ExitPayload{Reason: protocol.ReasonExit})

	// A started event before evicted output, then output, then a range
	// missing after the last event of the page.
	done, err := s.apply([]protocol.SeqRange{{From: 2, To: 3, Bytes: 10}, {From: 5, To: 6, Bytes: 4}},
		[]protocol.Event{started, out(4, 10, "abc")})
	if done || err != nil || s.next != 7 || s.taken != 13 {
		t.Fatalf("first page: done %v, %v, next %d, taken %d", done, err, s.next, s.taken)
	}
	// Again from inside a range (its bytes then not said), a duplicate,
	// the end, and what comes after it.
	s.next = 6
	done, err = s.apply([]protocol.SeqRange{{From: 5, To: 7, Bytes: 8}},
		[]protocol.Event{out(4, 10, "abc"), out(8, 20, "de"), exited, out(10, 22, "f")})
	if !done || err != nil || s.next != 10 || s.taken != 22 {
		t.Fatalf("second page: done %v, %v, next %d, taken %d", done, err, s.next, s.taken)
	}
	want := "job.started1 gap2-3/10 job.stdout4 gap5-6/4 gap6-7/0 job.stdout8 job.exited9"
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("delivered %s\nwant      %s", g, want)
	}
}
