package jobs

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// spawnWaitN spawns b.N jobs through m one after the other, waiting for
// each to finish, and returns the time it took.
func spawnWaitN(b *testing.B, m *Manager, args protocol.SpawnArgs) time.Duration {
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		info, err := m.Spawn(args)
		if err != nil {
			b.Fatal(err)
		}
		j, _ := m.Get(info.JobID)
		<-j.Done()
	}
	return time.Since(t0)
}

// BenchmarkManagerSpawnTrue isolates the job engine (no sockets): /bin/true
// spawned and waited through a Manager vs os/exec in the same run.
func BenchmarkManagerSpawnTrue(b *testing.B) {
	m := New(Config{MaxJobs: 1000}, nil, nil)
	defer m.Close(b.Context())
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	d := time.Since(start)
	s := spawnWaitN(b, m, protocol.SpawnArgs{Argv: []string{"/bin/true"}})
	b.ReportMetric(float64(b.N)/d.Seconds(), "direct-jobs/s")
	b.ReportMetric(float64(b.N)/s.Seconds(), "manager-jobs/s")
	b.ReportMetric(d.Seconds()/s.Seconds(), "ratio")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkMetricsOverhead: spawn+wait through a Manager with the metric
// hooks the server installs (Prometheus counters) vs none, same run.
func BenchmarkMetricsOverhead(b *testing.B) {
	plain := New(Config{MaxJobs: 1000}, nil, nil)
	defer plain.Close(b.Context())
	spawned := prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})
	finished := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "f"}, []string{"reason"})
	out := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "o"}, []string{"stream"})
	hooked := New(Config{MaxJobs: 1000}, nil, nil, WithHooks(Hooks{
		Spawned:     spawned.Inc,
		Finished:    func(r protocol.Reason, _ bool) { finished.WithLabelValues(string(r)).Inc() },
		OutputBytes: func(s protocol.Stream, n int) { out.WithLabelValues(string(s)).Add(float64(n)) },
		CleanupKill: func(string) {},
	}))
	defer hooked.Close(b.Context())
	b.ResetTimer()
	args := protocol.SpawnArgs{Shell: "echo x"}
	p, h := spawnWaitN(b, plain, args), spawnWaitN(b, hooked, args)
	b.ReportMetric(float64(b.N)/p.Seconds(), "plain-jobs/s")
	b.ReportMetric(float64(b.N)/h.Seconds(), "metrics-jobs/s")
	b.ReportMetric(p.Seconds()/h.Seconds(), "ratio")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkSnapshotsRetained: a journal snapshot (1000 newest finished
// jobs kept, all cached as after the first write) with 2,000 and with
// 100,000 finished jobs retained. Its cost must follow what the journal
// keeps, not what retention holds: compare the two ns/op.
func BenchmarkSnapshotsRetained(b *testing.B) {
	for _, retained := range []int{2000, 100000} {
		b.Run(fmt.Sprintf("retained=%d", retained), func(b *testing.B) {
			m := New(Config{MaxJobs: 10}, nil, nil)
			defer m.Close(b.Context())
			for i := 0; i < retained; i++ {
				err := m.Restore(journal.Record{JobID: fmt.Sprintf("j-%d", i), State: protocol.StateExited,
					Reason: protocol.ReasonExit, Argv: []string{"true"}}, false)
				if err != nil {
					b.Fatal(err)
				}
			}
			cached := func(string, uint64) bool { return true }
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m.Snapshots(1000, cached)
			}
		})
	}
}

// BenchmarkSnapshotTail: a journal record of a job whose last 4 KiB of
// output came in 1 chunk (the baseline), in 64 and in 256 (maxTailChunks:
// a byte-per-line printer). Building the tail must stay linear in its
// bytes: compare ns/op with chunks=1.
func BenchmarkSnapshotTail(b *testing.B) {
	for _, n := range []int{1, 64, maxTailChunks} {
		b.Run(fmt.Sprintf("chunks=%d", n), func(b *testing.B) {
			m := New(Config{MaxJobs: 10}, nil, nil)
			defer m.Close(b.Context())
			size := TailBytes / n
			r := journal.Record{JobID: "j-tail", State: protocol.StateExited, Reason: protocol.ReasonExit, Argv: []string{"true"},
				OutputTail: make([]byte, n*size), OutputEnd: int64(n * size), OutputTailSeq: uint64(n + 1), LastSeq: uint64(n + 2)}
			for i := range n {
				r.OutputTailChunks = append(r.OutputTailChunks, journal.TailChunk{Seq: uint64(i + 2), Stream: protocol.Stdout, Len: size})
			}
			if err := m.Restore(r, false); err != nil {
				b.Fatal(err)
			}
			j, _ := m.Get("j-tail")
			if got := len(j.Snapshot().Record.OutputTailChunks); got != n {
				b.Fatalf("%d chunks in the record, want %d", got, n)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				j.Snapshot()
			}
		})
	}
}
