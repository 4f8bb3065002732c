package protocol

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestFastDecodeMatchesGeneric(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte{7}, 300), bytes.Repeat([]byte{1}, 70000)} {
		ev, err := NewEvent("j-1", 12345678, 1763760000000, KindStdout, OutputPayload{Offset: 1 << 40, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Marshal(&ev)
		fast, err := DecodeEventNoCopy(b)
		if err != nil {
			t.Fatal(err)
		}
		slow, _ := DecodeEvent(b)
		if fast.JobID != slow.JobID || fast.Seq != slow.Seq || fast.Ts != slow.Ts || fast.Kind != slow.Kind || !bytes.Equal(fast.Payload, slow.Payload) {
			t.Fatalf("fast %+v slow %+v", fast, slow)
		}
		p, err := fast.Output()
		if err != nil || p.Offset != 1<<40 || !bytes.Equal(p.Data, data) {
			t.Fatalf("output %+v %v", p.Offset, err)
		}
		if _, ok := fastEvent(b); !ok {
			t.Fatal("the fast path did not take our own encoding")
		}
	}
}

// FuzzFastDecode: the fast decoder never panics, and whatever it accepts
// the generic decoder reads the same way.
func FuzzFastDecode(f *testing.F) {
	ev, _ := NewEvent("j", 3, 4, KindStderr, OutputPayload{Offset: 5, Data: []byte("hello")})
	b, _ := Marshal(&ev)
	f.Add(b)
	hb, _ := NewEvent("", 0, 4, KindHeartbeat, HeartbeatPayload{InstanceID: "x"})
	b2, _ := Marshal(&hb)
	f.Add(b2)
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := fastEvent(b)
		if !ok {
			return
		}
		slow, err := DecodeEvent(b)
		if err != nil {
			return // the generic decoder is stricter about some encodings
		}
		if fast.JobID != slow.JobID || fast.Seq != slow.Seq || fast.Kind != slow.Kind || fast.Ts != slow.Ts || fast.Attempt != slow.Attempt {
			t.Fatalf("fast %+v slow %+v", fast, slow)
		}
		if p, ok := fastOutput(fast.Payload); ok {
			var q OutputPayload
			if slow.DecodePayload(&q) == nil && (p.Offset != q.Offset || !bytes.Equal(p.Data, q.Data)) {
				t.Fatalf("payload fast %+v slow %+v", p, q)
			}
		}
	})
}

// TestFastEncodeMatchesMarshal: the hand-written encoders write what the
// generic encoder writes.
func TestFastEncodeMatchesMarshal(t *testing.T) {
	for _, c := range []struct {
		off  int64
		data []byte
	}{{0, nil}, {5, []byte{}}, {127, []byte("x")}, {128, bytes.Repeat([]byte{1}, 255)}, {1 << 20, bytes.Repeat([]byte{2}, 256)},
		{1 << 33, bytes.Repeat([]byte{3}, 70000)}, {-1, []byte("neg")}, {-200, nil}, {-40000, nil}, {-1 << 40, nil}} {
		for _, seq := range []uint64{0, 1, 200, 70000, 1 << 40} {
			fast := NewOutputEvent("j-abc", seq, 1763760000000, KindStdout, c.off, c.data)
			slow, err := NewEvent("j-abc", seq, 1763760000000, KindStdout, OutputPayload{Offset: c.off, Data: c.data})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fast.Payload, slow.Payload) {
				t.Fatalf("payload off %d len %d:\n fast %x\n slow %x", c.off, len(c.data), fast.Payload[:min(40, len(fast.Payload))], slow.Payload[:min(40, len(slow.Payload))])
			}
			want, _ := Marshal(&slow)
			if got := EncodeEvent(&fast); !bytes.Equal(got, want) {
				t.Fatalf("event seq %d: fast %x slow %x", seq, got[:min(40, len(got))], want[:min(40, len(want))])
			}
			if c.data != nil {
				buf := append(make([]byte, OutputHeadroom), c.data...)
				inPlace := NewOutputEventInPlace("j-abc", seq, 1763760000000, KindStdout, c.off, buf)
				if !bytes.Equal(inPlace.Payload, slow.Payload) || &inPlace.Payload[len(inPlace.Payload)-1] != &buf[len(buf)-1] && len(c.data) > 0 {
					t.Fatalf("in place off %d len %d: %x", c.off, len(c.data), inPlace.Payload[:min(40, len(inPlace.Payload))])
				}
			}
		}
	}
	for _, attempt := range []int{1, 127, 128, 70000} {
		ev, _ := NewEvent("j-svc", 9, 1763760000000, KindRestarting, RestartingPayload{Attempt: attempt})
		ev.Attempt = attempt
		want, _ := Marshal(&ev)
		if got := EncodeEvent(&ev); !bytes.Equal(got, want) {
			t.Fatalf("attempt %d: fast %x slow %x", attempt, got, want)
		}
		back, err := DecodeEventNoCopy(want)
		if err != nil || back.Attempt != attempt {
			t.Fatalf("attempt %d decoded as %+v, %v", attempt, back, err)
		}
		if _, ok := fastEvent(want); !ok {
			t.Fatal("the fast path did not take an event with an attempt")
		}
	}
	long := strings.Repeat("k", 300)
	ev, _ := NewEvent(long, 1, -5, Kind(long), HeartbeatPayload{InstanceID: "i"})
	want, _ := Marshal(&ev)
	if got := EncodeEvent(&ev); !bytes.Equal(got, want) {
		t.Fatalf("long strings: fast %x slow %x", got[:40], want[:40])
	}
}

