package jobs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// heldCounter counts OutputHeld calls (held, released).
type heldCounter struct {
	mu             sync.Mutex
	held, released int
}

func (c *heldCounter) hook(h bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h {
		c.held++
	} else {
		c.released++
	}
}

func (c *heldCounter) get() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held, c.released
}

// journalAll records every job's current state as written to the journal.
func journalAll(m *Manager) { m.Journaled(m.Snapshots(0, nil)) }

// blockedWriting waits until pid sleeps in a write to a full pipe or
// terminal (nothing reads its output any more).
func blockedWriting(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/wchan")
		w := string(b)
		return err == nil && (strings.Contains(w, "pipe_write") || strings.Contains(w, "tty_write") ||
			strings.Contains(w, "n_tty_write") || strings.Contains(w, "wait_woken"))
	})
}

// TestOutputHeldAtReserveGate: a job whose journal record is not rewritten
// (the disk is full) is never let publish past what a successor would
// number from (its journaled seq plus seqReserve, output end plus
// offsetReserve): its output is no longer read once three quarters of a
// reserve is used, the job blocking on its output with nothing lost, and
// status says so. A journal write that lands lets it go on; a kill ends it
// while held. Pipe jobs (read by runLoop, handed to readLoops when held)
// and terminal jobs (readLoop), by seqs and by offsets.
func TestOutputHeldAtReserveGate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pty     bool
		offsets bool
	}{{"pipe-seqs", false, false}, {"pipe-offsets", false, true}, {"pty-seqs", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var hc heldCounter
			m := New(Config{}, discard(), nil, WithHooks(Hooks{OutputHeld: hc.hook}))
			defer m.Close(context.Background())
			args := protocol.SpawnArgs{Argv: []string{"yes"}}
			if tc.pty {
				args.Pty = &protocol.PtyArgs{}
			}
			j, info, err := m.SpawnJob(args)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _, _ = j.Kill(protocol.ReasonManualCancel, SigKill); <-j.Done() }()
			waitFor(t, func() bool { return j.Info().OutputEnd > 0 })
			journalAll(m)
			// Use up three quarters of a reserve but a little (as a job
			// that printed that much since the last write that landed).
			limitSeq, limitOff := uint64(0), int64(0)
			useReserve := func() {
				j.mu.Lock()
				defer j.mu.Unlock()
				if tc.offsets {
					j.journal.offSnap = j.out.offset + 1000 - gateOff
					limitOff = j.journal.offSnap + gateOff
				} else {
					j.out.seq = j.journal.seqSnap + gateSeq - 5
					limitSeq = j.journal.seqSnap + gateSeq
				}
			}
			useReserve()
			waitFor(t, func() bool { return j.Info().OutputHeld })
			blockedWriting(t, info.Pid)
			// Held: what was read stops within a round of reads of the
			// limit (without the gate, yes is many MB past it by now).
			got := j.Info()
			if tc.offsets && got.OutputEnd > limitOff+1<<20 || !tc.offsets && got.LastSeq > limitSeq+64 {
				t.Fatalf("held at seq %d (limit %d), output end %d (limit %d)", got.LastSeq, limitSeq, got.OutputEnd, limitOff)
			}
			if got.State != protocol.StateRunning {
				t.Fatalf("state %s while held", got.State)
			}
			if h, _ := hc.get(); h != 1 {
				t.Fatalf("OutputHeld(true) called %d times, want 1", h)
			}
			again := j.Info()
			if again.LastSeq != got.LastSeq || again.OutputEnd != got.OutputEnd {
				t.Fatalf("output read while held: seq %d -> %d, end %d -> %d", got.LastSeq, again.LastSeq, got.OutputEnd, again.OutputEnd)
			}

			// The write lands: output is read again.
			journalAll(m)
			waitFor(t, func() bool { i := j.Info(); return !i.OutputHeld && i.LastSeq > got.LastSeq+10 })
			if h, r := hc.get(); h != 1 || r != 1 {
				t.Fatalf("OutputHeld calls: %d held, %d released; want 1 and 1", h, r)
			}

			// Held again, then killed: it ends (its exit lets what is
			// left be read), and nothing stays held.
			useReserve()
			waitFor(t, func() bool { return j.Info().OutputHeld })
			if _, err := j.Kill(protocol.ReasonManualCancel, 0); err != nil {
				t.Fatal(err)
			}
			select {
			case <-j.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("a job killed while held did not end")
			}
			if i := j.Info(); i.OutputHeld || i.Reason != protocol.ReasonManualCancel {
				t.Fatalf("after the kill: held %v, reason %s", i.OutputHeld, i.Reason)
			}
			if h, r := hc.get(); h != 2 || r != 2 {
				t.Fatalf("OutputHeld calls: %d held, %d released; want 2 and 2", h, r)
			}
		})
	}
}

