package jobs

import (
	"fmt"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// BenchmarkStatusUsage: a job's usage as status takes it (one job) and as
// list-jobs takes it (every running job), with 10, 100 and 1,000 other
// jobs running, each in a cgroup of its own: read from the jobs'
// cgroups vs the process-table scan (what both cost before, and still
// cost without cgroups), same run.
func BenchmarkStatusUsage(b *testing.B) {
	m := usageManager(b, true)
	sleep := protocol.SpawnArgs{Argv: []string{"sleep", "300"}}
	j := spawnRunning(b, m, sleep)
	running := 1
	for _, others := range []int{10, 100, 1000} {
		for ; running < others+1; running++ {
			spawnRunning(b, m, sleep)
		}
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
			t0 := time.Now()
			for range b.N {
				m.InfoWithUsage(j)
			}
			status := time.Since(t0)
			t0 = time.Now()
			for range b.N {
				in := j.Info()
				sampleUsage(map[int]bool{in.Pgid: true}, nil)
			}
			statusScan := time.Since(t0)
			t0 = time.Now()
			for range b.N {
				m.List(protocol.StateRunning, "")
			}
			list := time.Since(t0)
			t0 = time.Now()
			for range b.N {
				infos, _ := m.ListAfter(ListFilter{State: protocol.StateRunning}, 0, 0, "")
				groups := map[int]bool{}
				for _, in := range infos {
					groups[in.Pgid] = true
				}
				sampleUsage(groups, nil)
			}
			listScan := time.Since(t0)
			b.ReportMetric(per(status), "cgroup-ns/status")
			b.ReportMetric(per(statusScan), "scan-ns/status")
			b.ReportMetric(per(list), "cgroup-ns/list")
			b.ReportMetric(per(listScan), "scan-ns/list")
			b.ReportMetric(0, "ns/op")
		})
	}
}
