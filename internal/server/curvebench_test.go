package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// BenchmarkCurveVsPlain compares, in the same run, a supervisor on tcp
// loopback with PLAIN (the token) and one with CURVE, each through
// pkg/client: the control round trip (health; p50 of each, and the
// ratio, bar <= 1.5) and the output throughput of a child writing 32 MiB
// read through a Job (bar >= 0.5 of PLAIN's). Both supervisors require
// their mechanism from our own uid (--tcp-loopback-uid=false). Each
// iteration is 1000 round trips and one output run on each, alternating.
func BenchmarkCurveVsPlain(b *testing.B) {
	const trips, size = 1000, 32 << 20
	clients := map[string]*client.Client{}
	for _, mech := range []string{"plain", "curve"} {
		cfg := benchConfig(b)
		cfg.Control, cfg.Event = tcpPair(b)
		cfg.TCPLoopbackUID = false
		cfg.Jobs.RingBytes, cfg.SubscriberQueueBytes = 64<<20, 64<<20
		o := client.Options{ControlAddress: cfg.Control, EventAddress: cfg.Event, RequestTimeout: 30 * time.Second}
		if mech == "curve" {
			kp, _ := zmtp.NewCurveKeyPair()
			cfg.Curve = true
			cfg.CurveClientsFile = filepath.Join(filepath.Dir(cfg.StateDir), "curve-clients")
			if err := os.WriteFile(cfg.CurveClientsFile, []byte(kp.Public.String()+"\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			ts := startServer(b, cfg)
			o.CurveServerKey, o.CurveSecretKey = ts.curve.Key.Public.String(), kp.Secret.String()
		} else {
			ts := startServer(b, cfg)
			o.Token = ts.token
		}
		c := client.New(o)
		b.Cleanup(func() { c.Close() })
		clients[mech] = c
	}
	ctx := context.Background()
	rtt := map[string][]time.Duration{}
	tput := map[string]time.Duration{}
	cpu := map[string]time.Duration{}
	for _, c := range clients {
		if _, err := c.Health(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cmd := fmt.Sprintf("head -c %d /dev/zero", size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, mech := range []string{"plain", "curve"} {
			c := clients[mech]
			for k := 0; k < trips; k++ {
				t0 := time.Now()
				if _, err := c.Health(ctx); err != nil {
					b.Fatal(err)
				}
				rtt[mech] = append(rtt[mech], time.Since(t0))
			}
			t0 := time.Now()
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			j, err := c.Start(ctx, protocol.SpawnArgs{Shell: cmd}, 32<<20)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, j.Stdout())
			if n != size || err != nil {
				b.Fatalf("%s: read %d: %v", mech, n, err)
			}
			j.Close()
			tput[mech] += time.Since(t0)
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu[mech] += time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		}
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	pr, cr := p50(rtt["plain"]), p50(rtt["curve"])
	pt := float64(b.N*size) / tput["plain"].Seconds() / 1e6
	ct := float64(b.N*size) / tput["curve"].Seconds() / 1e6
	b.ReportMetric(pr, "plain-rtt-p50-us")
	b.ReportMetric(cr, "curve-rtt-p50-us")
	b.ReportMetric(cr/pr, "rtt-ratio")
	b.ReportMetric(pt, "plain-MB/s")
	b.ReportMetric(ct, "curve-MB/s")
	b.ReportMetric(ct/pt, "tput-ratio")
	b.ReportMetric(cpu["plain"].Seconds()/tput["plain"].Seconds(), "plain-cores")
	b.ReportMetric(cpu["curve"].Seconds()/tput["curve"].Seconds(), "curve-cores")
}
