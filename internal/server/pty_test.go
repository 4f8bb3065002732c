package server

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// waitForOutput polls a job's output until it contains want.
func waitForOutput(t *testing.T, ts *testServer, id, want string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		res, err := ts.client.Poll(ctxT(t, 5*time.Second), id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		for _, c := range res.Chunks {
			b.Write(c.Data)
		}
		if strings.Contains(b.String(), want) {
			return b.String()
		}
		if time.Now().After(deadline) {
			t.Fatalf("output of %s never contained %q; got %q", id, want, b.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the job's output
	}
}

// TestPTYAndPipeParity runs the same lifecycle table for pipe and PTY jobs.
func TestPTYAndPipeParity(t *testing.T) {
	for _, mode := range []string{"pipe", "pty"} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(t)
			ts := startServer(t, cfg)
			ctx := ctxT(t, 60*time.Second)
			spawn := func(a protocol.SpawnArgs) protocol.JobInfo {
				t.Helper()
				if mode == "pty" {
					a.Pty = &protocol.PtyArgs{Rows: 30, Cols: 100}
				}
				j, err := ts.client.Spawn(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				if j.Pty != (mode == "pty") {
					t.Fatalf("pty flag %v in mode %s", j.Pty, mode)
				}
				return j
			}
			t.Run("direct-exit", func(t *testing.T) {
				j := spawn(protocol.SpawnArgs{Shell: "echo out-$((6*7)); exit 5"})
				out, _, exit, _ := waitDone(t, ts.client, j.JobID, 10*time.Second)
				if !strings.Contains(out, "out-42") || exit.Reason != protocol.ReasonExit || *exit.ExitCode != 5 {
					t.Fatalf("out %q exit %+v", out, exit)
				}
				requireGroupGone(t, j.Pgid)
			})
			t.Run("manual-cancel-tree", func(t *testing.T) {
				// A child and a grandchild (sh -c ... &), none may survive.
				j := spawn(protocol.SpawnArgs{Shell: "sleep 300 & sh -c 'sleep 300 & wait' & echo up; wait", GraceMs: 300})
				waitForOutput(t, ts, j.JobID, "up", 10*time.Second)
				if _, err := ts.client.Kill(ctx, j.JobID, ""); err != nil {
					t.Fatal(err)
				}
				_, _, exit, _ := waitDone(t, ts.client, j.JobID, 10*time.Second)
				if exit.Reason != protocol.ReasonManualCancel {
					t.Fatalf("exit %+v", exit)
				}
				requireGroupGone(t, j.Pgid)
			})
			t.Run("overall-timeout", func(t *testing.T) {
				j := spawn(protocol.SpawnArgs{Argv: []string{"sleep", "300"}, TimeoutMs: 200})
				_, _, exit, _ := waitDone(t, ts.client, j.JobID, 10*time.Second)
				if exit.Reason != protocol.ReasonOverallTimeout {
					t.Fatalf("exit %+v", exit)
				}
				requireGroupGone(t, j.Pgid)
			})
			t.Run("no-output-timeout", func(t *testing.T) {
				j := spawn(protocol.SpawnArgs{Shell: "echo once; exec sleep 300", NoOutputTimeoutMs: 300})
				_, _, exit, _ := waitDone(t, ts.client, j.JobID, 10*time.Second)
				if exit.Reason != protocol.ReasonNoOutputTimeout {
					t.Fatalf("exit %+v", exit)
				}
				requireGroupGone(t, j.Pgid)
			})
			t.Run("intermittent-output-keeps-watchdog-away", func(t *testing.T) {
				// Output every 0.1 s for about 3 s, past a no-output
				// timeout of 2 s: the gaps leave the timeout a wide
				// margin under load (a 0.4 s timeout did not).
				j := spawn(protocol.SpawnArgs{Shell: "i=0; while [ $i -lt 30 ]; do echo tick; sleep 0.1; i=$((i+1)); done", NoOutputTimeoutMs: 2000})
				out, _, exit, _ := waitDone(t, ts.client, j.JobID, 30*time.Second)
				if exit.Reason != protocol.ReasonExit || strings.Count(out, "tick") != 30 {
					t.Fatalf("exit %+v, %d ticks", exit, strings.Count(out, "tick"))
				}
			})
			t.Run("exit-racing-kill", func(t *testing.T) {
				for i := 0; i < 10; i++ {
					j := spawn(protocol.SpawnArgs{Argv: []string{"true"}})
					go ts.client.Kill(ctx, j.JobID, "")
					_, _, exit, events := waitDone(t, ts.client, j.JobID, 10*time.Second)
					if exit.Reason != protocol.ReasonExit && exit.Reason != protocol.ReasonManualCancel {
						t.Fatalf("reason %s", exit.Reason)
					}
					n := 0
					for _, ev := range events {
						if ev.Kind.Terminal() {
							n++
						}
					}
					if n != 1 {
						t.Fatalf("%d terminal events", n)
					}
				}
			})
		})
	}
}