// TestNoGateWithoutJournal: a job no journal write ever recorded (no
// state directory, or every write failed) is not held, however far it
// numbers: no successor knows it, so none numbers past it.
func TestNoGateWithoutJournal(t *testing.T) {
	m := New(Config{}, discard(), nil)
	defer m.Close(context.Background())
	j, _, err := m.SpawnJob(protocol.SpawnArgs{Argv: []string{"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = j.Kill(protocol.ReasonManualCancel, SigKill); <-j.Done() }()
	waitFor(t, func() bool { return j.Info().OutputEnd > 0 })
	j.mu.Lock()
	from := j.out.seq + gateSeq
	j.out.seq = from
	j.mu.Unlock()
	waitFor(t, func() bool { return j.Info().LastSeq > from+100 })
	if j.Info().OutputHeld {
		t.Fatal("held without a journal")
	}
}

// TestResumedServiceHeldUntilJournaled: a service resumed after its
// supervisor died numbers its events past the record's reserve; until a
// record of that reaches the journal, a crash would restore the old record
// and number over them again, so its output is held from the start (the
// server's BeforeServiceRun write normally lands before the run starts).
func TestResumedServiceHeldUntilJournaled(t *testing.T) {
	m := New(Config{}, discard(), nil)
	defer m.Close(context.Background())
	spec := protocol.SpawnArgs{Argv: []string{"yes"}, Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure}}
	rec := journal.Record{
		JobID: "j-held", State: protocol.StateExited, Reason: protocol.ReasonSupervisorRestart, Pid: 4194000, LastSeq: 2,
		Service: &journal.Service{Spec: spec, Attempt: 1},
	}
	if err := m.Restore(rec, true); err != nil {
		t.Fatal(err)
	}
	j, _ := m.Get("j-held")
	info, err := m.Start("j-held")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = j.Kill(protocol.ReasonManualCancel, SigKill); <-j.Done() }()
	waitFor(t, func() bool { return j.Info().OutputHeld })
	blockedWriting(t, info.Pid)
	if i := j.Info(); i.OutputEnd-i.StdoutBytes > offsetReserve || i.StdoutBytes != 0 {
		t.Fatalf("read while held: %d bytes (output end %d)", i.StdoutBytes, i.OutputEnd)
	}
	journalAll(m)
	waitFor(t, func() bool { i := j.Info(); return !i.OutputHeld && i.StdoutBytes > 0 })
}

// TestPacedOutput: a paced job's output is read no further than the pace
// window past what its slowest pacer took (the child waits, nothing is
// lost), goes on as pacers take more, and runs free once released (by
// Unpace, or the release its watch was given, as when a connection goes
// away). The no-output watchdog does not count time spent held.
func TestPacedOutput(t *testing.T) {
	m := New(Config{}, discard(), nil)
	defer m.Close(context.Background())
	win := m.PaceWindow()
	var release func()
	stopped := 0
	watch := func(r func()) func() bool { release = r; return func() bool { stopped++; return true } }
	j, info, err := m.SpawnJobWith(protocol.SpawnArgs{Argv: []string{"yes"}, NoOutputTimeoutMs: 200}, SpawnOptions{Pacer: "a", PaceWatch: watch})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = j.Kill(protocol.ReasonManualCancel, SigKill); <-j.Done() }()
	const slack = 256 << 10 // (a read or two past the window, and what the merge buffers hold)
	paced := func(acked int64) protocol.JobInfo {
		t.Helper()
		waitFor(t, func() bool {
			i := j.Info()
			return i.OutputPaced && i.OutputEnd >= acked+win/2 || i.State != protocol.StateRunning // (the window shrinks a little with what events cost the ring)
		})
		blockedWriting(t, info.Pid)
		i := j.Info()
		if i.OutputEnd > acked+win+slack || i.OutputHeld || i.State != protocol.StateRunning {
			t.Fatalf("paced at %d: output end %d (window %d), held %v, state %s", acked, i.OutputEnd, win, i.OutputHeld, i.State)
		}
		return i
	}
	paced(0)
	// Held longer than the no-output timeout: not killed for it. (Time
	// passing is the point here, not a wait for an event.)
	time.Sleep(600 * time.Millisecond)
	if i := j.Info(); i.State != protocol.StateRunning {
		t.Fatalf("a paced job was ended while held: %s %s", i.State, i.Reason)
	}
	if err := j.Pace("a", win/2, watch); err != nil {
		t.Fatal(err)
	}
	paced(win / 2)
	// A second pacer behind the first holds the job where it is.
	if err := j.Pace("b", 0, nil); err != nil {
		t.Fatal(err)
	}
	aTook := j.Info().OutputEnd
	if err := j.Pace("a", aTook, nil); err != nil {
		t.Fatal(err)
	}
	held := j.Info().OutputEnd
	blockedWriting(t, info.Pid)
	if i := j.Info(); !i.OutputPaced || i.OutputEnd > held+slack {
		t.Fatalf("behind pacer b: paced %v, output end %d (was %d)", i.OutputPaced, i.OutputEnd, held)
	}
	j.Unpace("b")
	paced(aTook)
	// An offset past what was read (a client's mistake) counts as all of
	// it: the job is not held at a window it never reaches, and a later,
	// right offset moves the pace on.
	if err := j.Pace("a", 1<<61, nil); err != nil {
		t.Fatal(err)
	}
	aTook = j.Info().OutputEnd
	paced(aTook)
	if err := j.Pace("a", aTook+win/2, nil); err != nil {
		t.Fatal(err)
	}
	paced(aTook + win/2)
	// a goes away: the job runs free.
	release()
	waitFor(t, func() bool { i := j.Info(); return !i.OutputPaced && i.OutputEnd > 20*win })
	if stopped != 1 {
		t.Fatalf("watch stopped %d times, want 1", stopped)
	}
	_, _ = j.Kill(protocol.ReasonManualCancel, 0)
	<-j.Done()
	if err := j.Pace("c", 0, watch); err != nil || j.Info().OutputPaced {
		t.Fatalf("pace of a finished job: %v", err)
	}
}

