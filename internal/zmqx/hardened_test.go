package zmqx

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// FuzzFrameParser: any byte stream, fed in any split, is accepted or
// rejected as a violation; the parser never panics and never accepts a
// frame over the limit.
func FuzzFrameParser(f *testing.F) {
	f.Add(append(make([]byte, 64), 0x04, 0x06, 0x05, 'R', 'E', 'A', 'D', 'Y'), 3)
	f.Add(append(make([]byte, 64), 0x02, 0, 0, 1, 0, 0, 0, 0, 0), 1)
	f.Add(append(make([]byte, 64), 0x06, 0, 0, 0, 0, 0, 0, 0x10, 0), 7)
	f.Fuzz(func(t *testing.T, b []byte, split int) {
		p := frameParser{max: 1 << 16, finalCmd: "READY", peerTypes: []string{"DEALER"}}
		if split <= 0 {
			split = 1
		}
		for len(b) > 0 {
			n := min(split, len(b))
			if err := p.feed(b[:n]); err != nil {
				if _, ok := err.(*violation); !ok {
					t.Fatalf("error is not a violation: %v", err)
				}
				return
			}
			if p.remain > p.max {
				t.Fatalf("accepted a frame of %d bytes", p.remain)
			}
			b = b[n:]
		}
	})
}

// BenchmarkHardenedRoundTrip: REQ/REP echo round trips through the hardened
// transport vs bare zmq4, interleaved one for one in the same run so that
// machine noise hits both alike; reports p50s and their ratio (goal <= 1.1).
func BenchmarkHardenedRoundTrip(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := b.TempDir()
	serve := func(ep string, listen func() (Socket, error)) Socket {
		rep, err := listen()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rep.Close() })
		go func() {
			for {
				m, err := rep.Recv()
				if err != nil || rep.Send(m) != nil {
					return
				}
			}
		}()
		req, err := Dial(ctx, Req, ep, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { req.Close() })
		return req
	}
	bareEP := "ipc://" + filepath.Join(dir, "bare.sock")
	hardEP := "ipc://" + filepath.Join(dir, "hard.sock")
	bare := serve(bareEP, func() (Socket, error) { return ListenBare(ctx, Rep, bareEP) })
	hard := serve(hardEP, func() (Socket, error) { return Listen(ctx, Rep, hardEP, nil) })
	msg := NewMsg(make([]byte, 200))
	once := func(req Socket) time.Duration {
		t0 := time.Now()
		if err := req.Send(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := req.Recv(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	lb := make([]time.Duration, 0, b.N)
	lh := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lb = append(lb, once(bare))
		lh = append(lh, once(hard))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / 1000
	}
	pb, ph := p50(lb), p50(lh)
	b.ReportMetric(pb, "bare-p50-µs")
	b.ReportMetric(ph, "hardened-p50-µs")
	b.ReportMetric(ph/pb, "ratio")
	b.ReportMetric(0, "ns/op")
}
