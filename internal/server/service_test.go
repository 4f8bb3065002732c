package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func intp(v int) *int { return &v }

// serviceEvents follows a job until it ends or until stop says so, and
// returns its events.
func serviceEvents(t *testing.T, c *client.Client, id string, d time.Duration, stop func(ev protocol.Event) bool) []protocol.Event {
	t.Helper()
	return serviceEventsFrom(t, c, id, 1, d, stop)
}

func serviceEventsFrom(t *testing.T, c *client.Client, id string, from uint64, d time.Duration, stop func(ev protocol.Event) bool) []protocol.Event {
	t.Helper()
	var evs []protocol.Event
	errStop := fmt.Errorf("stop")
	err := c.Follow(ctxT(t, d), id, from, func(ev protocol.Event) error {
		evs = append(evs, ev)
		if stop != nil && stop(ev) {
			return errStop
		}
		return nil
	})
	if err != nil && err != errStop {
		t.Fatalf("follow %s: %v (events so far: %s)", id, err, kinds(evs))
	}
	return evs
}

func kinds(evs []protocol.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "%d:%s(a%d) ", ev.Seq, ev.Kind, ev.Attempt)
	}
	return b.String()
}

func restartsOf(t *testing.T, evs []protocol.Event) []protocol.RestartingPayload {
	t.Helper()
	var out []protocol.RestartingPayload
	for _, ev := range evs {
		if ev.Kind == protocol.KindRestarting {
			var p protocol.RestartingPayload
			if err := ev.DecodePayload(&p); err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

// TestServiceCrashLoopBackoffAndLimit: a job that exits 1 at once, with
// the default policy values, is restarted after 1, 2, 4 and 8 s (measured
// between a run's end and the next run's start, from the events) and its
// fifth failure ends it with restart-limit. Its history keeps each run's
// last lines; start brings it back; stop ends it for good.
func TestServiceCrashLoopBackoffAndLimit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, testConfig(t))
	c := ts.client
	info, err := c.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{
		Shell:   `for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55; do echo "line $i of $$"; done; echo "crash in $$" >&2; exit 1`,
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure},
	})
	if err != nil {
		t.Fatal(err)
	}
	evs := serviceEvents(t, c, info.JobID, 40*time.Second, nil)
	rs := restartsOf(t, evs)
	if len(rs) != 4 {
		t.Fatalf("%d restarts; want 4: %s", len(rs), kinds(evs))
	}
	// Measured delay: restarting event (run end) -> next job.started.
	var endTs int64
	n := 0
	for _, ev := range evs {
		switch ev.Kind {
		case protocol.KindRestarting:
			endTs = ev.Ts
		case protocol.KindStarted:
			if endTs == 0 {
				continue
			}
			want := time.Duration(1<<n) * time.Second
			got := time.Duration(ev.Ts-endTs) * time.Millisecond
			if got < want-20*time.Millisecond || got > want+750*time.Millisecond {
				t.Errorf("restart %d: started %v after the crash; want %v", n+1, got, want)
			}
			if rs[n].DelayMs != want.Milliseconds() || rs[n].Attempt != n+1 || rs[n].NextAttempt != n+2 || rs[n].Reason != protocol.ReasonExit || rs[n].ExitCode == nil || *rs[n].ExitCode != 1 {
				t.Errorf("restart %d payload %+v", n+1, rs[n])
			}
			if ev.Attempt != n+2 {
				t.Errorf("started event attempt %d; want %d", ev.Attempt, n+2)
			}
			n++
		}
	}
	last := evs[len(evs)-1]
	var exit protocol.ExitPayload
	if err := last.DecodePayload(&exit); err != nil || last.Kind != protocol.KindFailed || exit.Reason != protocol.ReasonRestartLimit || exit.ExitCode == nil || *exit.ExitCode != 1 {
		t.Fatalf("last event %s %+v; want job.failed restart-limit with the last exit code", last.Kind, exit)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("seqs not contiguous: %s", kinds(evs))
		}
	}
	st, err := c.Status(ctxT(t, 5*time.Second), info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != protocol.StateExited || st.Reason != protocol.ReasonRestartLimit || st.Attempt != 5 || st.Restarts != 4 || st.Restart != protocol.RestartOnFailure || !strings.Contains(st.Error, "start it again") {
		t.Fatalf("status %+v", st)
	}
	hist, err := c.History(ctxT(t, 5*time.Second), info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 5 {
		t.Fatalf("history has %d runs; want 5", len(hist))
	}
	for i, r := range hist {
		if r.Attempt != i+1 || r.Reason != protocol.ReasonExit || r.ExitCode == nil || *r.ExitCode != 1 || r.Restarted != (i < 4) || r.Pid <= 0 {
			t.Errorf("run %d: %+v", i+1, r)
		}
		if len(r.Tail) != protocol.HistoryLines {
			t.Fatalf("run %d keeps %d lines; want %d: %q", i+1, len(r.Tail), protocol.HistoryLines, r.Tail)
		}
		if want := fmt.Sprintf("crash in %d", r.Pid); r.Tail[len(r.Tail)-1] != want {
			t.Errorf("run %d last line %q; want %q", i+1, r.Tail[len(r.Tail)-1], want)
		}
		if want := fmt.Sprintf("line 7 of %d", r.Pid); r.Tail[0] != want { // 55 lines + 1
			t.Errorf("run %d first kept line %q; want %q (the last 50 lines)", i+1, r.Tail[0], want)
		}
	}

	// A manual start brings it back (backoff and window reset).
	again, err := c.StartService(ctxT(t, 5*time.Second), info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if again.Attempt != 6 || again.State == protocol.StateExited && again.Reason == protocol.ReasonRestartLimit {
		t.Fatalf("after start: %+v", again)
	}
	// The earlier terminal event stays in the sequence: follow from after it.
	evs = serviceEventsFrom(t, c, info.JobID, st.LastSeq+1, 10*time.Second, func(ev protocol.Event) bool { return ev.Kind == protocol.KindRestarting && ev.Attempt == 6 })
	if p := restartsOf(t, evs); p[len(p)-1].DelayMs != 1000 {
		t.Fatalf("after a manual start the delay is %d ms; want 1000 (reset)", p[len(p)-1].DelayMs)
	}
	if _, err := c.Stop(ctxT(t, 5*time.Second), info.JobID); err != nil {
		t.Fatal(err)
	}
	evs = serviceEventsFrom(t, c, info.JobID, st.LastSeq+1, 10*time.Second, nil)
	if err := evs[len(evs)-1].DecodePayload(&exit); err != nil || exit.Reason != protocol.ReasonStopped {
		t.Fatalf("stopped while waiting to restart: %+v", exit)
	}
}

// TestServiceUnlimitedCappedAndReset: maxRestarts 0 keeps restarting with
// the delay capped at maxDelay; a run longer than resetAfter starts the
// backoff over.
func TestServiceUnlimitedCappedAndReset(t *testing.T) {
	t.Parallel()
	ts := startServer(t, testConfig(t))
	c := ts.client
	counter := filepath.Join(t.TempDir(), "n")
	info, err := c.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{
		// The 7th run is healthy for a while (longer than resetAfter).
		Shell: fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s; echo run $n; if [ $n -eq 7 ]; then sleep 0.6; fi; exit 3`, counter),
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways, MaxRestarts: intp(0),
			RestartDelayMs: 20, MaxDelayMs: 100, ResetAfterMs: 400},
	})
	if err != nil {
		t.Fatal(err)
	}
	evs := serviceEvents(t, c, info.JobID, 30*time.Second, func(ev protocol.Event) bool {
		return ev.Kind == protocol.KindRestarting && ev.Attempt == 9
	})
	var got []int64
	for _, p := range restartsOf(t, evs) {
		got = append(got, p.DelayMs)
	}
	want := []int64{20, 40, 80, 100, 100, 100, 20, 40, 80}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delays %v; want %v", got, want)
	}
	if _, err := c.Stop(ctxT(t, 5*time.Second), info.JobID); err != nil {
		t.Fatal(err)
	}
	_, _, exit, _ := waitDone(t, c, info.JobID, 10*time.Second)
	if exit.Reason != protocol.ReasonStopped {
		t.Fatalf("exit %+v", exit)
	}
}

// TestServiceOnFailureCleanExit: under on-failure, a run that exits 0
// ends supervision (reason exit); a killed service is not restarted.
func TestServiceOnFailureCleanExit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, testConfig(t))
	c := ts.client
	counter := filepath.Join(t.TempDir(), "n")
	info, err := c.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{
		Shell:   fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s; [ $n -ge 2 ]`, counter),
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, RestartDelayMs: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _, exit, evs := waitDone(t, c, info.JobID, 10*time.Second)
	if exit.Reason != protocol.ReasonExit || *exit.ExitCode != 0 || len(restartsOf(t, evs)) != 1 {
		t.Fatalf("exit %+v after %s", exit, kinds(evs))
	}

	// kill ends supervision even under always.
	info, err = c.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{Shell: "sleep 30", Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kill(ctxT(t, 5*time.Second), info.JobID, ""); err != nil {
		t.Fatal(err)
	}
	_, _, exit, evs = waitDone(t, c, info.JobID, 10*time.Second)
	if exit.Reason != protocol.ReasonManualCancel || len(restartsOf(t, evs)) != 0 {
		t.Fatalf("killed service: %+v after %s", exit, kinds(evs))
	}
	requireGroupGone(t, info.Pgid)

	// start and restart refuse one-shot jobs.
	one, err := c.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Restart(ctxT(t, 5*time.Second), one.JobID); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("restart of a one-shot job: %v", err)
	}
	if _, err := c.StartService(ctxT(t, 5*time.Second), "j-nosuch"); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("start of an unknown job: %v", err)
	}
}

// TestServiceRestartOp: restart ends the current run gracefully (its whole
// group), records manual-restart and starts the next run at once; stop
// ends it with nothing left behind.
func TestServiceRestartOp(t *testing.T) {
	t.Parallel()
	ts := startServer(t, testConfig(t))
	c := ts.client
	info, err := c.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{
		Shell:   `sleep 60 & echo up $$; wait`,
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways},
	})
	if err != nil {
		t.Fatal(err)
	}
	serviceEvents(t, c, info.JobID, 10*time.Second, func(ev protocol.Event) bool { return ev.Kind == protocol.KindStdout })
	if _, err := c.Restart(ctxT(t, 5*time.Second), info.JobID); err != nil {
		t.Fatal(err)
	}
	evs := serviceEvents(t, c, info.JobID, 10*time.Second, func(ev protocol.Event) bool { return ev.Kind == protocol.KindStarted && ev.Attempt == 2 })
	rs := restartsOf(t, evs)
	if len(rs) != 1 || rs[0].Reason != protocol.ReasonManualRestart || rs[0].DelayMs != 0 {
		t.Fatalf("restart: %+v", rs)
	}
	requireGroupGone(t, info.Pgid)
	st, err := c.Status(ctxT(t, 5*time.Second), info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Attempt != 2 || st.Pid == info.Pid || st.Restarts != 1 {
		t.Fatalf("after restart: %+v", st)
	}
	res, err := c.Stop(ctxT(t, 5*time.Second), info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	_, _, exit, _ := waitDone(t, c, info.JobID, 10*time.Second)
	if exit.Reason != protocol.ReasonStopped || res.AlreadyFinished {
		t.Fatalf("stop: %+v", exit)
	}
	requireGroupGone(t, st.Pgid)
	hist, _ := c.History(ctxT(t, 5*time.Second), info.JobID)
	if len(hist) != 2 || hist[0].Reason != protocol.ReasonManualRestart || hist[1].Reason != protocol.ReasonStopped || hist[1].Restarted {
		t.Fatalf("history %+v", hist)
	}
}

// TestNotifyReadyAndWatchdog: a notify job is ready only after READY=1
// (a stranger's READY=1 is ignored); once it stops sending WATCHDOG=1 it
// is killed with reason watchdog and restarted by its policy.
func TestNotifyReadyAndWatchdog(t *testing.T) {
	t.Parallel()
	ts := startServer(t, testConfig(t))
	c := ts.client
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{
		Argv: []string{exe}, Stdin: true, Notify: true, WatchdogIntervalMs: 1500,
		// 6 pings 100 ms apart after READY=1, then it hangs.
		Env:     map[string]string{"ES_NOTIFY_HELPER": "100:6"},
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, RestartDelayMs: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	serviceEvents(t, c, info.JobID, 10*time.Second, func(ev protocol.Event) bool { return ev.Kind == protocol.KindStdout })
	st, _ := c.Status(ctxT(t, 5*time.Second), info.JobID)
	if !st.Notify || st.Ready {
		t.Fatalf("before READY=1: %+v", st)
	}
	// A process outside the job is not heard.
	sock := filepath.Join(ts.cfg.StateDir, "notify", info.JobID+".1.sock")
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatalf("notify socket: %v", err)
	}
	if _, err := conn.Write([]byte("READY=1")); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if _, err := c.Write(ctxT(t, 5*time.Second), info.JobID, []byte("go\n"), false); err != nil {
		t.Fatal(err)
	}
	evs := serviceEvents(t, c, info.JobID, 20*time.Second, func(ev protocol.Event) bool { return ev.Kind == protocol.KindStarted && ev.Attempt == 2 })
	var ready, readyAt, lastOut int = 0, -1, -1
	for i, ev := range evs {
		switch ev.Kind {
		case protocol.KindReady:
			ready++
			readyAt = i
			var p protocol.ReadyPayload
			if err := ev.DecodePayload(&p); err != nil || p.Attempt != 1 || p.Status != "serving" {
				t.Fatalf("ready payload %+v %v", p, err)
			}
		case protocol.KindStdout:
			var p protocol.OutputPayload
			_ = ev.DecodePayload(&p)
			if strings.Contains(string(p.Data), "ready sent") {
				lastOut = i
			}
		}
	}
	if ready != 1 || readyAt < 0 {
		t.Fatalf("%d ready events: %s", ready, kinds(evs))
	}
	_ = lastOut
	rs := restartsOf(t, evs)
	if len(rs) != 1 || rs[0].Reason != protocol.ReasonWatchdog {
		t.Fatalf("restarts %+v; want one with reason watchdog", rs)
	}
	// Unfed, the watchdog fires 1500 ms after the start; fed until ~600 ms
	// after READY=1, it fires a whole interval after the last ping.
	if rs[0].DurationMs < 1900 {
		t.Fatalf("the run lasted %d ms: the watchdog fired although it was fed", rs[0].DurationMs)
	}
	st, _ = c.Status(ctxT(t, 5*time.Second), info.JobID)
	if st.Ready || st.Attempt != 2 {
		t.Fatalf("second run before READY=1: %+v", st)
	}
	if _, err := c.Stop(ctxT(t, 5*time.Second), info.JobID); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, info.JobID, 10*time.Second)
}