// TestPTYInteractiveShell drives sh -i through the client: submit, Ctrl-C,
// resize observed by stty, Ctrl-D.
func TestPTYInteractiveShell(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 60*time.Second)
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sh", "-i"}, Pty: &protocol.PtyArgs{Rows: 24, Cols: 80},
		Env: map[string]string{"PS1": "PROMPT> ", "ENV": ""}})
	if err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, ts, j.JobID, "PROMPT> ", 10*time.Second)
	if err := ts.client.Submit(ctx, j.JobID, "echo hi-$((40+2))"); err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, ts, j.JobID, "hi-42", 10*time.Second)
	// Ctrl-C interrupts a running command; the shell answers again.
	if err := ts.client.Submit(ctx, j.JobID, "echo sleeping-now; sleep 30; echo not-interrupted"); err != nil {
		t.Fatal(err)
	}
	// The command's own output line (not the echo of the typed line).
	waitForOutput(t, ts, j.JobID, "\r\nsleeping-now\r\n", 10*time.Second)
	if err := ts.client.SendKeys(ctx, j.JobID, "C-c"); err != nil {
		t.Fatal(err)
	}
	if err := ts.client.Submit(ctx, j.JobID, "echo after-$((1+1))"); err != nil {
		t.Fatal(err)
	}
	out := waitForOutput(t, ts, j.JobID, "after-2", 10*time.Second)
	// The typed line is echoed once; a second occurrence would be the
	// command's own output.
	if strings.Count(out, "not-interrupted") != 1 || !strings.Contains(out, "^C") {
		t.Fatalf("Ctrl-C did not interrupt: %q", out)
	}
	// Resize: the program sees the new size.
	if err := ts.client.Resize(ctx, j.JobID, 40, 123); err != nil {
		t.Fatal(err)
	}
	if err := ts.client.Submit(ctx, j.JobID, "stty size"); err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, ts, j.JobID, "40 123", 10*time.Second)
	info, err := ts.client.Status(ctx, j.JobID)
	if err != nil || info.Rows != 40 || info.Cols != 123 || !info.StdinOpen {
		t.Fatalf("status: %+v %v", info, err)
	}
	// Ctrl-D ends the shell.
	if err := ts.client.SendKeys(ctx, j.JobID, "ctrl-d"); err != nil {
		t.Fatal(err)
	}
	_, _, exit, _ := waitDone(t, ts.client, j.JobID, 10*time.Second)
	if exit.Reason != protocol.ReasonExit {
		t.Fatalf("exit %+v", exit)
	}
	if _, err := ts.client.Write(ctx, j.JobID, []byte("x"), false); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("write to a finished job: %v", err)
	}
}

// TestPipeStdin: write and eof reach a pipe job's stdin; jobs without
// stdin and bad resizes get clear errors.
func TestPipeStdin(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 20*time.Second)
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Write(ctx, j.JobID, []byte("hello "), false); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Write(ctx, j.JobID, []byte("world\n"), true); err != nil {
		t.Fatal(err)
	}
	out, _, exit, _ := waitDone(t, ts.client, j.JobID, 10*time.Second)
	if out != "hello world\n" || exit.Reason != protocol.ReasonExit {
		t.Fatalf("out %q exit %+v", out, exit)
	}
	noin, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.client.Kill(ctx, noin.JobID, "SIGKILL")
	if _, err := ts.client.Write(ctx, noin.JobID, []byte("x"), false); protocol.CodeOf(err) != protocol.CodeInvalidArgument || !strings.Contains(err.Error(), "stdin: true") {
		t.Fatalf("write without stdin: %v", err)
	}
	if err := ts.client.Resize(ctx, noin.JobID, 10, 10); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("resize of a pipe job: %v", err)
	}
	for _, bad := range []protocol.WriteArgs{{JobID: noin.JobID}, {JobID: noin.JobID, Data: make([]byte, protocol.MaxWriteBytes+1)}} {
		if err := ts.client.Call(ctx, protocol.OpWrite, &bad, nil); err == nil {
			t.Fatalf("bad write accepted: %d bytes", len(bad.Data))
		}
	}
	if _, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}, Stdin: true, Pty: &protocol.PtyArgs{}}); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("stdin with pty: %v", err)
	}
	// Terminal sizes out of 1..10000 are refused, not taken modulo 65536
	// (65537 rows were a 1-row terminal): in spawn's pty as in resize.
	for _, size := range []map[string]any{{"rows": 65537}, {"cols": 100000}, {"rows": -1}, {"rows": 10001, "cols": 80}} {
		args := map[string]any{"argv": []string{"true"}, "pty": size}
		if err := ts.client.Call(ctx, protocol.OpSpawn, args, nil); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
			t.Fatalf("spawn with pty %v: %v", size, err)
		}
		args = map[string]any{"jobId": noin.JobID, "rows": 24, "cols": 80}
		for k, v := range size {
			args[k] = v
		}
		if err := ts.client.Call(ctx, protocol.OpResize, args, nil); protocol.CodeOf(err) != protocol.CodeInvalidArgument || !strings.Contains(err.Error(), "1..10000") {
			t.Fatalf("resize to %v: %v", size, err)
		}
	}
	big, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "stty size", Pty: &protocol.PtyArgs{Rows: 10000, Cols: 10000}})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _, _ := waitDone(t, ts.client, big.JobID, 10*time.Second); !strings.Contains(out, "10000 10000") {
		t.Fatalf("a 10000x10000 terminal: stty says %q", out)
	}
}

