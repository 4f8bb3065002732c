package proctest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmqx"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// SpawnTrueRates measures /bin/true spawned and waited for through a
// supervisor (the spawn request, then the job's terminal event on the
// event socket at eventAddr) against os/exec Start+Wait (the first of
// the returned rates), n of each across par workers, interleaved (see
// Interleave). Further runners (each one job, safe for par workers at
// once) are measured in the same rounds; their rates follow the
// supervisor's.
func SpawnTrueRates(b *testing.B, c *client.Client, eventAddr string, n, par int, more ...func() error) []float64 {
	ctx := context.Background()
	sub, err := zmqx.DialClient(ctx, "SUB", eventAddr, time.Second, "")
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.Subscribe(protocol.TopicJobPrefix); err != nil {
		b.Fatal(err)
	}
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
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			if len(m) == 2 {
				if ev, err := protocol.DecodeEventNoCopy(m[1]); err == nil && ev.Kind.Terminal() {
					close(waiter(ev.JobID))
				}
			}
		}
	}()
	defer func() { sub.Close(); <-done }()
	spawn := func() error {
		j, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"/bin/true"}})
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
	// The subscription travels asynchronously: wait until one job's exit
	// is heard.
	for heard := false; !heard; {
		j, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-waiter(j.JobID):
			heard = true
		case <-time.After(200 * time.Millisecond):
		}
	}
	direct := func() error { return exec.Command("/bin/true").Run() }
	return Interleave(b, n, par, append([]func() error{direct, spawn}, more...)...)
}

// SpawnWaitRunner runs /bin/true through c with spawn's waitMs: spawn
// and wait in one round trip, no event socket. Give it a supervisor of
// its own: a SpawnTrueRates subscriber on the same one would receive
// these jobs' events too, which a client that waits has no use for.
func SpawnWaitRunner(c *client.Client) func() error {
	return func() error {
		j, finished, err := c.SpawnWait(context.Background(), protocol.SpawnArgs{Argv: []string{"/bin/true"}}, 10*time.Second)
		if err == nil && !finished {
			err = fmt.Errorf("job %s not finished after 10 s", j.JobID)
		}
		return err
	}
}

// Interleave runs each runner n times across par workers and returns
// their rates (runs per second). They take turns in batches of 50, so
// that all of them see the same machine (load on shared machines drifts
// within seconds). The benchmark timer covers the rounds only.
func Interleave(b *testing.B, n, par int, runners ...func() error) []float64 {
	run := func(k int, one func() error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := 0; w < par; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(k) {
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
	took := make([]time.Duration, len(runners))
	b.ResetTimer()
	for k := 0; k < n; {
		batch := min(50, n-k)
		for i, r := range runners {
			took[i] += run(batch, r)
		}
		k += batch
	}
	b.StopTimer()
	rates := make([]float64, len(runners))
	for i, d := range took {
		rates[i] = float64(n) / d.Seconds()
	}
	return rates
}

// ReportRates reports a baseline and a measured rate and their ratio.
func ReportRates(b *testing.B, direct, sup float64, unit string) {
	b.ReportMetric(direct, "direct-"+unit)
	b.ReportMetric(sup, "supervisor-"+unit)
	b.ReportMetric(sup/direct, "ratio")
	b.ReportMetric(0, "ns/op")
}

// Percentile returns the q-quantile of d (sorted in place) in µs.
func Percentile(d []time.Duration, q float64) float64 {
	slices.Sort(d)
	return float64(d[int(float64(len(d)-1)*q)].Microseconds())
}