// TestNotifyWithSystemdNotify: the real systemd-notify tool (when
// installed) marks a shell job ready.
func TestNotifyWithSystemdNotify(t *testing.T) {
	t.Parallel()
	tool, err := exec.LookPath("systemd-notify")
	if err != nil {
		t.Skip("systemd-notify is not installed (Debian package systemd); the in-binary notify client covers the protocol")
	}
	ts := startServer(t, testConfig(t))
	c := ts.client
	info, err := c.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{
		Shell: tool + ` --ready --status="warming done"; sleep 30`, Notify: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	serviceEvents(t, c, info.JobID, 10*time.Second, func(ev protocol.Event) bool { return ev.Kind == protocol.KindReady })
	st, _ := c.Status(ctxT(t, 5*time.Second), info.JobID)
	if !st.Ready || st.NotifyStatus != "warming done" {
		t.Fatalf("status %+v", st)
	}
	if _, err := c.Stop(ctxT(t, 5*time.Second), info.JobID); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, info.JobID, 10*time.Second)
}

// TestResourceLimits: rlimits are in force from the first instruction of
// the program; cgroup limits are applied or reported unavailable.
func TestResourceLimits(t *testing.T) {
	t.Parallel()
	ts := startServer(t, testConfig(t))
	c := ts.client
	run := func(shell string, l protocol.ResourceLimits) (string, string, protocol.ExitPayload, protocol.JobInfo) {
		t.Helper()
		info, err := c.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{Shell: shell, Limits: &l})
		if err != nil {
			t.Fatal(err)
		}
		out, errs, exit, _ := waitDone(t, c, info.JobID, 20*time.Second)
		st, _ := c.Status(ctxT(t, 5*time.Second), info.JobID)
		return out, errs, exit, st
	}
	open := `exec 3</dev/null 4</dev/null 5</dev/null 6</dev/null && echo opened`
	_, errs, exit, st := run(open, protocol.ResourceLimits{MaxOpenFiles: 5})
	if exit.ExitCode == nil || *exit.ExitCode == 0 || !strings.Contains(errs, "Too many open files") {
		t.Fatalf("open files over the limit: exit %+v stderr %q", exit, errs)
	}
	if st.Limits == nil || !strings.Contains(strings.Join(st.Limits.Applied, ","), "maxOpenFiles=5") {
		t.Fatalf("limits info %+v", st.Limits)
	}
	if out, _, exit, _ := run(open, protocol.ResourceLimits{MaxOpenFiles: 64}); *exit.ExitCode != 0 || out != "opened\n" {
		t.Fatalf("within the limit: %+v %q", exit, out)
	}
	// 512 MiB buffer under a 256 MiB address space.
	_, errs, exit, _ = run(`dd if=/dev/zero of=/dev/null bs=512M count=1`, protocol.ResourceLimits{MaxAddressSpaceBytes: 256 << 20})
	if exit.ExitCode == nil || *exit.ExitCode == 0 || !strings.Contains(errs, "memory exhausted") {
		t.Fatalf("address space over the limit: exit %+v stderr %q", exit, errs)
	}
	nice := 7
	out, _, _, _ := run(`cut -d')' -f2 /proc/self/stat | cut -d' ' -f18`, protocol.ResourceLimits{Nice: &nice})
	if strings.TrimSpace(out) != "7" {
		t.Fatalf("nice: %q", out)
	}
	// cgroup limits: applied where the controllers are delegated, else
	// reported with the reason.
	_, _, _, st = run(`true`, protocol.ResourceLimits{MemoryMaxBytes: 64 << 20, CPUWeight: 50})
	if st.Limits == nil {
		t.Fatal("no limits info for cgroup limits")
	}
	for _, name := range []string{"memory.max", "cpu.weight"} {
		applied := strings.Contains(strings.Join(st.Limits.Applied, ","), name+"=")
		why, unavailable := st.Limits.Unavailable[name]
		if applied == unavailable {
			t.Fatalf("%s: applied %v, unavailable %v (%q)", name, applied, unavailable, why)
		}
		if unavailable {
			t.Logf("%s not applied here (reported): %s", name, why)
		}
	}
}

