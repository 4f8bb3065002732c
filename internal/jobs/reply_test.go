package jobs

import (
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// sizeMissing sizes a missing range from the events around it: an
// output event's offset and end, a terminal event's output end, the
// start of the output before seq 1, walking over events without an
// offset; from the output map where they do not tell; never exactly
// across skipped offsets, and then within the map's bound.
func TestSizeMissing(t *testing.T) {
	out := func(seq uint64, off int64, n int) protocol.Event {
		return protocol.NewOutputEvent("j", seq, 0, protocol.KindStdout, off, make([]byte, n))
	}
	other := func(seq uint64, kind protocol.Kind) protocol.Event {
		ev, _ := protocol.NewEvent("j", seq, 0, kind, struct{}{})
		return ev
	}
	end := func(seq uint64, outputEnd int64) protocol.Event {
		ev, _ := protocol.NewEvent("j", seq, 0, protocol.KindExited, protocol.ExitPayload{Reason: protocol.ReasonExit, OutputEnd: outputEnd})
		return ev
	}
	type rg = protocol.SeqRange
	for _, c := range []struct {
		name    string
		evs     []protocol.Event
		missing []rg
		last    uint64
		m       outputMap
		want    []rg
		total   int64
	}{
		{"between events", []protocol.Event{other(1, protocol.KindStarted), out(5, 100, 50), end(9, 300)},
			[]rg{{From: 2, To: 4}, {From: 6, To: 8}}, 9, outputMap{end: 300, bound: -1},
			[]rg{{From: 2, To: 4, Bytes: 100}, {From: 6, To: 8, Bytes: 150}}, 250},
		{"none held", []protocol.Event{out(2, 0, 10), other(4, protocol.KindReady), other(5, protocol.KindReady), out(7, 10, 10)},
			[]rg{{From: 3, To: 3}, {From: 6, To: 6}}, 7, outputMap{end: 20, bound: -1},
			[]rg{{From: 3, To: 3, NoOutput: true}, {From: 6, To: 6, NoOutput: true}}, 0},
		{"trailing, to the output's end", []protocol.Event{out(2, 0, 10)},
			[]rg{{From: 3, To: 6}}, 6, outputMap{end: 35, bound: -1},
			[]rg{{From: 3, To: 6, Bytes: 25}}, 25},
		{"from the map", []protocol.Event{out(7, 60, 5)},
			[]rg{{From: 5, To: 6}}, 7, outputMap{end: 65, bound: -1, at: func(seq uint64) (int64, bool) { return 40, seq == 5 }},
			[]rg{{From: 5, To: 6, Bytes: 20}}, 20},
		{"squeezed between the events around", []protocol.Event{out(2, 0, 10), other(4, protocol.KindReady), out(6, 10, 5)},
			[]rg{{From: 3, To: 3}, {From: 5, To: 5}}, 6, outputMap{end: 15, bound: -1},
			[]rg{{From: 3, To: 3, NoOutput: true}, {From: 5, To: 5, NoOutput: true}}, 0},
		{"not told: bounded", []protocol.Event{other(5, protocol.KindReady)},
			[]rg{{From: 2, To: 4}, {From: 6, To: 9}}, 9, outputMap{end: 400, bound: 500},
			[]rg{{From: 2, To: 4}, {From: 6, To: 9}}, 500},
		{"across skipped offsets", []protocol.Event{other(1, protocol.KindStarted), out(5, 100, 50), end(9, 300)},
			[]rg{{From: 2, To: 4}, {From: 6, To: 8}}, 9, outputMap{end: 300, bound: -1, skipsIn: func(a, b int64) bool { return a < 200 && b > 180 }},
			[]rg{{From: 2, To: 4, Bytes: 100}, {From: 6, To: 8}}, 250},
		{"offsets that go back (input)", []protocol.Event{out(2, 100, 10), out(4, 50, 10)},
			[]rg{{From: 3, To: 3}}, 4, outputMap{end: 60, bound: 1000},
			[]rg{{From: 3, To: 3}}, 0},
	} {
		res := protocol.SubscribeResult{Job: protocol.JobInfo{LastSeq: c.last}, Events: c.evs, Missing: append([]rg(nil), c.missing...)}
		sizeMissing(&res, c.m)
		for i, w := range c.want {
			if res.Missing[i] != w {
				t.Errorf("%s: range %d: %+v, want %+v", c.name, i, res.Missing[i], w)
			}
		}
		if res.MissingBytes != c.total {
			t.Errorf("%s: %d missing bytes, want %d", c.name, res.MissingBytes, c.total)
		}
	}
}