// TestFastReplyAndSubscribeMatchGeneric: the no-copy decoders read replies
// and subscribe results exactly as the generic decoder does.
func TestFastReplyAndSubscribeMatchGeneric(t *testing.T) {
	code := 3
	var evs []Event
	for i := 0; i < 5; i++ {
		evs = append(evs, NewOutputEvent("j-x", uint64(i+2), 1763760000000, KindStdout, int64(i*70000), bytes.Repeat([]byte{byte(i)}, 70000)))
	}
	ex, _ := NewEvent("j-x", 7, 1763760000001, KindExited, ExitPayload{Reason: ReasonExit, ExitCode: &code})
	ex.Attempt = 2
	evs = append(evs, ex)
	res := SubscribeResult{Job: JobInfo{JobID: "j-x", State: StateExited, ExitCode: &code}, Events: evs,
		Missing: []SeqRange{{From: 1, To: 1}}, MissingBytes: 12, More: true, InstanceID: "i-1", HeartbeatIntervalMs: 1000}
	b, err := OKReply("r-1", &res)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := DecodeReplyNoCopy(b)
	if err != nil {
		t.Fatal(err)
	}
	slow, _ := DecodeReply(b)
	if fast.ID != slow.ID || fast.OK != slow.OK || !bytes.Equal(fast.Result, slow.Result) || fast.V != slow.V {
		t.Fatalf("reply: fast %+v slow %+v", fast.ID, slow.ID)
	}
	if _, ok := fastReply(b); !ok {
		t.Fatal("the fast path did not take our own reply")
	}
	got, err := DecodeSubscribeResult(fast.Result)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fastSubscribeResult(fast.Result); !ok {
		t.Fatal("the fast path did not take our own subscribe result")
	}
	var want SubscribeResult
	if err := slow.DecodeResult(&want); err != nil {
		t.Fatal(err)
	}
	if got.Job.JobID != want.Job.JobID || *got.Job.ExitCode != 3 || len(got.Events) != len(want.Events) ||
		got.MissingBytes != 12 || !got.More || len(got.Missing) != 1 || got.Missing[0] != want.Missing[0] ||
		got.InstanceID != "i-1" || want.InstanceID != "i-1" || got.HeartbeatIntervalMs != 1000 {
		t.Fatalf("subscribe: got %+v", got)
	}
	// Every field the generic decoder fills, the fast one fills alike (a
	// field added to SubscribeResult must be added to fastSubscribeResult).
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("fast and generic decoding differ:\nfast    %+v\ngeneric %+v", *got, want)
	}
	for i := range got.Events {
		g, w := got.Events[i], want.Events[i]
		if g.Seq != w.Seq || g.Kind != w.Kind || g.Attempt != w.Attempt || g.Ts != w.Ts || !bytes.Equal(g.Payload, w.Payload) {
			t.Fatalf("event %d differs", i)
		}
	}
	e := ErrorReply("r-2", Errorf(CodeNotFound, "no job"))
	fe, err := DecodeReplyNoCopy(e)
	if err != nil || fe.OK || fe.Error == nil || fe.Error.Code != CodeNotFound || fe.ID != "r-2" {
		t.Fatalf("error reply: %+v %v", fe, err)
	}
	if _, err := DecodeReplyNoCopy([]byte{0x81, 0xa2, 'o', 'k', 0xc2}); err == nil {
		t.Fatal("a reply that is neither ok nor error was accepted")
	}
}

// FuzzDecodeReply: the no-copy reply and subscribe decoders never panic.
func FuzzDecodeReply(f *testing.F) {
	res := SubscribeResult{Events: []Event{NewOutputEvent("j", 2, 3, KindStdout, 0, []byte("hi"))}}
	b, _ := OKReply("r", &res)
	f.Add(b)
	f.Add(ErrorReply("r", Errorf(CodeNotFound, "x")))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeReplyNoCopy(b); err == nil && r.OK {
			_, _ = DecodeSubscribeResult(r.Result)
		}
	})
}
