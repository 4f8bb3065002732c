package jobs

import (
	"testing"

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
	b.ResetTimer()
	args := protocol.SpawnArgs{Argv: []string{"/bin/true"}}
	p, c := spawnWaitN(b, plain, args), spawnWaitN(b, cg, args)
	b.ReportMetric(float64(b.N)/p.Seconds(), "pgid-jobs/s")
	b.ReportMetric(float64(b.N)/c.Seconds(), "cgroup-jobs/s")
	b.ReportMetric(p.Seconds()/c.Seconds(), "ratio")
	b.ReportMetric(0, "ns/op")
}