// TestPaceReasonsAndRefusals: a job held both for the journal and by a
// pacer reports each reason while it holds (a journal write that lands
// leaves it paced, not held; the pacer's release then lets it go); a
// paced spawn that is refused (the job limit) sets no watch (a refused
// job is nobody's to release); small events shrink the pace window to
// what the ring can hold of them.
func TestPaceReasonsAndRefusals(t *testing.T) {
	var hc heldCounter
	m := New(Config{MaxJobs: 1}, discard(), nil, WithHooks(Hooks{OutputHeld: hc.hook}))
	defer m.Close(context.Background())
	j, info, err := m.SpawnJobWith(protocol.SpawnArgs{Argv: []string{"yes"}}, SpawnOptions{Pacer: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = j.Kill(protocol.ReasonManualCancel, SigKill); <-j.Done() }()
	waitFor(t, func() bool { return j.Info().OutputPaced })
	blockedWriting(t, info.Pid)

	watched := false
	if _, _, err := m.SpawnJobWith(protocol.SpawnArgs{Argv: []string{"true"}}, SpawnOptions{Pacer: "b", PaceWatch: func(func()) func() bool {
		watched = true
		return func() bool { return true }
	}}); !errors.Is(err, ErrTooManyJobs) || watched {
		t.Fatalf("a refused paced spawn: %v, watch set %v", err, watched)
	}

	// The journal falls behind too (as if written long ago).
	journalAll(m)
	j.mu.Lock()
	j.out.seq = j.journal.seqSnap + gateSeq
	j.openGateLocked() // (what any later change of the gate does)
	j.mu.Unlock()
	if i := j.Info(); !i.OutputHeld || !i.OutputPaced {
		t.Fatalf("held for both: outputHeld %v, outputPaced %v", i.OutputHeld, i.OutputPaced)
	}
	journalAll(m)
	if i := j.Info(); i.OutputHeld || !i.OutputPaced {
		t.Fatalf("journal written, pacer behind: outputHeld %v (want false), outputPaced %v (want true)", i.OutputHeld, i.OutputPaced)
	}
	if h, r := hc.get(); h != 1 || r != 1 {
		t.Fatalf("OutputHeld calls: %d held, %d released; want 1 and 1", h, r)
	}
	j.Unpace("a")
	waitFor(t, func() bool { i := j.Info(); return !i.OutputPaced && i.OutputEnd > 4*m.PaceWindow() })

	// Window: a ring of 1-byte events holds ~1/130 of its budget in output.
	r := newRing(2 << 20)
	for i := range 1000 {
		r.add(chunk{Chunk: protocol.Chunk{Seq: uint64(i + 1), Offset: int64(i), Data: []byte{'x'}}})
	}
	small := &Job{m: m, out: jobOutput{ring: r}}
	if w := small.paceWindowLocked(); w > m.PaceWindow()/129+1 || w < minPaceWindow {
		t.Fatalf("window with 1-byte events: %d, want about %d", w, m.PaceWindow()/129)
	}
	big := &Job{m: m, out: jobOutput{ring: newRing(2 << 20)}}
	big.out.ring.add(chunk{Chunk: protocol.Chunk{Seq: 1, Data: make([]byte, 64<<10)}})
	if w := big.paceWindowLocked(); w < m.PaceWindow()*99/100 {
		t.Fatalf("window with 64 KiB events: %d, want about %d", w, m.PaceWindow())
	}
}

// TestPaceStallLimit: a pacer that holds a job and takes nothing for
// PaceStallLimit is let go (its watch stopped, the hook called once) and
// the job runs on; one that keeps taking output is never let go however
// long it paces; a let-go pacer that paces again holds the job again.
func TestPaceStallLimit(t *testing.T) {
	var mu sync.Mutex
	n := 0
	const limit = 300 * time.Millisecond
	m := New(Config{PaceStallLimit: limit}, discard(), nil, WithHooks(Hooks{PaceStalled: func() {
		mu.Lock()
		n++
		mu.Unlock()
	}}))
	defer m.Close(context.Background())
	stallCount := func() int { mu.Lock(); defer mu.Unlock(); return n }
	win := m.PaceWindow()
	stopped := 0
	watch := func(func()) func() bool { stopped++; return func() bool { stopped--; return true } }
	j, info, err := m.SpawnJobWith(protocol.SpawnArgs{Argv: []string{"yes"}}, SpawnOptions{Pacer: "steady", PaceWatch: watch})
	if err != nil {
		t.Fatal(err)
	}

	// "steady" takes what the job prints, whenever the job waits for it,
	// for several times the limit: never let go.
	for start := time.Now(); time.Since(start) < 4*limit; {
		waitFor(t, func() bool { return j.Info().OutputPaced })
		if err := j.Pace("steady", j.Info().OutputEnd, nil); err != nil {
			t.Fatal(err)
		}
	}
	if stallCount() != 0 || stopped != 1 {
		t.Fatalf("a pacer taking output was let go: %d stalls, %d watches open", stallCount(), stopped)
	}

	// "steady" stops taking: let go after the limit; the job runs on.
	held := time.Now()
	waitFor(t, func() bool { return j.Info().OutputPaced })
	blockedWriting(t, info.Pid)
	waitFor(t, func() bool { return stallCount() == 1 })
	if waited := time.Since(held); waited < limit {
		t.Fatalf("let go after %v, before the %v limit", waited, limit)
	}
	end := j.Info().OutputEnd
	waitFor(t, func() bool { return j.Info().OutputEnd > end+4*win })
	if i := j.Info(); i.OutputPaced || stopped != 0 {
		t.Fatalf("after the stall: paced %v, %d watches open", i.OutputPaced, stopped)
	}

	// It comes back: it paces again from where it now is.
	if err := j.Pace("steady", j.Info().OutputEnd, watch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return j.Info().OutputPaced })
	blockedWriting(t, info.Pid)
	if stopped != 1 {
		t.Fatalf("paced again: %d watches open, want 1", stopped)
	}
	_, _ = j.Kill(protocol.ReasonManualCancel, SigKill)
	<-j.Done()

	// A job quiet for longer than the limit, then printing: its pacer
	// took everything there was, and keeps up, so it is not let go (the
	// clock ran from its last ack, through the quiet spell: it was).
	q, _, err := m.SpawnJobWith(protocol.SpawnArgs{Shell: "sleep 0.7; exec yes"}, SpawnOptions{Pacer: "quiet"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = q.Kill(protocol.ReasonManualCancel, SigKill); <-q.Done() }()
	for start := time.Now(); time.Since(start) < 2*limit+700*time.Millisecond; {
		waitFor(t, func() bool { return q.Info().OutputPaced })
		if err := q.Pace("quiet", q.Info().OutputEnd, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := stallCount(); n != 1 {
		t.Fatalf("a pacer keeping up with a job that was quiet was let go (%d stalls, want the 1 above)", n)
	}
	// A first pace past the output counts as all of it: the pacer holds
	// the job from there (it was taken as given, and the job ran free).
	q.Unpace("quiet")
	if err := q.Pace("late", 1<<61, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return q.Info().OutputPaced })
	// Stopped, and behind another pacer that keeps taking: let go all
	// the same, without the timer spinning meanwhile.
	if err := q.Pace("keen", q.Info().OutputEnd, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return stallCount() == 2 })
}

// TestPaceStallWhileJournalHeld: a pacer that starts holding a job while
// it is held for the journal is let go after the limit too (no timer was
// armed: the gate had closed for the journal, before the pacer held it).
func TestPaceStallWhileJournalHeld(t *testing.T) {
	var mu sync.Mutex
	n := 0
	m := New(Config{PaceStallLimit: 300 * time.Millisecond}, discard(), nil, WithHooks(Hooks{PaceStalled: func() { mu.Lock(); n++; mu.Unlock() }}))
	defer m.Close(context.Background())
	j, info, err := m.SpawnJobWith(protocol.SpawnArgs{Argv: []string{"yes"}}, SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = j.Kill(protocol.ReasonManualCancel, SigKill); <-j.Done() }()
	waitFor(t, func() bool { return j.Info().OutputEnd > 3*m.PaceWindow() }) // (a pacer at 0 will hold it)
	journalAll(m)
	j.mu.Lock()
	j.out.seq = j.journal.seqSnap + gateSeq // (the journal fell behind)
	j.mu.Unlock()
	waitFor(t, func() bool { return j.Info().OutputHeld })
	blockedWriting(t, info.Pid)
	if err := j.Pace("late", 0, nil); err != nil {
		t.Fatal(err)
	}
	journalAll(m) // (the journal catches up: the pacer holds it now)
	if i := j.Info(); i.OutputHeld || !i.OutputPaced {
		t.Fatalf("after the journal write: held %v, paced %v", i.OutputHeld, i.OutputPaced)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return n == 1 })
	waitFor(t, func() bool { return !j.Info().OutputPaced })
}

