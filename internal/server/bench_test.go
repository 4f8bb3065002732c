package server

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmqx"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// BenchmarkSpawnTrue measures jobs/s for /bin/true spawned and waited for
// through the supervisor (spawn request, then its job.exited event) against
// os/exec Start+Wait in the same run. Reported: both rates and their ratio
// (goal >= 0.8).
func BenchmarkSpawnTrue(b *testing.B) {
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("concurrency=%d", par), func(b *testing.B) { benchSpawnTrue(b, par) })
	}
}

func benchSpawnTrue(b *testing.B, par int) { benchSpawnTrueCfg(b, par, benchConfig(b)) }

func benchSpawnTrueCfg(b *testing.B, par int, cfg Config) {
	ts := startServer(b, cfg)
	ctx := context.Background()
	sub, err := zmqx.Dial(ctx, zmqx.Sub, cfg.Event, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	_ = sub.SetOption(zmqx.OptionSubscribe, protocol.TopicJobPrefix)
	exits := make(chan string, 1024)
	var mu sync.Mutex
	waiters := map[string]chan struct{}{}
	waiter := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		ch := waiters[id]
		if ch == nil {
			ch = make(chan struct{})
			waiters[id] = ch
		}
		return ch
	}
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			if ev, err := protocol.DecodeEventNoCopy(m.Frames[1]); err == nil && ev.Kind.Terminal() {
				close(waiter(ev.JobID))
				select {
				case exits <- ev.JobID:
				default:
				}
			}
		}
	}()
	// Let the subscription reach the publisher: wait for one job's exit.
	for got := false; !got; {
		j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case id := <-exits:
			got = id == j.JobID
		case <-time.After(200 * time.Millisecond):
		}
	}
	// run executes n calls of one across par workers.
	run := func(n int, one func() error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := 0; w < par; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					if err := one(); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	direct1 := func() error { return exec.Command("/bin/true").Run() }
	sup1 := func() error {
		j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"/bin/true"}})
		if err != nil {
			return err
		}
		select {
		case <-waiter(j.JobID):
			return nil
		case <-time.After(10 * time.Second):
			return fmt.Errorf("no exit event for %s", j.JobID)
		}
	}
	// The two are interleaved in batches so that both see the same
	// machine (load here drifts by 2x within seconds).
	b.ResetTimer()
	var direct, sup time.Duration
	for done := 0; done < b.N; {
		n := min(50, b.N-done)
		direct += run(n, direct1)
		sup += run(n, sup1)
		done += n
	}
	b.StopTimer()
	d, s := float64(b.N)/direct.Seconds(), float64(b.N)/sup.Seconds()
	b.ReportMetric(d, "direct-jobs/s")
	b.ReportMetric(s, "supervisor-jobs/s")
	b.ReportMetric(s/d, "ratio")
	b.ReportMetric(0, "ns/op")
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
	rep, err := zmqx.ListenBare(ctx, zmqx.Rep, echoEP)
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
	req, err := zmqx.Dial(ctx, zmqx.Req, echoEP, time.Second)
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
		if err := req.Send(zmqx.NewMsg(body)); err != nil {
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
	p := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return float64(d[int(float64(len(d)-1)*q)].Microseconds())
	}
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
