package protocol

import (
	"bytes"
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