// TestPTYBracketedPaste: a program that turns bracketed paste on gets
// pastes wrapped in the paste markers.
func TestPTYBracketedPaste(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 20*time.Second)
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: `printf '\033[?2004hREADY\n'; stty -echo; exec cat`, Pty: &protocol.PtyArgs{}})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.client.Kill(ctx, j.JobID, "SIGKILL")
	waitForOutput(t, ts, j.JobID, "READY", 10*time.Second)
	info, err := ts.client.Status(ctx, j.JobID)
	if err != nil || !info.BracketedPaste {
		t.Fatalf("bracketed paste not detected: %+v %v", info, err)
	}
	if err := ts.client.Paste(ctx, j.JobID, "pasted-text\r"); err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, ts, j.JobID, "\x1b[200~pasted-text", 10*time.Second)
}

// TestPTYWriteToProgramNotReading: a write to a terminal whose program
// does not read it fails after the write timeout (2 s) like a pipe's, and
// the job can then be killed and finishes. (The terminal's master was left
// in blocking mode: such a write blocked for good and the job never ended.)
func TestPTYWriteToProgramNotReading(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 60*time.Second)
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "stty raw -echo; echo ready; exec sleep 60", Pty: &protocol.PtyArgs{}})
	if err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, ts, j.JobID, "ready", 10*time.Second)
	start := time.Now()
	_, err = ts.client.Write(ctx, j.JobID, make([]byte, 256<<10), false)
	if protocol.CodeOf(err) != protocol.CodeInvalidArgument || !strings.Contains(err.Error(), "not reading its input") {
		t.Fatalf("write to a terminal nobody reads: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the write failed only after %v", took)
	}
	if _, err := ts.client.Kill(ctx, j.JobID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if _, finished, err := ts.client.Wait(ctx, j.JobID, 20*time.Second); err != nil || !finished {
		t.Fatalf("job after kill: finished %v, %v", finished, err)
	}
}

// TestPTYServiceKeepsItsSize: a PTY service's next run gets the terminal
// size it was last given (it went back to the spawn's size).
func TestPTYServiceKeepsItsSize(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 30*time.Second)
	c := ts.client
	j, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "stty size; exec sleep 300", Pty: &protocol.PtyArgs{Rows: 30, Cols: 90},
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways, RestartDelayMs: 10}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill(context.Background(), j.JobID, "SIGKILL")
	output := func() string {
		r, err := c.Poll(ctx, j.JobID, 0, 0)
		if err != nil {
			return ""
		}
		var out strings.Builder
		for _, ch := range r.Chunks {
			out.Write(ch.Data)
		}
		return out.String()
	}
	eventually(t, 10*time.Second, "the first run's size", func() bool { return strings.Contains(output(), "30 90") })
	if err := c.Resize(ctx, j.JobID, 40, 120); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Restart(ctx, j.JobID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the next run at the new size", func() bool { return strings.Contains(output(), "40 120") })
}

// TestResumedPTYServiceKeepsItsSize: a PTY service resumed from the
// journal gets the terminal size it last had (the journal did not keep
// it: the spawn's size came back).
func TestResumedPTYServiceKeepsItsSize(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	spec := protocol.SpawnArgs{Shell: "stty size; exec sleep 300", Pty: &protocol.PtyArgs{Rows: 30, Cols: 90},
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}}
	doc := &journal.File{InstanceID: "dead", Jobs: []journal.Record{{
		JobID: "j-pty", Shell: spec.Shell, Pid: 4194000, Pgid: 4194000, StartTicks: 1, BootID: proc.BootID(), State: "running", LastSeq: 3,
		Pty: true, Rows: 45, Cols: 133,
		Service: &journal.Service{Spec: spec, Attempt: 1},
	}}}
	if err := journal.New(cfg.JournalPath()).Save(doc); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, cfg)
	ctx := ctxT(t, 10*time.Second)
	defer ts.client.Kill(context.Background(), "j-pty", "SIGKILL")
	eventually(t, 10*time.Second, "the resumed run at the size it had", func() bool {
		r, err := ts.client.Poll(ctx, "j-pty", 0, 0)
		if err != nil {
			return false
		}
		var out strings.Builder
		for _, ch := range r.Chunks {
			out.Write(ch.Data)
		}
		return strings.Contains(out.String(), "45 133")
	})
}

