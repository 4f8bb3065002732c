package openclaw

import (
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// recordingSink records what Events sends, for the topics it wants.
type recordingSink struct {
	want    func(topic string) bool
	sent    []string // "topic body"
	encoded int
}

func (s *recordingSink) Offer(topic []byte, body func() []byte) {
	if !s.want(string(topic)) {
		return
	}
	s.encoded++
	if b := body(); b != nil {
		s.sent = append(s.sent, string(topic)+" "+string(b))
	}
}

// TestEventsPublish: native events go out as dialect events on
// exec:<jobId>, seqs from 0, characters split between events whole,
// native-only kinds and heartbeats not at all.
func TestEventsPublish(t *testing.T) {
	e := NewEvents()
	s := &recordingSink{want: func(topic string) bool { return topic == "exec:j1" }}
	hb, _ := protocol.NewEvent("", 0, 5, protocol.KindHeartbeat, protocol.HeartbeatPayload{InstanceID: "x"})
	gap, _ := protocol.NewEvent("j1", 0, 1600, protocol.KindGap, protocol.GapPayload{From: 6, To: 8, Count: 3})
	for _, ev := range []protocol.Event{
		hb,
		started("j1", 77, "/bin/bash", "-c", "printf caf"),
		output("j1", 2, protocol.KindStdout, "caf\xc3"),
		output("j2", 2, protocol.KindStdout, "\xa9"), // (another job's stream)
		output("j1", 3, protocol.KindStderr, "\xa9"), // (another stream)
		output("j1", 4, protocol.KindStdout, "\xa9!"),
		{V: protocol.Version, JobID: "j1", Seq: 5, Ts: 1500, Kind: protocol.KindOwnershipEscape, Payload: []byte{0x80}},
		gap,
		ended("j1", 9, protocol.ExitPayload{Reason: protocol.ReasonManualCancel, Signal: "SIGTERM"}),
	} {
		e.Publish(&ev, s)
	}
	want := []string{
		`exec:j1 {"kind":"job.started","jobId":"j1","seq":0,"ts":1000,"pid":77,"command":"printf caf"}`,
		`exec:j1 {"kind":"job.stdout","jobId":"j1","seq":1,"ts":1002,"data":"caf"}`,
		`exec:j1 {"kind":"job.stderr","jobId":"j1","seq":2,"ts":1003,"data":"` + "\uFFFD" + `"}`,
		`exec:j1 {"kind":"job.stdout","jobId":"j1","seq":3,"ts":1004,"data":"é!"}`,
		`exec:j1 {"kind":"job.gap","jobId":"j1","seq":5,"ts":1600,"droppedCount":3,"fromSeq":5,"toSeq":7}`,
		`exec:j1 {"kind":"job.exited","jobId":"j1","seq":8,"ts":2000,"exitCode":null,"exitSignal":"SIGTERM","reason":"signal"}`,
	}
	if len(s.sent) != len(want) {
		t.Fatalf("sent %d events, want %d:\n%q", len(s.sent), len(want), s.sent)
	}
	for i := range want {
		if s.sent[i] != want[i] {
			t.Errorf("event %d:\n got %s\nwant %s", i, s.sent[i], want[i])
		}
	}
	if len(e.tails) != 0 {
		t.Fatalf("tails left after the job ended: %v", e.tails)
	}

	// Nobody subscribed: nothing encoded; tails kept all the same, so
	// that a subscriber arriving meanwhile sees the character whole.
	quiet := &recordingSink{want: func(string) bool { return false }}
	e.Publish(ptr(output("j3", 2, protocol.KindStdout, "x\xe4\xbd")), quiet)
	late := &recordingSink{want: func(string) bool { return true }}
	e.Publish(ptr(output("j3", 3, protocol.KindStdout, "\xa0")), late)
	if quiet.encoded != 0 || len(late.sent) != 1 || late.sent[0] != `exec:j3 {"kind":"job.stdout","jobId":"j3","seq":2,"ts":1003,"data":"你"}` {
		t.Fatalf("quiet %d, late %q", quiet.encoded, late.sent)
	}
}

// TestEventsTailsBounded: jobs that stop inside a character (and never
// end) do not grow the tails without bound.
func TestEventsTailsBounded(t *testing.T) {
	e := NewEvents()
	s := &recordingSink{want: func(string) bool { return false }}
	for i := range maxTails * 3 {
		e.Publish(ptr(output("j"+string(rune('a'+i%26))+string(rune(i)), 2, protocol.KindStdout, "\xc3")), s)
	}
	if len(e.tails) > maxTails {
		t.Fatalf("%d tails kept, bound %d", len(e.tails), maxTails)
	}
}

func ptr[T any](v T) *T { return &v }
