package client_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// BenchmarkOutputThroughput: MB/s of a child's output read through the
// supervisor (child -> supervisor -> client Job reader, ipc) vs reading the
// same child's pipe directly, same run (goal >= 0.5x); and the same job
// spawned with its output on disk (output "disk": every byte also
// appended to its files), interleaved in the same rounds: disk-ratio is
// its rate over the memory-only one (goal: ~1). What the files cost in
// CPU (this process's: supervisor and client) is disk-cpu-ms, the disk
// run's CPU time less the memory-only run's, per 64 MiB; fs-cpu-ms is the
// file system's own cost for the same bytes, written in 1 MiB write(2)s
// to 8 MiB files (the oldest removed past 64 MiB) in the same directory.
func BenchmarkOutputThroughput(b *testing.B) {
	// The supervisor never slows a child down: a client slower than the child
	// catches up from the ring, so the ring holds the whole output here.
	s := start(b, func(c *server.Config) { c.Jobs.RingBytes = 128 << 20; c.SubscriberQueueBytes = 64 << 20 })
	const size = 64 << 20
	cmd := fmt.Sprintf("head -c %d /dev/zero", size)
	ctx := context.Background()
	src := make([]byte, size) // (cold in the caches when written, as output is)
	for i := range src {
		src[i] = byte(i)
	}
	fsDir := b.TempDir()
	var direct, sup, disk time.Duration
	var supCPU, diskCPU, fsCPU time.Duration
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

		t1, c1 := time.Now(), proctest.SelfCPU()
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
		supCPU += proctest.SelfCPU() - c1

		t2, c2 := time.Now(), proctest.SelfCPU()
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
		diskCPU += proctest.SelfCPU() - c2
		if info, err := s.c.Status(ctx, j.ID); err != nil || !info.OutputDisk {
			b.Fatalf("output not on disk: %v %q", err, info.OutputDiskError)
		}

		c3 := proctest.SelfCPU()
		writeRotating(b, fsDir, src)
		fsCPU += proctest.SelfCPU() - c3
		if err := os.RemoveAll(fsDir); err != nil {
			b.Fatal(err)
		}
		if err := os.Mkdir(fsDir, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	proctest.ReportRates(b, float64(b.N*size)/direct.Seconds()/1e6, float64(b.N*size)/sup.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(b.N*size)/disk.Seconds()/1e6, "disk-MB/s")
	b.ReportMetric(sup.Seconds()/disk.Seconds(), "disk-ratio")
	b.ReportMetric(float64((diskCPU-supCPU).Milliseconds())/float64(b.N), "disk-cpu-ms")
	b.ReportMetric(float64(fsCPU.Milliseconds())/float64(b.N), "fs-cpu-ms")
}

// writeRotating writes data to files of 8 MiB in dir, 1 MiB a write(2),
// removing the oldest past 64 MiB (as a job's output files rotate).
func writeRotating(b *testing.B, dir string, data []byte) {
	var f *os.File
	var names []string
	for off := 0; off < len(data); off += 1 << 20 {
		if off%(8<<20) == 0 {
			if f != nil {
				f.Close()
			}
			if len(names) == 8 {
				os.Remove(names[0])
				names = names[1:]
			}
			name := filepath.Join(dir, fmt.Sprintf("%016x.seg", off))
			var err error
			if f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600); err != nil {
				b.Fatal(err)
			}
			names = append(names, name)
		}
		if _, err := f.Write(data[off:min(off+1<<20, len(data))]); err != nil {
			b.Fatal(err)
		}
	}
	f.Close()
}

// BenchmarkOutputLatency: time from writing a line to a `cat` job's stdin
// to receiving it back as output, with the merge window at 0 and at its
// 200 ms default, vs the same round trip through a direct pipe; and, with
// the window at 0, interleaved (in turn first), through a second `cat`
// job whose output also goes to disk (disk-p50-µs: what a job printing
// lines sees of its files).
func BenchmarkOutputLatency(b *testing.B) {
	for _, window := range []time.Duration{0, 200 * time.Millisecond} {
		b.Run(fmt.Sprintf("merge=%v", window), func(b *testing.B) {
			s := start(b, func(c *server.Config) { c.Jobs.MergeInterval = window })
			ctx := context.Background()
			outputs := []string{protocol.OutputMemory, protocol.OutputDisk}
			if window > 0 {
				outputs = outputs[:1] // (a job quiet while the other waits out its window would flush at once)
			}
			jobs := make([]*client.Job, len(outputs))
			for k, output := range outputs {
				j, err := s.c.Start(ctx, protocol.SpawnArgs{Argv: []string{"cat"}, Stdin: true, Output: output}, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer j.Kill(ctx)
				jobs[k] = j
			}
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
			var ldir []time.Duration
			var lsup [2][]time.Duration
			b.ResetTimer()
			for i := 0; i < n; i++ {
				t0 := time.Now()
				in.Write([]byte("ping\n"))
				io.ReadFull(out, buf[:5])
				ldir = append(ldir, time.Since(t0))
				for x := range jobs {
					k := (x + i) % len(jobs)
					j := jobs[k]
					t1 := time.Now()
					if err := j.Write(ctx, []byte("ping\n"), false); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(j.Stdout(), buf[:5]); err != nil {
						b.Fatal(err)
					}
					lsup[k] = append(lsup[k], time.Since(t1))
				}
			}
			b.StopTimer()
			q := proctest.Percentile
			b.ReportMetric(q(ldir, .5), "direct-p50-µs")
			b.ReportMetric(q(lsup[0], .5), "supervisor-p50-µs")
			b.ReportMetric(q(lsup[0], .99), "supervisor-p99-µs")
			if len(jobs) > 1 {
				if info, err := s.c.Status(ctx, jobs[1].ID); err != nil || !info.OutputDisk {
					b.Fatalf("output not on disk: %v %q", err, info.OutputDiskError)
				}
				b.ReportMetric(q(lsup[1], .5), "disk-p50-µs")
				b.ReportMetric(q(lsup[1], .99), "disk-p99-µs")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
