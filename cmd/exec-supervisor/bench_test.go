package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
)

// BenchmarkSpawnTrueBinary is BenchmarkSpawnTrue (internal/server) against
// the supervisor as it is deployed: the built binary (without -race, its
// defaults, subreaper and journal included) in a process of its own,
// driven through pkg/client; baseline os/exec in the same run,
// interleaved. Goal >= 0.8. Also measured in the same rounds: the bare
// exec server (os/exec behind one unix-socket round trip per job, no
// supervisor logic), the floor for any out-of-process design on this
// machine (vs-bare-rpc is the supervisor's rate against it), and spawn
// with waitMs (one round trip, no event socket) through a second
// supervisor process: wait-jobs/s, wait-ratio, wait-vs-bare-rpc.
//
// CPU time per job, steadier than rates on a shared machine (µs; a
// "client" is this process while the runner ran; direct-cpu-µs is what
// os/exec costs its parent): sup-cpu-µs and sup-client-cpu-µs (spawn +
// exit event), wait-sup-cpu-µs and wait-client-cpu-µs (spawn with
// waitMs), bare-cpu-µs and bare-client-cpu-µs; and each server's context
// switches per job (sup-cs, wait-sup-cs, bare-cs: each is a thread put to
// sleep and woken, which on a virtual machine costs more than most code).
//
// With ES_COMPARE_BIN set to another build of the supervisor (say, of an
// earlier commit), it runs in the same rounds too, on both paths:
// cmp-ratio, cmp-wait-ratio, cmp-sup-cpu-µs, cmp-wait-sup-cpu-µs,
// cmp-sup-cs, cmp-wait-sup-cs. ES_COMPARE_BIN=self compares this build
// with itself, and ES_COMPARE_ARGS (space-separated) adds flags to the
// compared supervisors: ES_COMPARE_BIN=self ES_COMPARE_ARGS=--cpu-home=false
// measures what --cpu-home does. Same-run comparison is the only kind
// that holds on a shared machine.
func BenchmarkSpawnTrueBinary(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "exec-supervisor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	c, evt, supPid := startBinary(b, bin, filepath.Join(dir, "a"))
	waits, _, waitPid := startBinary(b, bin, filepath.Join(dir, "b")) // (see proctest.SpawnWaitRunner)
	var cmpC, cmpWaits *client.Client
	var cmpEvt string
	var cmpPid, cmpWaitPid int
	if cmp := os.Getenv("ES_COMPARE_BIN"); cmp != "" {
		if cmp == "self" {
			cmp = bin
		}
		extra := strings.Fields(os.Getenv("ES_COMPARE_ARGS"))
		cmpC, cmpEvt, cmpPid = startBinary(b, cmp, filepath.Join(dir, "c"), extra...)
		cmpWaits, _, cmpWaitPid = startBinary(b, cmp, filepath.Join(dir, "d"), extra...)
	}
	for _, par := range []int{1, 8} {
		b.Run(map[int]string{1: "concurrency=1", 8: "concurrency=8"}[par], func(b *testing.B) {
			bare, stop, barePid, err := proctest.StartBareExec(b.TempDir(), par)
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			pids := []int{supPid, waitPid, barePid}
			more := []func() error{bare, proctest.SpawnWaitRunner(waits)}
			if cmpC != nil {
				run, stop := proctest.SpawnEventRunner(b, cmpC, cmpEvt)
				defer stop()
				pids = append(pids, cmpPid, cmpWaitPid)
				more = append(more, run, proctest.SpawnWaitRunner(cmpWaits))
			}
			before := usage(b, pids)
			r := proctest.SpawnTrue(b, c, evt, b.N, par, more...)
			after := usage(b, pids)
			proctest.ReportRates(b, r[0].Rate, r[1].Rate, "jobs/s")
			// The floor of any out-of-process design: os/exec behind one
			// unix-socket round trip per job (see MaybeServeBareExec).
			b.ReportMetric(r[2].Rate, "bare-rpc-jobs/s")
			b.ReportMetric(r[1].Rate/r[2].Rate, "vs-bare-rpc")
			b.ReportMetric(r[3].Rate, "wait-jobs/s")
			b.ReportMetric(r[3].Rate/r[0].Rate, "wait-ratio")
			b.ReportMetric(r[3].Rate/r[2].Rate, "wait-vs-bare-rpc")
			b.ReportMetric(float64(r[0].CPU.Microseconds()), "direct-cpu-µs")
			// (the servers' CPU counts from just before the rounds began,
			// b.N of their jobs included)
			for i, s := range []struct {
				name   string
				runner int
			}{{"sup", 1}, {"wait-sup", 3}, {"bare", 2}} {
				u := after[i].Sub(before[i])
				b.ReportMetric(float64(u.CPU.Microseconds())/float64(b.N), s.name+"-cpu-µs")
				b.ReportMetric(float64(u.Switches)/float64(b.N), s.name+"-cs")
				b.ReportMetric(float64(r[s.runner].CPU.Microseconds()), s.name+"-client-cpu-µs")
			}
			if cmpC != nil {
				b.ReportMetric(r[4].Rate/r[0].Rate, "cmp-ratio")
				b.ReportMetric(r[5].Rate/r[0].Rate, "cmp-wait-ratio")
				for i, name := range []string{"cmp-sup", "cmp-wait-sup"} {
					u := after[3+i].Sub(before[3+i])
					b.ReportMetric(float64(u.CPU.Microseconds())/float64(b.N), name+"-cpu-µs")
					b.ReportMetric(float64(u.Switches)/float64(b.N), name+"-cs")
				}
			}
		})
	}
}

// usage reads the CPU time and context switches of each of pids.
func usage(b *testing.B, pids []int) []proctest.ProcUsage {
	out := make([]proctest.ProcUsage, len(pids))
	for i, pid := range pids {
		u, err := proctest.ReadProcUsage(pid)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = u
	}
	return out
}

// startBinary runs the supervisor binary with its defaults on sockets and
// state in dir, stopped when b ends, and returns a client of it, its
// event address and its pid.
func startBinary(b *testing.B, bin, dir string, extra ...string) (*client.Client, string, int) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	ctl, evt := "ipc://"+filepath.Join(dir, "c.sock"), "ipc://"+filepath.Join(dir, "e.sock")
	cmd := exec.Command(bin, append([]string{"--control", ctl, "--event", evt, "--state-dir", filepath.Join(dir, "state"),
		"--metrics-addr", "", "--max-jobs", "1000", "--event-hwm", "100000", "--log-level", "error"}, extra...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	c := client.New(client.Options{ControlAddress: ctl, EventAddress: evt, RequestTimeout: 10 * time.Second})
	b.Cleanup(func() { c.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		hctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := c.Health(hctx)
		cancel()
		if err == nil {
			return c, evt, cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			b.Fatalf("the supervisor did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // the process is starting; nothing to wait on
	}
}
