package zmtp

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp/zmq4peer"
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

// BenchmarkHardenedRoundTrip: REQ round trips to an echoing ROUTER: ours
// (hardened listener, per-peer reader and writer, as the server uses it)
// vs zmq4's bare ROUTER (zmq4peer), interleaved one for one in the same
// run so that machine noise hits both alike; reports p50s and their ratio
// (goal <= 1.1).
func BenchmarkHardenedRoundTrip(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := b.TempDir()
	dial := func(ep string) zmq4peer.Socket {
		req, err := zmq4peer.Dial(ctx, zmq4peer.Req, ep, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { req.Close() })
		return req
	}
	bareEP := "ipc://" + filepath.Join(dir, "bare.sock")
	bareSrv, err := zmq4peer.ListenBare(ctx, zmq4peer.Router, bareEP)
	if err != nil {
		b.Fatal(err)
	}
	defer bareSrv.Close()
	go func() {
		for {
			m, err := bareSrv.Recv()
			if err != nil || bareSrv.Send(m) != nil {
				return
			}
		}
	}()
	hardEP := "ipc://" + filepath.Join(dir, "hard.sock")
	hardSrv, err := ListenRouter(ctx, hardEP, nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer hardSrv.Close()
	go func() {
		for {
			m, err := hardSrv.Recv()
			if err != nil {
				return
			}
			_ = hardSrv.Send(m.Peer, m.Frames)
			m.Peer.Release()
		}
	}()
	bare, hard := dial(bareEP), dial(hardEP)
	msg := zmq4peer.NewMsg(make([]byte, 200))
	once := func(req zmq4peer.Socket) time.Duration {
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

// BenchmarkPubThroughput: 64 KiB events from our Publisher (hardened,
// per-subscriber queues) vs zmq4's bare PUB (zmq4peer) to one zmq4 SUB over
// ipc, same run; reports MB/s of each and the ratio (goal >= 0.9).
func BenchmarkPubThroughput(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := b.TempDir()
	const size = 64 << 10
	payload := make([]byte, size)
	n := max(b.N, 200)
	measure := func(ep string, send func(frames ...[]byte) error) float64 {
		sub, err := zmq4peer.Dial(ctx, zmq4peer.Sub, ep, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
		if err := sub.SetOption(zmq4peer.OptionSubscribe, "t"); err != nil {
			b.Fatal(err)
		}
		// Wait until the subscription is in place.
		got := make(chan struct{}, n+1)
		go func() {
			for {
				if _, err := sub.Recv(); err != nil {
					return
				}
				got <- struct{}{}
			}
		}()
		for ready := false; !ready; {
			_ = send([]byte("t"), []byte("ping"))
			select {
			case <-got:
				ready = true
			case <-time.After(20 * time.Millisecond):
			}
		}
		for len(got) > 0 {
			<-got
		}
		t0 := time.Now()
		for i := 0; i < n; i++ {
			// Pace at the subscriber's speed: never more than 64 in flight,
			// so neither queue policy comes into play.
			if i >= 64 {
				<-got
			}
			if err := send([]byte("t"), payload); err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; i < min(n, 64); i++ {
			<-got
		}
		return float64(n*size) / time.Since(t0).Seconds() / 1e6
	}
	bareEP := "ipc://" + filepath.Join(dir, "bare.sock")
	bare, err := zmq4peer.ListenBare(ctx, zmq4peer.Pub, bareEP)
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Close()
	ourEP := "ipc://" + filepath.Join(dir, "ours.sock")
	ours, err := ListenPub(ctx, ourEP, nil, 64<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer ours.Close()
	b.ResetTimer()
	mb := measure(bareEP, func(frames ...[]byte) error { return bare.Send(zmq4peer.NewMsg(frames...)) })
	mo := measure(ourEP, ours.Send)
	b.StopTimer()
	b.ReportMetric(mb, "bare-MB/s")
	b.ReportMetric(mo, "hardened-MB/s")
	b.ReportMetric(mo/mb, "ratio")
	b.ReportMetric(0, "ns/op")
}