// TestServiceOpsBadInput: the service ops refuse missing, malformed and
// unknown job ids with stable codes, and keep serving.
func TestServiceOpsBadInput(t *testing.T) {
	t.Parallel()
	ts := startServer(t, testConfig(t))
	c := ts.client
	for _, op := range []protocol.Op{protocol.OpStart, protocol.OpRestart, protocol.OpStop, protocol.OpHistory} {
		for i, c2 := range []struct {
			args any
			code protocol.Code
		}{
			{map[string]any{}, protocol.CodeInvalidArgument},
			{map[string]any{"jobId": 42}, protocol.CodeBadRequest},
			{map[string]any{"jobId": "j-unknown"}, protocol.CodeNotFound},
			{map[string]any{"jobId": strings.Repeat("x", 10000)}, protocol.CodeInvalidArgument},
		} {
			err := c.Call(ctxT(t, 5*time.Second), op, c2.args, nil)
			if protocol.CodeOf(err) != c2.code {
				t.Errorf("%s case %d: %.200v; want %s", op, i, err, c2.code)
			}
		}
	}
	// Spawn with a bad policy is refused before anything starts.
	_, err := c.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{Argv: []string{"true"}, Restart: &protocol.RestartPolicy{Policy: "sometimes"}})
	if protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("bad policy: %v", err)
	}
	if _, err := c.Health(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("not serving after bad input: %v", err)
	}
}

