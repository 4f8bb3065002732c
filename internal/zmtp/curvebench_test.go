package zmtp

import (
	"context"
	"testing"
	"time"
)

// BenchmarkCurveEcho: one DEALER round trip of a 100-byte message with
// our ROUTER over tcp loopback, PLAIN and CURVE.
func BenchmarkCurveEcho(b *testing.B) {
	s := &curveSetup{rejects: newRejections()}
	s.server, _ = NewCurveKeyPair()
	s.client, _ = NewCurveKeyPair()
	for _, mech := range []string{"plain", "curve"} {
		b.Run(mech, func(b *testing.B) {
			pol := &Policy{Token: "tok"}
			o := DialOptions{Timeout: time.Second, Token: "tok"}
			if mech == "curve" {
				pol = &Policy{Curve: &CurveServer{Key: s.server}}
				o = DialOptions{Timeout: time.Second, Curve: &CurveClient{Server: s.server.Public, Key: s.server}}
			}
			r, err := ListenRouter(context.Background(), "tcp://127.0.0.1:0", pol, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			r.SetHandler(func(in Incoming) { _ = r.Send(in.Peer, in.Frames); in.Peer.Release() })
			c, err := DialClientWith(context.Background(), "DEALER", "tcp://"+r.Addr().String(), o)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			msg := make([]byte, 100)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := c.Send(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := c.Recv(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCurveSeal: boxing alone, 64 KiB frames (the crypto's own
// ceiling on this machine: XSalsa20-Poly1305 from x/crypto).
func BenchmarkCurveSeal(b *testing.B) {
	cc, _, _ := curvePair(b)
	data := make([]byte, 64<<10)
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		_ = cc.sealFrame(0, data)
	}
}
