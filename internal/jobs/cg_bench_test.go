package jobs

import (
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// BenchmarkCgroupCost: spawn+wait of /bin/true through a Manager with a
// cgroup per job vs without, same run.
func BenchmarkCgroupCost(b *testing.B) {
	base, err := cgroups.Detect("", "exec-supervisor-bench")
	if err != nil {
		b.Skipf("no cgroup v2: %v", err)
	}
	defer base.Close()
	plain := New(Config{MaxJobs: 1000}, nil, nil)
	defer plain.Close(b.Context())
	cg := New(Config{MaxJobs: 1000}, nil, nil, WithCgroups(base))
	defer cg.Close(b.Context())
	run := func(m *Manager) time.Duration {
		t0 := time.Now()
		for i := 0; i < b.N; i++ {
			info, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"/bin/true"}})
			if err != nil {
				b.Fatal(err)
			}
			j, _ := m.Get(info.JobID)
			<-j.Done()
		}
		return time.Since(t0)
	}
	b.ResetTimer()
	p, c := run(plain), run(cg)
	b.ReportMetric(float64(b.N)/p.Seconds(), "pgid-jobs/s")
	b.ReportMetric(float64(b.N)/c.Seconds(), "cgroup-jobs/s")
	b.ReportMetric(p.Seconds()/c.Seconds(), "ratio")
	b.ReportMetric(0, "ns/op")
}