// TestServiceBetweenRunsAudit: what a services audit found. A running
// service kept its previous run's endedAt (negative runtimes in status);
// write and resize on a PTY service between runs failed with internal
// errors ("use of closed file") and status said its stdin was open.
func TestServiceBetweenRunsAudit(t *testing.T) {
	ts := startServer(t, testConfig(t))
	c := ts.client
	ctx := ctxT(t, 30*time.Second)
	info, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "1000"}, Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill(context.Background(), info.JobID, "SIGKILL")
	if _, err := c.Stop(ctx, info.JobID); err != nil {
		t.Fatal(err)
	}
	if _, done, err := c.Wait(ctx, info.JobID, 10*time.Second); err != nil || !done {
		t.Fatalf("stop: %v", err)
	}
	again, err := c.StartService(ctx, info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if again.State != protocol.StateRunning || again.EndedAt != 0 {
		t.Fatalf("started again: state %s, endedAt %d (the last run's)", again.State, again.EndedAt)
	}

	pty, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "exit 3", Pty: &protocol.PtyArgs{},
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways, RestartDelayMs: 60_000}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill(context.Background(), pty.JobID, "")
	eventually(t, 10*time.Second, "the pty service waiting to restart", func() bool {
		st, err := c.Status(ctx, pty.JobID)
		return err == nil && st.State == protocol.StateRestarting
	})
	if st, _ := c.Status(ctx, pty.JobID); st.StdinOpen {
		t.Fatal("status says stdin is open between runs")
	}
	if err := c.Resize(ctx, pty.JobID, 40, 100); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("resize between runs: %v", err)
	}
	if _, err := c.Write(ctx, pty.JobID, []byte("x"), false); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("write between runs: %v", err)
	}
}

