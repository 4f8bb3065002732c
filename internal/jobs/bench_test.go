package jobs

import (
	"github.com/prometheus/client_golang/prometheus"

	"os/exec"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

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
	start = time.Now()
	for i := 0; i < b.N; i++ {
		info, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		j, _ := m.Get(info.JobID)
		<-j.Done()
	}
	s := time.Since(start)
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
		Finished:    func(r protocol.Reason) { finished.WithLabelValues(string(r)).Inc() },
		OutputBytes: func(s protocol.Stream, n int) { out.WithLabelValues(string(s)).Add(float64(n)) },
		CleanupKill: func(string) {},
	}))
	defer hooked.Close(b.Context())
	run := func(m *Manager) time.Duration {
		t0 := time.Now()
		for i := 0; i < b.N; i++ {
			info, err := m.Spawn(protocol.SpawnArgs{Shell: "echo x"})
			if err != nil {
				b.Fatal(err)
			}
			j, _ := m.Get(info.JobID)
			<-j.Done()
		}
		return time.Since(t0)
	}
	b.ResetTimer()
	p, h := run(plain), run(hooked)
	b.ReportMetric(float64(b.N)/p.Seconds(), "plain-jobs/s")
	b.ReportMetric(float64(b.N)/h.Seconds(), "metrics-jobs/s")
	b.ReportMetric(p.Seconds()/h.Seconds(), "ratio")
	b.ReportMetric(0, "ns/op")
}
