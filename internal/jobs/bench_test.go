package jobs

import (
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
