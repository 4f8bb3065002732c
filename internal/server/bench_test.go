package server

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp/zmq4peer"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// BenchmarkSpawnTrue measures jobs/s for /bin/true spawned and waited for
// through the supervisor (spawn request, then its job.exited event) against
// os/exec Start+Wait in the same run. Reported: both rates and their ratio
// (goal >= 0.8); in the same rounds, spawn with waitMs (one round trip, no
// event socket) through a second supervisor: wait-jobs/s and wait-ratio.
func BenchmarkSpawnTrue(b *testing.B) {
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("concurrency=%d", par), func(b *testing.B) { benchSpawnTrue(b, par) })
	}
}

func benchSpawnTrue(b *testing.B, par int) {
	ts := startServer(b, benchConfig(b))
	waits := startServer(b, benchConfig(b)) // (see SpawnWaitRunner)
	r := proctest.SpawnTrue(b, ts.client, ts.cfg.Event, b.N, par, proctest.SpawnWaitRunner(waits.client))
	proctest.ReportRates(b, r[0].Rate, r[1].Rate, "jobs/s")
	b.ReportMetric(r[2].Rate, "wait-jobs/s")
	b.ReportMetric(r[2].Rate/r[0].Rate, "wait-ratio")
}

// BenchmarkControlRoundTrip measures health round trips through
// pkg/client against a bare zmq4 REQ/REP echo on the same transport (ipc),
// reporting p50/p99 of each and the p50 ratio.
func BenchmarkControlRoundTrip(b *testing.B) {
	cfg := benchConfig(b)
	ts := startServer(b, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	echoEP := "ipc://" + filepath.Join(filepath.Dir(cfg.Control[len("ipc://"):]), "echo.sock")
	rep, err := zmq4peer.ListenBare(ctx, zmq4peer.Rep, echoEP)
	if err != nil {
		b.Fatal(err)
	}
	defer rep.Close()
	go func() {
		for {
			m, err := rep.Recv()
			if err != nil {
				return
			}
			if rep.Send(m) != nil {
				return
			}
		}
	}()
	req, err := zmq4peer.Dial(ctx, zmq4peer.Req, echoEP, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer req.Close()
	body, _ := protocol.EncodeRequest("x", protocol.OpHealth, nil)
	if _, err := ts.client.Health(ctx); err != nil {
		b.Fatal(err)
	}
	raw := make([]time.Duration, 0, b.N)
	sup := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := req.Send(zmq4peer.NewMsg(body)); err != nil {
			b.Fatal(err)
		}
		if _, err := req.Recv(); err != nil {
			b.Fatal(err)
		}
		raw = append(raw, time.Since(t0))
	}
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := ts.client.Health(ctx); err != nil {
			b.Fatal(err)
		}
		sup = append(sup, time.Since(t0))
	}
	b.StopTimer()
	p := proctest.Percentile
	b.ReportMetric(p(raw, 0.5), "raw-p50-µs")
	b.ReportMetric(p(raw, 0.99), "raw-p99-µs")
	b.ReportMetric(p(sup, 0.5), "health-p50-µs")
	b.ReportMetric(p(sup, 0.99), "health-p99-µs")
	b.ReportMetric(p(sup, 0.5)/max(p(raw, 0.5), 1), "p50-ratio")
	b.ReportMetric(0, "ns/op")
}

func benchConfig(b *testing.B) Config {
	cfg := testConfig(b)
	cfg.Jobs.MaxJobs = 1000
	cfg.EventHWM = 100000
	return cfg
}