// TestPTYLineMode: a terminal in line mode keeps 4095 bytes of a line and
// drops the rest, so a longer line is refused, nothing written (it was
// cut, and a shell ran another command than the one sent, the write
// answered as a success); a line that fits goes through; and eof after
// data that does not end a line ends the input (one Ctrl-D only handed
// over the unfinished line: the job waited for more). Found by a PTY audit.
func TestPTYLineMode(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 30*time.Second)
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "stty -echo; echo ready; read x; echo got-${#x}; wc -c", Pty: &protocol.PtyArgs{}})
	// (3000 + 1000 typed bytes make the line read: got-4000)
	if err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, ts, j.JobID, "ready", 10*time.Second)
	if _, err := ts.client.Write(ctx, j.JobID, append(bytes.Repeat([]byte("x"), 5000), '\n'), false); protocol.CodeOf(err) != protocol.CodeInvalidArgument || !strings.Contains(err.Error(), "line mode") {
		t.Fatalf("a 5000-byte line: %v, want invalid-argument (line mode)", err)
	}
	// A line made of two writes counts whole (the second write's 3000
	// bytes joined the first's: the line was cut at 4095; found by a
	// review).
	if _, err := ts.client.Write(ctx, j.JobID, bytes.Repeat([]byte("x"), 3000), false); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Write(ctx, j.JobID, append(bytes.Repeat([]byte("x"), 3000), '\n'), false); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("a line of 3000 + 3000 bytes in two writes: %v, want invalid-argument", err)
	}
	// Typed input (attach) is not refused: the terminal treats it as its
	// keyboard's (a paste in 4 KiB reads went missing but for its end).
	if _, err := ts.client.Type(ctx, j.JobID, append(bytes.Repeat([]byte("x"), 1000), '\n')); err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, ts, j.JobID, "got-4000", 10*time.Second)
	if _, err := ts.client.Write(ctx, j.JobID, []byte("abc"), true); err != nil {
		t.Fatal(err)
	}
	out, _, exit, _ := waitDone(t, ts.client, j.JobID, 10*time.Second)
	if exit.Reason != protocol.ReasonExit || !strings.Contains(out, "3") {
		t.Fatalf("after eof: %q %+v", out, exit)
	}
}

// TestPTYKillHangsUp: killing a PTY job hangs it up as a closing terminal
// does (SIGHUP, SIGTERM, SIGCONT): an interactive shell, which ignores
// SIGTERM, ends at once instead of waiting out the grace and dying of
// SIGKILL (found by a PTY audit: 5 s and SIGKILL for every sh -i).
func TestPTYKillHangsUp(t *testing.T) {
	cfg := testConfig(t)
	cfg.Jobs.Grace = 20 * time.Second
	ts := startServer(t, cfg)
	ctx := ctxT(t, 30*time.Second)
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sh", "-i"}, Pty: &protocol.PtyArgs{},
		Env: map[string]string{"PS1": "PROMPT> ", "ENV": ""}})
	if err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, ts, j.JobID, "PROMPT> ", 10*time.Second)
	start := time.Now()
	if _, err := ts.client.Kill(ctx, j.JobID, ""); err != nil {
		t.Fatal(err)
	}
	_, _, exit, _ := waitDone(t, ts.client, j.JobID, 15*time.Second)
	if exit.Reason != protocol.ReasonManualCancel || exit.Signal == "SIGKILL" || time.Since(start) > 10*time.Second {
		t.Fatalf("kill of sh -i: %+v after %v; want it ended by the hangup, not SIGKILL after the grace", exit, time.Since(start))
	}
	// A program that cleans up on SIGTERM gets SIGTERM first, and its
	// turn (the hangup came first: no cleanup; found by a review).
	c, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "trap 'echo CLEANUP; exit 0' TERM; echo ready; while :; do sleep 0.1; done", Pty: &protocol.PtyArgs{}})
	if err != nil {
		t.Fatal(err)
	}
	waitForOutput(t, ts, c.JobID, "ready", 10*time.Second)
	if _, err := ts.client.Kill(ctx, c.JobID, ""); err != nil {
		t.Fatal(err)
	}
	out, _, exit, _ := waitDone(t, ts.client, c.JobID, 15*time.Second)
	if !strings.Contains(out, "CLEANUP") || exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Fatalf("kill of a job that cleans up on SIGTERM: %q %+v", out, exit)
	}
}