// TestPaceStallAcrossServiceRuns: a service's pacer is held to the limit
// afresh in each run: the clock of a run that ended while the pacer held
// it (the gate opens at the leader's exit) does not carry over, where it
// let the pacer go as soon as the next run held the job.
func TestPaceStallAcrossServiceRuns(t *testing.T) {
	var mu sync.Mutex
	n := 0
	stalls := func() int { mu.Lock(); defer mu.Unlock(); return n }
	const limit = 500 * time.Millisecond
	m := New(Config{PaceStallLimit: limit}, discard(), nil, WithHooks(Hooks{PaceStalled: func() { mu.Lock(); n++; mu.Unlock() }}))
	defer m.Close(context.Background())
	mark := filepath.Join(t.TempDir(), "ran")
	// Run 1 ends 0.2 s into being held (its leader exits, its printer is
	// cleared with its group); run 2 holds on.
	spec := protocol.SpawnArgs{Shell: "if [ -e " + mark + " ]; then head -c 3000000 /dev/zero; else touch " + mark + "; (head -c 3000000 /dev/zero &); sleep 0.2; fi; exit 1",
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways, RestartDelayMs: 1500}}
	j, _, err := m.SpawnJobWith(spec, SpawnOptions{Pacer: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = j.Kill(protocol.ReasonManualCancel, SigKill); <-j.Done() }()
	waitFor(t, func() bool { i := j.Info(); return i.Attempt == 1 && i.OutputPaced })
	waitFor(t, func() bool { i := j.Info(); return i.Attempt == 2 && i.OutputPaced })
	held := time.Now()
	if got := stalls(); got != 0 {
		t.Fatalf("let go %d times before run 2 held the job for the limit", got)
	}
	waitFor(t, func() bool { return stalls() == 1 })
	if d := time.Since(held); d < limit*3/4 {
		t.Fatalf("run 2's pacer was let go %v after it held the job, before the %v limit", d, limit)
	}
}
