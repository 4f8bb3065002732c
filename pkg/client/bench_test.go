package client_test

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// BenchmarkOutputThroughput: MB/s of a child's output read through the
// supervisor (child -> supervisor -> client Job reader, ipc) vs reading the
// same child's pipe directly, same run (goal >= 0.5x); and the same job
// spawned with its output on disk (output "disk": every byte also
// appended to its files), interleaved in the same rounds: disk-ratio is
// its rate over the memory-only one (goal: ~1).
func BenchmarkOutputThroughput(b *testing.B) {
	// The supervisor never slows a child down: a client slower than the child
	// catches up from the ring, so the ring holds the whole output here.
	s := start(b, func(c *server.Config) { c.Jobs.RingBytes = 128 << 20; c.SubscriberQueueBytes = 64 << 20 })
	_ = s
	const size = 64 << 20
	cmd := fmt.Sprintf("head -c %d /dev/zero", size)
	ctx := context.Background()
	var direct, sup, disk time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		c := exec.Command("sh", "-c", cmd)
		out, _ := c.StdoutPipe()
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		if n, _ := io.Copy(io.Discard, out); n != size {
			b.Fatalf("direct read %d", n)
		}
		c.Wait()
		direct += time.Since(t0)

		t1 := time.Now()
		j, err := s.c.Start(ctx, protocol.SpawnArgs{Shell: cmd}, 32<<20)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, j.Stdout())
		if n != size || err != nil {
			b.Fatalf("supervisor read %d: %v", n, err)
		}
		j.Close()
		sup += time.Since(t1)

		t2 := time.Now()
		j, err = s.c.Start(ctx, protocol.SpawnArgs{Shell: cmd, Output: protocol.OutputDisk}, 32<<20)
		if err != nil {
			b.Fatal(err)
		}
		n, err = io.Copy(io.Discard, j.Stdout())
		if n != size || err != nil {
			b.Fatalf("supervisor read with output on disk %d: %v", n, err)
		}
		j.Close()
		disk += time.Since(t2)
		if info, err := s.c.Status(ctx, j.ID); err != nil || !info.OutputDisk {
			b.Fatalf("output not on disk: %v %q", err, info.OutputDiskError)
		}
	}
	b.StopTimer()
	proctest.ReportRates(b, float64(b.N*size)/direct.Seconds()/1e6, float64(b.N*size)/sup.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(b.N*size)/disk.Seconds()/1e6, "disk-MB/s")
	b.ReportMetric(sup.Seconds()/disk.Seconds(), "disk-ratio")
}

// BenchmarkOutputLatency: time from writing a line to a `cat` job's stdin
// to receiving it back as output, with the merge window at 0 and at its
// 200 ms default, vs the same round trip through a direct pipe.
func BenchmarkOutputLatency(b *testing.B) {
	for _, window := range []time.Duration{0, 200 * time.Millisecond} {
		b.Run(fmt.Sprintf("merge=%v", window), func(b *testing.B) {
			s := start(b, func(c *server.Config) { c.Jobs.MergeInterval = window })
			ctx := context.Background()
			j, err := s.c.Start(ctx, protocol.SpawnArgs{Argv: []string{"cat"}, Stdin: true}, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer j.Kill(ctx)
			c := exec.Command("cat")
			in, _ := c.StdinPipe()
			out, _ := c.StdoutPipe()
			if err := c.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { in.Close(); c.Wait() }()
			buf := make([]byte, 64)
			n := min(b.N, 50)
			if window == 0 {
				n = min(b.N, 500)
			}
			var lsup, ldir []time.Duration
			b.ResetTimer()
			for i := 0; i < n; i++ {
				t0 := time.Now()
				in.Write([]byte("ping\n"))
				io.ReadFull(out, buf[:5])
				ldir = append(ldir, time.Since(t0))
				t1 := time.Now()
				if err := j.Write(ctx, []byte("ping\n"), false); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(j.Stdout(), buf[:5]); err != nil {
					b.Fatal(err)
				}
				lsup = append(lsup, time.Since(t1))
			}
			b.StopTimer()
			q := proctest.Percentile
			b.ReportMetric(q(ldir, .5), "direct-p50-µs")
			b.ReportMetric(q(lsup, .5), "supervisor-p50-µs")
			b.ReportMetric(q(lsup, .99), "supervisor-p99-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}