// TestServiceRunsJournaledWhenNeeded: a service started by hand after its
// supervision ended is journaled (as running) before its run starts; runs
// restarted by policy are not journaled one by one (their record says
// running or restarting already): a crash-looping service does not write
// the journal at every restart.
func TestServiceRunsJournaledWhenNeeded(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.JournalFlushInterval = time.Hour
	ts := startServer(t, cfg)
	c := ts.client
	ctx := ctxT(t, 30*time.Second)
	writes := func() float64 {
		return value(scrape2(t, ts), "exec_supervisor_journal_writes_total")
	}
	// 40 quick runs, restarted 5 ms apart (no backoff), then the limit.
	info, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "exit 1", Restart: &protocol.RestartPolicy{
		Policy: protocol.RestartOnFailure, RestartDelayMs: 5, MaxDelayMs: 5, BackoffMultiplier: 1, MaxRestarts: ptrInt(40), RestartWindowMs: 60000}})
	if err != nil {
		t.Fatal(err)
	}
	before, start := writes(), time.Now()
	_, _, exit, _ := waitDone(t, c, info.JobID, 20*time.Second)
	if exit.Reason != protocol.ReasonRestartLimit {
		t.Fatalf("end: %+v", exit)
	}
	// State changes are journaled at most every 100 ms (with cgroups; 25
	// ms without); one write per run would be 40 more.
	allowed := float64(time.Since(start)/(25*time.Millisecond)) + 12
	if n := writes() - before; n > allowed {
		t.Fatalf("%v journal writes for 40 runs restarted by policy in %v (coalescing allows %v)", n, time.Since(start), allowed)
	}
}
