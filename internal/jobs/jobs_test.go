package jobs

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func TestTransitions(t *testing.T) {
	all := []State{Starting, Running, Exiting, Exited, Restarting}
	allowed := map[[2]State]bool{
		{Starting, Running}: true, {Starting, Exited}: true,
		{Running, Exiting}: true, {Running, Exited}: true, {Exiting, Exited}: true,
		// Services: a run's end, the restart delay, a manual start.
		{Starting, Restarting}: true, {Running, Restarting}: true, {Exiting, Restarting}: true,
		{Restarting, Starting}: true, {Restarting, Exited}: true, {Exited, Starting}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := lifecycle.CanMove(from, to); got != allowed[[2]State{from, to}] {
				t.Errorf("%s -> %s: got %v", from, to, got)
			}
		}
	}
	if _, _, err := lifecycle.Step(lifecycle.Life{State: Exited}, lifecycle.Started{}); err == nil {
		t.Fatal("exited -> running must be refused")
	}
}

func TestRingEvictsOldestAndReads(t *testing.T) {
	r := newRing(10 + 3*chunkOverhead) // 10 bytes of output in three chunks
	var off int64
	for i, s := range []string{"aaaa", "bbbb", "cccc", "dd"} {
		r.add(chunk{Chunk: protocol.Chunk{Seq: uint64(i + 2), Offset: off, Data: []byte(s)}})
		off += int64(len(s))
	}
	// 14 bytes added into 10: "aaaa" evicted.
	if r.from() != 4 || r.bytes != 10 || r.firstSeq() != 3 || r.end != 14 {
		t.Fatalf("from %d bytes %d first %d end %d", r.from(), r.bytes, r.firstSeq(), r.end)
	}
	out, next, more := r.read(6, 100)
	var b bytes.Buffer
	for _, c := range out {
		b.WriteString(string(c.Data))
	}
	if b.String() != "bbccccdd" || next != 14 || more {
		t.Fatalf("read from 6: %q next %d more %v", b.String(), next, more)
	}
	out, next, more = r.read(0, 5)
	if len(out) != 2 || string(out[0].Data) != "bbbb" || string(out[1].Data) != "c" || next != 9 || !more {
		t.Fatalf("capped read: %+v next %d more %v", out, next, more)
	}
}

func TestRingMemoryFollowsUsage(t *testing.T) {
	r := newRing(2 << 20)
	r.add(chunk{Chunk: protocol.Chunk{Seq: 2, Data: []byte("0123456789")}})
	if cap(r.chunks) > 4 || r.bytes != 10 {
		t.Fatalf("a 10-byte job holds %d chunk slots, %d bytes", cap(r.chunks), r.bytes)
	}
	// Many evictions keep the backing array bounded.
	data := make([]byte, 64<<10) // shared: the test is about slots, not bytes
	for i := 0; i < 100000; i++ {
		r.add(chunk{Chunk: protocol.Chunk{Seq: uint64(i + 3), Offset: r.end, Data: data}})
	}
	if n := len(r.chunks); n > 100 {
		t.Fatalf("backing array has %d slots for %d live chunks", n, len(r.live()))
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestExitRacingKill: kills racing a natural exit finalize exactly once.
func TestExitRacingKill(t *testing.T) {
	var sink countingSink
	m := New(Config{MergeInterval: time.Millisecond}, nil, &sink)
	defer m.Close(context.Background())
	for i := 0; i < 30; i++ {
		info, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		j, _ := m.Get(info.JobID)
		for k := 0; k < 3; k++ {
			go j.Kill(protocol.ReasonManualCancel, 0)
		}
		<-j.Done()
		res, _ := j.Events(1, 0)
		last := res.Events[len(res.Events)-1]
		if !last.Kind.Terminal() {
			t.Fatalf("last event %s", last.Kind)
		}
		terminals := 0
		for _, ev := range res.Events {
			if ev.Kind.Terminal() {
				terminals++
			}
		}
		if terminals != 1 {
			t.Fatalf("%d terminal events", terminals)
		}
		if r := j.Info().Reason; r != protocol.ReasonExit && r != protocol.ReasonManualCancel {
			t.Fatalf("reason %s", r)
		}
	}
}

type countingSink struct{}

func (countingSink) Publish(protocol.Event) {}

// TestSnapshotsKeepsNewestFinished: the journal snapshot holds every
// running job and the maxFinished most recently finished ones (all with
// a negative bound), and leaves out the ones the caller has cached.
func TestSnapshotsKeepsNewestFinished(t *testing.T) {
	m := New(Config{MaxJobs: 100}, nil, nil)
	defer m.Close(context.Background())
	ids := finishedTrueJobs(t, m, 5)
	running, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		j, _ := m.Get(running.JobID)
		_, _ = j.Kill(protocol.ReasonManualCancel, SigKill)
		<-j.Done()
	}()
	got := func(max int, cached func(string, uint64) bool) map[string]bool {
		out := map[string]bool{}
		for _, s := range m.Snapshots(max, cached) {
			out[s.Info.JobID] = true
		}
		return out
	}
	if s := got(2, nil); len(s) != 3 || !s[running.JobID] || !s[ids[3]] || !s[ids[4]] {
		t.Fatalf("max 2: %v", s)
	}
	if s := got(-1, nil); len(s) != 6 {
		t.Fatalf("all: %v", s)
	}
	if s := got(-1, func(id string, _ uint64) bool { return id == ids[0] }); len(s) != 5 || s[ids[0]] {
		t.Fatalf("cached left out: %v", s)
	}
}

// ringMissing sizes the missing ranges rs (in place) of a reply without
// events from what the ring r knows (sizeMissing), returning the
// missing bytes and whether every range was sized exactly.
func ringMissing(r *ring, rs []protocol.SeqRange) (int64, bool) {
	last := uint64(0) // (the newest seq the ring saw)
	for _, c := range r.live() {
		last = max(last, c.Seq)
	}
	for _, g := range r.gone {
		last = max(last, g.seq)
	}
	res := protocol.SubscribeResult{Job: protocol.JobInfo{LastSeq: last}, Missing: rs}
	sizeMissing(&res, r.outputMap())
	exact := true
	for _, m := range rs {
		exact = exact && (m.Bytes > 0 || m.NoOutput)
	}
	return res.MissingBytes, exact
}

// TestRingMissingBytesExact: the size of a missing seq range is exact,
// also for a range starting mid-way through the evicted output, and an
// upper bound (all evicted bytes) once the range is older than the
// eviction index keeps.
func TestRingMissingBytesExact(t *testing.T) {
	r := newRing(30)
	for seq := uint64(2); seq <= 11; seq++ {
		off := int64(seq-2) * 10
		r.add(chunk{Chunk: protocol.Chunk{Seq: seq, Offset: off, Data: bytes.Repeat([]byte{'x'}, 10)}})
	}
	for _, c := range []struct {
		rs   []protocol.SeqRange
		want int64
	}{
		{[]protocol.SeqRange{{From: 2, To: 8}}, 70},
		{[]protocol.SeqRange{{From: 5, To: 8}}, 40},
		{[]protocol.SeqRange{{From: 1, To: 3}, {From: 6, To: 6}}, 30},
	} {
		if n, exact := ringMissing(r, c.rs); n != c.want || !exact {
			t.Errorf("%v: %d (exact %v); want %d", c.rs, n, exact, c.want)
		}
	}
	big := newRing(10)
	for seq := uint64(2); seq < 2+goneMax*2; seq++ {
		big.add(chunk{Chunk: protocol.Chunk{Seq: seq, Offset: int64(seq-2) * 10, Data: bytes.Repeat([]byte{'y'}, 10)}})
	}
	if n, exact := ringMissing(big, []protocol.SeqRange{{From: 2, To: 5}}); exact || n != big.evicted {
		t.Fatalf("range older than the index: %d exact %v; want the upper bound %d", n, exact, big.evicted)
	}
	last := uint64(2 + goneMax*2 - 2)
	if n, exact := ringMissing(big, []protocol.SeqRange{{From: last - 10, To: last - 1}}); !exact || n != 100 {
		t.Fatalf("recent range: %d exact %v; want 100", n, exact)
	}
}

// TestRemoveReleasesJobAtOnce: a removed finished job is not held by the
// journal's finish-order list until the next sweep (its output with it),
// and snapshots leave it out.
func TestRemoveReleasesJobAtOnce(t *testing.T) {
	m := New(Config{MaxJobs: 10}, nil, nil)
	defer m.Close(context.Background())
	ids := finishedTrueJobs(t, m, 3)
	if err := m.Remove(ids[1]); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	for _, f := range m.recent {
		if f.j != nil && f.j.id == ids[1] {
			t.Error("the removed job is still referenced by recent")
		}
	}
	n := len(m.recent)
	m.mu.Unlock()
	if n != 3 {
		t.Fatalf("recent has %d entries before the sweep, want 3 (one emptied)", n)
	}
	for _, s := range m.Snapshots(-1, nil) {
		if s.Info.JobID == ids[1] {
			t.Fatal("a removed job is in the snapshot")
		}
	}
	m.Sweep()
	m.mu.Lock()
	n = len(m.recent)
	m.mu.Unlock()
	if n != 2 {
		t.Fatalf("recent has %d entries after the sweep, want 2", n)
	}
}

// finishedTrueJobs runs n jobs of `true` one after the other on m and
// returns their ids once all have finished.
func finishedTrueJobs(t *testing.T, m *Manager, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		info, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		j, _ := m.Get(info.JobID)
		<-j.Done()
		ids = append(ids, info.JobID)
	}
	return ids
}

// TestRingBoundsChunkRecords: a job printing a byte per event cannot hold
// far more memory than its ring's size in chunk records and event
// payloads (a leak audit measured 68 MB for 600,000 one-byte events in a
// 1 MiB ring, which then counted only their data).
func TestRingBoundsChunkRecords(t *testing.T) {
	const max = 1 << 20
	r := newRing(max)
	for i := range 600_000 {
		ev := protocol.NewOutputEvent("j-1", uint64(i+2), 0, protocol.KindStdout, int64(i), []byte{'x'})
		r.add(chunk{Chunk: protocol.Chunk{Seq: ev.Seq, Stream: protocol.Stdout, Offset: int64(i), Data: ev.Payload[len(ev.Payload)-1:]}, payload: ev.Payload})
	}
	live := r.live()
	if r.cost > max || len(live) > max/chunkOverhead {
		t.Fatalf("%d chunks retained, costing %d (ring of %d)", len(live), r.cost, max)
	}
	if r.bytes != len(live) || r.end != 600_000 || r.from() != 600_000-int64(len(live)) {
		t.Fatalf("accounting: %d bytes, %d chunks, end %d from %d", r.bytes, len(live), r.end, r.from())
	}
}

// TestExtraEventsBounded: a job's non-output events other than its first
// start and its end (a service's later starts, restarts, readiness) are
// bounded; the dropped ones are reported missing by subscribe.
func TestExtraEventsBounded(t *testing.T) {
	j := sleepingJob(t)
	j.mu.Lock()
	for range 5000 { // as a service's readiness after each of 5000 runs
		j.keepExtraLocked(j.emitLocked(protocol.KindReady, protocol.ReadyPayload{}))
	}
	last := j.out.seq
	j.mu.Unlock()
	if n := len(j.evs.extra); n > maxExtraEvs {
		t.Fatalf("%d extra events retained", n)
	}
	res, err := j.Events(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Events[0].Kind != protocol.KindStarted || res.Events[len(res.Events)-1].Seq != last {
		t.Fatalf("events %d..%d", res.Events[0].Seq, res.Events[len(res.Events)-1].Seq)
	}
	if len(res.Missing) != 1 || res.Missing[0].From != 2 || res.Missing[0].To != res.Events[1].Seq-1 || res.MissingBytes != 0 {
		t.Fatalf("missing %+v (%d bytes); second event %d", res.Missing, res.MissingBytes, res.Events[1].Seq)
	}
}

// TestSnapshotTailChunksBounded: a job printing a byte per event journals
// a tail of at most maxTailChunks chunks (each a journal record entry).
func TestSnapshotTailChunksBounded(t *testing.T) {
	j := sleepingJob(t)
	j.mu.Lock()
	for range 3000 {
		j.nextSeqLocked()
		j.out.ring.add(chunk{Chunk: protocol.Chunk{Seq: j.out.seq, Stream: protocol.Stdout, Offset: j.out.offset, Data: []byte{'x'}}})
		j.out.offset++
	}
	j.mu.Unlock()
	r := j.Snapshot().Record
	if len(r.OutputTailChunks) > maxTailChunks || len(r.OutputTailChunks) == 0 || len(r.OutputTail) != len(r.OutputTailChunks) {
		t.Fatalf("tail of %d bytes in %d chunks", len(r.OutputTail), len(r.OutputTailChunks))
	}
}

// sleepingJob is a running job of its own manager, killed and closed when
// the test ends.
func sleepingJob(t *testing.T) *Job {
	t.Helper()
	m := New(Config{MergeInterval: time.Millisecond}, nil, nil)
	info, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"sleep", "30"}})
	if err != nil {
		m.Close(context.Background())
		t.Fatal(err)
	}
	j, _ := m.Get(info.JobID)
	t.Cleanup(func() {
		_, _ = j.Kill(protocol.ReasonManualCancel, 0)
		<-j.Done()
		m.Close(context.Background())
	})
	return j
}

// TestSeqReserveCountsFromWrittenJournal: a running job's seq reserve
// counts from its last seq in a journal that was written, not from the
// last snapshot taken: a snapshot whose write failed (disk full) reset it,
// and a long-failing journal let the job run past the reserve unasked.
func TestSeqReserveCountsFromWrittenJournal(t *testing.T) {
	j := sleepingJob(t)
	sn := j.Snapshot()
	j.mu.Lock()
	snap := j.journal.seqSnap
	j.mu.Unlock()
	if snap != 0 {
		t.Fatalf("a snapshot alone moved the reserve to %d", snap)
	}
	j.m.Journaled([]Snapshot{sn})
	j.mu.Lock()
	snap = j.journal.seqSnap
	j.mu.Unlock()
	if snap != sn.Info.LastSeq || snap == 0 {
		t.Fatalf("after the write: reserve from %d, want %d", snap, sn.Info.LastSeq)
	}
}

// TestJobsStartWithDefaultSignals: signals this process ignores (nohup's
// SIGHUP; a gateway's signal.Ignore(SIGTERM) in origin mode) are not
// passed on to jobs: the kill path's SIGTERM ends them at once (it did
// nothing, and the job was SIGKILLed after the grace period).
func TestJobsStartWithDefaultSignals(t *testing.T) {
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	defer signal.Reset(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	m := New(Config{MergeInterval: time.Millisecond, Grace: 5 * time.Second}, nil, nil)
	defer m.Close(context.Background())
	info, out := runJob(t, m, protocol.SpawnArgs{Shell: "grep SigIgn /proc/self/status"})
	var mask uint64
	if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(out, "SigIgn:")), "%x", &mask); err != nil || info.Reason != protocol.ReasonExit {
		t.Fatalf("%q %v (%s)", out, err, info.Reason)
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGPIPE} {
		if mask&(1<<(uint(sig)-1)) != 0 {
			t.Fatalf("the job ignores %v (SigIgn %x)", sig, mask)
		}
	}
	started, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	j, _ := m.Get(started.JobID)
	begin := time.Now()
	_, _ = j.Kill(protocol.ReasonManualCancel, 0)
	<-j.Done()
	if st := j.Info(); st.Signal != "SIGTERM" || time.Since(begin) > 3*time.Second {
		t.Fatalf("killed by %s after %v", st.Signal, time.Since(begin))
	}
}

// TestRestoredJobKeepsGrace: a restored one-shot job has the configured
// kill grace (the reaper gives its orphans that long after SIGTERM),
// not none.
func TestRestoredJobKeepsGrace(t *testing.T) {
	m := New(Config{Grace: 3 * time.Second}, nil, nil)
	defer m.Close(context.Background())
	if err := m.Restore(journal.Record{JobID: "j-old", State: protocol.StateExited, Reason: protocol.ReasonExit, Pid: 4194000, LastSeq: 2}, false); err != nil {
		t.Fatal(err)
	}
	j, _ := m.Get("j-old")
	if j.grace != 3*time.Second {
		t.Fatalf("restored job's grace %v, want 3s", j.grace)
	}
}

// TestRestoreRefusesImplausibleRecords: journal records are input. A
// negative or wrapping output end, or a tail longer than the output, is
// refused (restored jobs then failed every poll); a record whose last seq
// is not past its start gets its end after the start (both were seq 1);
// a tail chunk's attempt beyond the service's run count is dropped; a
// history longer than kept is cut.
func TestRestoreRefusesImplausibleRecords(t *testing.T) {
	m := New(Config{}, nil, nil)
	defer m.Close(context.Background())
	base := func(id string) journal.Record {
		return journal.Record{JobID: id, State: protocol.StateExited, Reason: protocol.ReasonExit, Pid: 4194000, LastSeq: 3, OutputEnd: 10}
	}
	for _, bad := range []func(*journal.Record){
		func(r *journal.Record) { r.OutputEnd = -100 },
		func(r *journal.Record) { r.OutputEnd = 1<<63 - 1 },
		func(r *journal.Record) { r.OutputTail, r.OutputTailSeq = make([]byte, 20), 2 },
		func(r *journal.Record) { r.Service = &journal.Service{Attempt: -1} },
	} {
		r := base("j-bad")
		bad(&r)
		if err := m.Restore(r, false); err == nil {
			t.Fatalf("restored %+v", r)
		}
	}
	s := base("j-low")
	s.LastSeq = 0
	if err := m.Restore(s, false); err != nil {
		t.Fatal(err)
	}
	j, _ := m.Get("j-low")
	res, _ := j.Events(1, 0)
	if len(res.Events) != 2 || res.Events[0].Seq != 1 || res.Events[1].Seq != 2 {
		t.Fatalf("events %+v", res.Events)
	}
	s = base("j-svc")
	s.OutputTail, s.OutputTailSeq, s.OutputTailChunks = []byte("ab"), 3, []journal.TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: 1, Attempt: 1 << 40}, {Seq: 3, Stream: protocol.Stdout, Len: 1, Attempt: 2}}
	s.Service = &journal.Service{Attempt: 2, History: make([]protocol.RunRecord, 3000)}
	if err := m.Restore(s, false); err != nil {
		t.Fatal(err)
	}
	j, _ = m.Get("j-svc")
	res, _ = j.Events(2, 0)
	if res.Events[0].Attempt != 0 || res.Events[1].Attempt != 2 || len(j.svc.history) > protocol.HistoryRuns {
		t.Fatalf("attempts %d %d, history %d", res.Events[0].Attempt, res.Events[1].Attempt, len(j.svc.history))
	}
	if len(s.Service.History) != 3000 {
		t.Fatalf("the record's history was cut too (%d runs): Restore must not modify its record", len(s.Service.History))
	}
}

// TestRestoreUnpublished: an interrupted job's unpublished output follows
// its tail, at its offsets, under seqs past the reserve and before the
// terminal event, whose outputEnd counts it; unpublished output that is
// not plausible (unknown stream, empty, too much) is left out, and a
// finished job's is ignored.
func TestRestoreUnpublished(t *testing.T) {
	m := New(Config{}, nil, nil)
	defer m.Close(context.Background())
	rec := func(id string, un ...journal.Unpublished) journal.Record {
		return journal.Record{
			JobID: id, State: protocol.StateExited, Reason: protocol.ReasonSupervisorRestart, Pid: 4194000, LastSeq: 2, OutputEnd: 3, StdoutBytes: 6, StderrBytes: 2,
			OutputTail: []byte("ab\n"), OutputTailSeq: 2, OutputTailChunks: []journal.TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: 3}},
			OutputUnpublished: un,
		}
	}
	good := []journal.Unpublished{{Stream: protocol.Stdout, Data: []byte("cd\n")}, {Stream: protocol.Stderr, Data: []byte("e\n")}}
	for _, c := range []struct {
		name        string
		r           journal.Record
		interrupted bool
		out         string
	}{
		{"interrupted", rec("j-un", good...), true, "ab\ncd\ne\n"},
		{"finished", rec("j-fin", good...), false, "ab\n"},
		{"unknown stream", rec("j-bad1", journal.Unpublished{Stream: "stdin", Data: []byte("x")}), true, "ab\n"},
		{"empty", rec("j-bad2", journal.Unpublished{Stream: protocol.Stdout}), true, "ab\n"},
		{"too much", rec("j-bad3", journal.Unpublished{Stream: protocol.Stdout, Data: make([]byte, maxUnpublished+1)}), true, "ab\n"},
	} {
		if err := m.Restore(c.r, c.interrupted); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		j, _ := m.Get(c.r.JobID)
		r, err := j.Poll(0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for _, ch := range r.Chunks {
			got = append(got, ch.Data...)
		}
		// (an interrupted job's output ends past the offsets the dead
		// supervisor may have published: see TestInterruptedJobEndsPastReserve)
		end := int64(len(c.out))
		if c.interrupted {
			end = 3 + offsetReserve
		}
		if string(got) != c.out || r.Job.OutputEnd != end || r.Truncated {
			t.Fatalf("%s: output %q (end %d, truncated %v), want %q (end %d)", c.name, got, r.Job.OutputEnd, r.Truncated, c.out, end)
		}
		res, _ := j.Events(1, 0)
		last := res.Events[len(res.Events)-1]
		var exit protocol.ExitPayload
		if err := last.DecodePayload(&exit); err != nil || !last.Kind.Terminal() || exit.OutputEnd != end {
			t.Fatalf("%s: terminal event %+v (%v)", c.name, exit, err)
		}
		if c.name == "interrupted" {
			seqs := []uint64{}
			for _, ev := range res.Events {
				seqs = append(seqs, ev.Seq)
			}
			if n := len(seqs); n < 3 || seqs[n-3] != 2+seqReserve+1 || seqs[n-2] != 2+seqReserve+2 || seqs[n-1] != 2+seqReserve+3 {
				t.Fatalf("seqs %v: want the unpublished output at %d and %d, the end at %d", seqs, 2+seqReserve+1, 2+seqReserve+2, 2+seqReserve+3)
			}
		}
	}
}

// TestInterruptedJobEndsPastReserve: a one-shot job its supervisor's
// crash interrupted ends offsetReserve past its recorded output end, as
// a resumed service's next run starts there: a poll cursor a client got
// from the dead supervisor (past the record: it published more before it
// died) is still within the output, and answered with nothing lost
// rather than refused; the skipped offsets survive another restart.
func TestInterruptedJobEndsPastReserve(t *testing.T) {
	m := New(Config{}, nil, nil)
	defer m.Close(context.Background())
	r := journal.Record{
		JobID: "j-cut", State: protocol.StateExited, Reason: protocol.ReasonSupervisorRestart, Pid: 4194000, LastSeq: 2, OutputEnd: 3, StdoutBytes: 3,
		OutputTail: []byte("ab\n"), OutputTailSeq: 2, OutputTailChunks: []journal.TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: 3}},
	}
	if err := m.Restore(r, true); err != nil {
		t.Fatal(err)
	}
	j, _ := m.Get("j-cut")
	check := func(j *Job, when string) {
		t.Helper()
		if end := j.Info().OutputEnd; end != 3+offsetReserve {
			t.Fatalf("%s: output end %d, want %d", when, end, 3+offsetReserve)
		}
		// (the dead supervisor had published 49 bytes: what it read
		// past the record is lost, in an amount nobody knows)
		r, err := j.Poll(49, 0)
		if err != nil || len(r.Chunks) != 0 || !r.Truncated || !r.CrashGap || r.LostBytes != 0 || r.More || r.Next != 3+offsetReserve {
			t.Fatalf("%s: poll from a cursor past the record: %+v, %v", when, r, err)
		}
		// From 0: the output up to the record's end, then more (the gap,
		// reported by the poll from there).
		r, err = j.Poll(0, 0)
		if err != nil || len(r.Chunks) != 1 || string(r.Chunks[0].Data) != "ab\n" || r.Truncated || r.LostBytes != 0 || !r.More || r.Next != 3 {
			t.Fatalf("%s: poll from 0: %+v, %v", when, r, err)
		}
		r, err = j.Poll(3, 0)
		if err != nil || len(r.Chunks) != 0 || !r.CrashGap || r.More || r.Next != 3+offsetReserve {
			t.Fatalf("%s: poll from the record's end: %+v, %v", when, r, err)
		}
	}
	check(j, "restored")
	// Journaled again (as finished) and restored by the next supervisor.
	m2 := New(Config{}, nil, nil)
	defer m2.Close(context.Background())
	if err := m2.Restore(j.Snapshot().Record, false); err != nil {
		t.Fatal(err)
	}
	j2, _ := m2.Get("j-cut")
	check(j2, "restored twice")
}

// TestRestoredServiceEndCarriesAttempt: a service's terminal event rebuilt
// from the journal carries its run's attempt, as the one published live
// did (it had none after a restart: the same seq, different contents).
func TestRestoredServiceEndCarriesAttempt(t *testing.T) {
	m := New(Config{}, nil, nil)
	defer m.Close(context.Background())
	spec := protocol.SpawnArgs{Argv: []string{"true"}, Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}}
	for _, interrupted := range []bool{false, true} {
		id := fmt.Sprintf("j-svc-%v", interrupted)
		r := journal.Record{JobID: id, State: protocol.StateExited, Reason: protocol.ReasonShutdown, Pid: 4194000, LastSeq: 4,
			Service: &journal.Service{Spec: spec, Attempt: 2}}
		if err := m.Restore(r, interrupted); err != nil {
			t.Fatal(err)
		}
		j, _ := m.Get(id)
		res, _ := j.Events(1, 0)
		last := res.Events[len(res.Events)-1]
		if !last.Kind.Terminal() || last.Attempt != 2 {
			t.Fatalf("interrupted %v: terminal event %s seq %d attempt %d, want attempt 2", interrupted, last.Kind, last.Seq, last.Attempt)
		}
	}
}

// TestSnapshotOneStreamUnpublished: with output pending on both streams, a
// snapshot publishes the older stream's and records only the other's as
// unpublished. Two would be laid out back to back after a crash, where the
// live supervisor may have put output read meanwhile on the older stream
// between them: the republished bytes then sat at other offsets than the
// ones a follower already had.
func TestSnapshotOneStreamUnpublished(t *testing.T) {
	m := New(Config{MergeInterval: time.Minute}, nil, nil)
	defer m.Close(context.Background())
	// x and y go out at once (the first of each stream); A and B, read
	// within the windows they opened, wait.
	j, _, err := m.SpawnJob(protocol.SpawnArgs{Shell: "printf x; printf y >&2; read l; printf A; sleep 0.2; printf B >&2; exec sleep 300", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Kill(protocol.ReasonManualCancel, syscall.SIGKILL)
	waitRead(t, j, 1, 1)
	if _, err := j.Write([]byte("\n"), false); err != nil {
		t.Fatal(err)
	}
	waitRead(t, j, 2, 2)
	r := j.Snapshot().Record
	if len(r.OutputUnpublished) != 1 || r.OutputUnpublished[0].Stream != protocol.Stderr || string(r.OutputUnpublished[0].Data) != "B" {
		t.Fatalf("unpublished %+v: want only stderr's B", r.OutputUnpublished)
	}
	if r.OutputEnd != 3 || !strings.HasSuffix(string(r.OutputTail), "A") {
		t.Fatalf("output end %d, tail %q: want stdout's A published", r.OutputEnd, r.OutputTail)
	}
}

// TestSupervisorOnlyEnvNotInherited: the supervisor's systemd variables
// (notify socket, watchdog, socket activation) do not reach its jobs: a
// job would talk to the supervisor's own unit.
func TestSupervisorOnlyEnvNotInherited(t *testing.T) {
	for _, k := range supervisorOnlyEnv {
		t.Setenv(k, "from-the-supervisor")
	}
	t.Setenv("ES_TEST_KEPT", "kept")
	m := New(Config{}, nil, nil)
	defer m.Close(context.Background())
	_, out := runJob(t, m, protocol.SpawnArgs{Argv: []string{"/usr/bin/env"}})
	if strings.Contains(out, "from-the-supervisor") || !strings.Contains(out, "ES_TEST_KEPT=kept") {
		t.Fatalf("job environment:\n%s", out)
	}
}

// TestListAfterRemovedCursor: jobs created in the same millisecond are
// listed in creation order, and a page after a cursor whose job was
// removed meanwhile has exactly the jobs that followed it (by job id it
// lost some and repeated others).
func TestListAfterRemovedCursor(t *testing.T) {
	m := New(Config{}, nil, nil)
	defer m.Close(context.Background())
	at := time.Unix(1700000000, 0)
	m.now = func() time.Time { return at }
	var ids []string
	for i := 0; i < 8; i++ {
		info, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.JobID)
	}
	all, ns := m.ListAfter(ListFilter{}, 0, 0, "")
	for i, info := range all {
		if info.JobID != ids[i] {
			t.Fatalf("order %d: %s, want %s", i, info.JobID, ids[i])
		}
	}
	cursor := protocol.ListCursor(all[2].CreatedAt, ns[2], all[2].JobID)
	for _, j := range ids {
		jj, _ := m.Get(j)
		<-jj.Done()
	}
	if err := m.Remove(ids[2]); err != nil {
		t.Fatal(err)
	}
	c, n, id, err := protocol.ParseListCursor(cursor)
	if err != nil {
		t.Fatal(err)
	}
	rest, _ := m.ListAfter(ListFilter{}, c, n, id)
	var got []string
	for _, info := range rest {
		got = append(got, info.JobID)
	}
	if !slices.Equal(got, ids[3:]) {
		t.Fatalf("after the removed cursor: %v, want %v", got, ids[3:])
	}
}

// TestResumedServiceSkipsOffsets: a service interrupted by its
// supervisor's death writes its next run's output past every offset the
// dead supervisor may have published (offsetReserve past the record's
// output end): no offset a client read holds other bytes later. A poll
// cursor inside the skipped offsets reads the new output, and nothing is
// reported lost for them, before or after further restarts (the journal
// keeps the skipped ranges, and a tail below them); a second crash skips
// again from the new end.
func TestResumedServiceSkipsOffsets(t *testing.T) {
	m := New(Config{}, discard(), nil)
	defer m.Close(context.Background())
	spec := protocol.SpawnArgs{Shell: "echo next", Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure}}
	rec := journal.Record{
		JobID: "j-skip", State: protocol.StateExited, Reason: protocol.ReasonSupervisorRestart,
		Pid: 4194000, LastSeq: 2, OutputEnd: 3, StdoutBytes: 3,
		OutputTail: []byte("ab\n"), OutputTailSeq: 2, OutputTailChunks: []journal.TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: 3, Attempt: 1}},
		Service: &journal.Service{Spec: spec, Attempt: 1},
	}
	if err := m.Restore(rec, true); err != nil {
		t.Fatal(err)
	}
	j, _ := m.Get("j-skip")
	first := int64(3 + offsetReserve)

	// Journaled before the next run printed anything: the tail is kept,
	// below the skipped offsets, and so are they.
	s1 := j.Snapshot().Record
	if string(s1.OutputTail) != "ab\n" || s1.OutputTailEnd != 3 || s1.OutputEnd != first ||
		!slices.Equal(s1.Service.OutputSkips, []journal.OffsetRange{{At: 3, N: offsetReserve}}) {
		t.Fatalf("snapshot before the run: tail %q ends %d, output end %d, skips %v", s1.OutputTail, s1.OutputTailEnd, s1.OutputEnd, s1.Service.OutputSkips)
	}
	m1 := New(Config{}, discard(), nil)
	defer m1.Close(context.Background())
	if err := m1.Restore(s1, false); err != nil {
		t.Fatal(err)
	}
	j1, _ := m1.Get("j-skip")
	if res, err := j1.Poll(0, 0); err != nil || len(res.Chunks) != 1 || string(res.Chunks[0].Data) != "ab\n" || res.Truncated || !res.More {
		t.Fatalf("restored before the run: %+v truncated %v lost %d more %v (%v)", res.Chunks, res.Truncated, res.LostBytes, res.More, err)
	}

	if _, err := m.Start("j-skip"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { i := j.Info(); return i.State == protocol.StateExited && i.Attempt == 2 })
	res, err := j.Poll(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// From 0: the first run's output, up to the skipped offsets; the poll
	// from there reports them (what the dead supervisor read past the
	// record is lost) with the next run's output.
	if len(res.Chunks) != 1 || string(res.Chunks[0].Data) != "ab\n" || res.Chunks[0].Offset != 0 || res.Truncated || !res.More || res.Next != 3 {
		t.Fatalf("poll from 0: %+v (truncated %v, more %v, next %d)", res.Chunks, res.Truncated, res.More, res.Next)
	}
	res, err = j.Poll(res.Next, 0)
	if err != nil || len(res.Chunks) != 1 || string(res.Chunks[0].Data) != "next\n" || res.Chunks[0].Offset != first || !res.Truncated || !res.CrashGap || res.LostBytes != 0 {
		t.Fatalf("poll from the record's end: %+v truncated %v crashGap %v lost %d (%v)", res.Chunks, res.Truncated, res.CrashGap, res.LostBytes, err)
	}
	if res.Job.OutputEnd != first+5 || res.Next != first+5 || res.More {
		t.Fatalf("output end %d, next %d, more %v; want %d", res.Job.OutputEnd, res.Next, res.More, first+5)
	}
	// A cursor the dead supervisor may have handed out (past the record).
	res, err = j.Poll(1000, 0)
	if err != nil || len(res.Chunks) != 1 || string(res.Chunks[0].Data) != "next\n" || !res.Truncated || !res.CrashGap || res.LostBytes != 0 {
		t.Fatalf("poll from inside the skipped offsets: %+v truncated %v lost %d (%v)", res.Chunks, res.Truncated, res.LostBytes, err)
	}

	s2 := j.Snapshot().Record
	if string(s2.OutputTail) != "next\n" || s2.TailEnd() != first+5 || s2.OutputEnd != first+5 {
		t.Fatalf("snapshot: tail %q ends %d, output end %d", s2.OutputTail, s2.TailEnd(), s2.OutputEnd)
	}
	// Restored after a graceful restart: the 3 bytes before the tail are
	// lost (counted), and the crash gap still reported.
	m2 := New(Config{}, discard(), nil)
	defer m2.Close(context.Background())
	if err := m2.Restore(s2, false); err != nil {
		t.Fatal(err)
	}
	j2, _ := m2.Get("j-skip")
	if res, err := j2.Poll(0, 0); err != nil || res.LostBytes != 3 || !res.Truncated || !res.CrashGap || len(res.Chunks) != 1 {
		t.Fatalf("after a restart: %+v truncated %v crashGap %v lost %d (want 3) (%v)", res.Chunks, res.Truncated, res.CrashGap, res.LostBytes, err)
	}
	if res, err := j2.Poll(1000, 0); err != nil || !res.CrashGap || res.LostBytes != 0 {
		t.Fatalf("after a restart, from inside the skipped offsets: crashGap %v lost %d (%v)", res.CrashGap, res.LostBytes, err)
	}
	// A second crash: restored from that snapshot, it skips again.
	s2.JobID, s2.Reason = "j-skip2", protocol.ReasonSupervisorRestart
	if err := m2.Restore(s2, true); err != nil {
		t.Fatal(err)
	}
	j3, _ := m2.Get("j-skip2")
	if j3.out.offset != first+5+offsetReserve || len(j3.out.ring.skips) != 2 || j3.out.ring.evicted != 3 {
		t.Fatalf("second crash: offset %d (want %d), skips %v, evicted %d (want 3)", j3.out.offset, first+5+offsetReserve, j3.out.ring.skips, j3.out.ring.evicted)
	}

	// A service that printed nothing the journal knows of before the
	// crash: nothing is counted lost, and the gap is reported (the dead
	// supervisor may have read output after its last write).
	empty := journal.Record{JobID: "j-empty", State: protocol.StateExited, Reason: protocol.ReasonSupervisorRestart, Pid: 4194000, LastSeq: 1,
		Service: &journal.Service{Spec: spec, Attempt: 1}}
	if err := m2.Restore(empty, true); err != nil {
		t.Fatal(err)
	}
	je, _ := m2.Get("j-empty")
	if res, err := je.Poll(0, 0); err != nil || !res.CrashGap || res.LostBytes != 0 {
		t.Fatalf("no output before the crash: crashGap %v lost %d (%v)", res.CrashGap, res.LostBytes, err)
	}

	// The journal is input: implausible skips and tail ends are refused.
	type skips = []journal.OffsetRange
	for name, mod := range map[string]func(r *journal.Record, interrupted *bool){
		"skip over the tail":   func(r *journal.Record, _ *bool) { r.Service.OutputSkips = skips{{At: 0, N: 4}} },
		"skips out of order":   func(r *journal.Record, _ *bool) { r.Service.OutputSkips = skips{{At: first + 1, N: 1}, {At: 3, N: 1}} },
		"empty skip":           func(r *journal.Record, _ *bool) { r.Service.OutputSkips = skips{{At: 3, N: 0}} },
		"skip past the end":    func(r *journal.Record, _ *bool) { r.Service.OutputSkips = skips{{At: 3, N: first + 10}} },
		"too many skips":       func(r *journal.Record, _ *bool) { r.Service.OutputSkips = make(skips, skipsMax+1) },
		"tail end past output": func(r *journal.Record, _ *bool) { r.OutputTailEnd = r.OutputEnd + 1 },
		"tail end below tail":  func(r *journal.Record, _ *bool) { r.OutputTailEnd = 2 },
		"output end near 2^62": func(r *journal.Record, in *bool) { r.OutputEnd, r.OutputTailEnd, *in = 1<<62-10, 3, true },
	} {
		bad := j.Snapshot().Record
		bad.OutputTailEnd = 3
		bad.OutputTail, bad.OutputTailChunks = []byte("ab\n"), nil
		bad.Service = &journal.Service{Spec: spec, Attempt: 2, OutputSkips: skips{{At: 3, N: offsetReserve}}}
		bad.JobID = "j-bad-" + name
		interrupted := false
		mod(&bad, &interrupted)
		if err := m2.Restore(bad, interrupted); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
}

// TestOutputAsksForJournalWrite: a job that printed a quarter of the
// offset reserve since its last journaled output end asks for a journal
// write (once, until the write is recorded), as one past a quarter of the
// seq reserve does.
func TestOutputAsksForJournalWrite(t *testing.T) {
	var asked atomic.Int32
	m := New(Config{}, discard(), nil, WithHooks(Hooks{Changed: func() { asked.Add(1) }}))
	defer m.Close(context.Background())
	j := &Job{m: m, id: "j-reserve"}
	j.out.offset = offsetReserve/4 - 1
	j.checkReserveLocked()
	if asked.Load() != 0 {
		t.Fatal("asked before a quarter of the reserve was used")
	}
	j.out.offset++
	j.checkReserveLocked()
	j.checkReserveLocked()
	if asked.Load() != 1 {
		t.Fatalf("asked %d times, want 1", asked.Load())
	}
	m.mu.Lock()
	m.jobs[j.id] = j
	m.mu.Unlock()
	m.Journaled([]Snapshot{{Record: journal.Record{JobID: j.id, OutputEnd: j.out.offset}}})
	m.mu.Lock()
	delete(m.jobs, j.id) // (not a real job: Close would wait for it)
	m.mu.Unlock()
	j.out.offset += offsetReserve / 4
	j.checkReserveLocked()
	if asked.Load() != 2 {
		t.Fatalf("after the write was recorded: asked %d times, want 2", asked.Load())
	}
}

// TestKillWhileStartingJournaled: a kill or stop that arrives while a run
// is starting (its process not started yet; it is killed as soon as it
// is) is in the job's snapshot as its pending end, so that the journal
// write a kill's reply waits for holds it (it held none: a crash then
// resumed a stopped service).
func TestKillWhileStartingJournaled(t *testing.T) {
	var m *Manager
	var j *Job
	var got []Reason
	m = New(Config{}, discard(), nil, WithHooks(Hooks{BeforeServiceRun: func(string) {
		if _, err := m.Stop(j.id); err != nil { // (stopped while starting)
			t.Error(err)
		}
		for _, sn := range m.Snapshots(-1, nil) { // (as the journal does)
			got = append(got, sn.Record.PendingEnd)
		}
	}}))
	defer m.Close(context.Background())
	var err error
	j, _, err = m.SpawnJob(protocol.SpawnArgs{Shell: "exit 1", Restart: &protocol.RestartPolicy{
		Policy: protocol.RestartOnFailure, RestartDelayMs: 1, MaxDelayMs: 1, MaxRestarts: intp(3)}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return j.Info().State == protocol.StateExited })
	if len(got) != 1 || got[0] != protocol.ReasonStopped {
		t.Fatalf("pending ends in the snapshots taken while starting: %q, want [stopped]", got)
	}
	if i := j.Info(); i.Reason != protocol.ReasonStopped || i.Attempt != 2 {
		t.Fatalf("ended %s at attempt %d, want stopped at its second run", i.Reason, i.Attempt)
	}
}

// TestServiceRunJournaledFirst: before a service's second and later runs
// start (a restart by policy, a start by hand), BeforeServiceRun is
// called with the job already starting and no process yet, so that the
// journal written there records it as running: a supervisor that dies
// while the run publishes then takes reserves from that record (not from
// a finished one, whose seqs and offsets would be used again). The first
// run, of a job no journal knows yet, is not held up.
func TestServiceRunJournaledFirst(t *testing.T) {
	type seen struct {
		state   protocol.State
		attempt int
		pid     int
	}
	var mu sync.Mutex
	var calls []seen
	var m *Manager
	m = New(Config{}, discard(), nil, WithHooks(Hooks{BeforeServiceRun: func(string) {
		for _, sn := range m.Snapshots(-1, nil) { // (as the journal does)
			mu.Lock()
			calls = append(calls, seen{sn.Info.State, sn.Info.Attempt, sn.Info.Pid})
			mu.Unlock()
		}
	}}))
	defer m.Close(context.Background())
	j, _, err := m.SpawnJob(protocol.SpawnArgs{Shell: "exit 1", Restart: &protocol.RestartPolicy{
		Policy: protocol.RestartOnFailure, RestartDelayMs: 1, MaxDelayMs: 1, MaxRestarts: intp(3)}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return j.Info().State == protocol.StateExited })
	if _, err := m.Start(j.id); err != nil {
		t.Fatal(err)
	}
	// (three runs again: the start resets the restart count)
	waitFor(t, func() bool { i := j.Info(); return i.State == protocol.StateExited && i.Attempt == 6 })
	mu.Lock()
	defer mu.Unlock()
	var want []seen
	for a := 2; a <= 6; a++ {
		want = append(want, seen{protocol.StateStarting, a, 0})
	}
	if !slices.Equal(calls, want) {
		t.Fatalf("BeforeServiceRun saw %+v, want %+v", calls, want)
	}
}

// TestMissingBytesAcrossSkip: the output of a missing seq range is exact
// (and given per range) unless the range spans skipped offsets, where a
// dead supervisor may have published output nobody knows the size of.
func TestMissingBytesAcrossSkip(t *testing.T) {
	r := newRing(300) // (room for about one chunk: older ones are evicted)
	add := func(seq uint64, n int) {
		r.add(chunk{Chunk: protocol.Chunk{Seq: seq, Stream: protocol.Stdout, Offset: r.end, Data: make([]byte, n)}})
	}
	add(1, 100)
	add(2, 100)
	r.skipTo(r.end + 1000)
	add(100003, 100)
	add(100004, 100)
	before := []protocol.SeqRange{{From: 1, To: 1}}
	if n, exact := ringMissing(r, before); !exact || n != 100 || before[0].Bytes != 100 {
		t.Fatalf("a range before the skip: %d bytes, exact %v, range %+v", n, exact, before[0])
	}
	across := []protocol.SeqRange{{From: 1, To: 100003}}
	if _, exact := ringMissing(r, across); exact || across[0].Bytes != 0 {
		t.Fatalf("a range across the skip was counted exactly: %+v", across[0])
	}
}

// TestPollAcrossSkip: offsets skipped after a supervisor crash (where the
// dead supervisor may have read output it never journaled) are reported
// by the poll that reaches them, as a crash gap: a poll that returns
// output before them stops there (more), the next one moves past them.
// (They were counted as holding nothing: a poller read across them, and
// one whose cursor was inside them got nothing, neither reporting a loss.)
func TestPollAcrossSkip(t *testing.T) {
	r := newRing(1 << 20)
	add := func(seq uint64, s string) {
		r.add(chunk{Chunk: protocol.Chunk{Seq: seq, Stream: protocol.Stdout, Offset: r.end, Data: []byte(s)}})
	}
	add(1, "run1a")
	add(2, "run1b")
	r.skipTo(r.end + 1000) // [10, 1010)
	add(100003, "run2")
	text := func(res protocol.PollResult) string {
		var b []byte
		for _, c := range res.Chunks {
			b = append(b, c.Data...)
		}
		return string(b)
	}
	for _, c := range []struct {
		cursor    int64
		text      string
		next      int64
		more, gap bool
	}{
		{0, "run1arun1b", 10, true, false}, // stops at the skip
		{3, "1arun1b", 10, true, false},
		{10, "run2", 1014, false, true},  // reports it, moves past it
		{500, "run2", 1014, false, true}, // a cursor the dead supervisor handed out
		{1010, "run2", 1014, false, false},
		{1014, "", 1014, false, false},
	} {
		res := r.poll(c.cursor, 1<<20)
		if text(res) != c.text || res.Next != c.next || res.More != c.more || res.CrashGap != c.gap || res.Truncated != c.gap || res.LostBytes != 0 {
			t.Errorf("poll from %d: %q next %d more %v crashGap %v truncated %v lost %d; want %q next %d more %v crash gap %v",
				c.cursor, text(res), res.Next, res.More, res.CrashGap, res.Truncated, res.LostBytes, c.text, c.next, c.more, c.gap)
		}
	}
	// A one-shot job's skip is at its end: the poll that reads up to it
	// says more, the next reports the gap and ends past it.
	r = newRing(1 << 20)
	add(1, "out")
	r.skipTo(r.end + 1000)
	if res := r.poll(0, 1<<20); text(res) != "out" || res.Next != 3 || !res.More || res.CrashGap {
		t.Errorf("one-shot from 0: %q next %d more %v gap %v", text(res), res.Next, res.More, res.CrashGap)
	}
	if res := r.poll(3, 1<<20); text(res) != "" || res.Next != 1003 || res.More || !res.CrashGap || !res.Truncated {
		t.Errorf("one-shot from 3: %q next %d more %v gap %v", text(res), res.Next, res.More, res.CrashGap)
	}
	// Evicted output before the skip is counted; the gap is reported too.
	r = newRing(300) // (room for about one chunk)
	add(1, string(make([]byte, 100)))
	r.skipTo(r.end + 1000)
	add(100003, string(make([]byte, 100))) // evicts the first
	if res := r.poll(0, 1<<20); res.LostBytes != 100 || !res.CrashGap || res.Next != 1200 || len(res.Chunks) != 1 {
		t.Errorf("evicted then skipped: lost %d gap %v next %d", res.LostBytes, res.CrashGap, res.Next)
	}
}

// TestLogOrder: a job's "job started" line comes before its "job exited"
// line, however quickly it ends (it was logged after the job's reader
// started: 86 of 1200 short jobs were logged exited before started).
func TestLogOrder(t *testing.T) {
	var buf lockedBuf
	m := New(Config{MaxJobs: 100}, slog.New(slog.NewTextHandler(&buf, nil)), nil)
	defer m.Close(context.Background())
	var js []*Job
	for range 60 {
		j, _, err := m.SpawnJobWith(protocol.SpawnArgs{Argv: []string{"true"}}, SpawnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		js = append(js, j)
	}
	for _, j := range js {
		<-j.Done()
	}
	started := map[string]bool{}
	for _, l := range buf.lines() {
		id := ""
		if i := strings.Index(l, " job=j-"); i >= 0 {
			id = strings.Fields(l[i+5:])[0]
		}
		switch {
		case strings.Contains(l, `msg="job started"`):
			started[id] = true
		case strings.Contains(l, `msg="job exited"`) && !started[id]:
			t.Fatalf("job %s logged exited before started:\n%s", id, l)
		}
	}
	if len(started) != len(js) {
		t.Fatalf("%d jobs logged started of %d", len(started), len(js))
	}
}

// TestBracketedPasteAcrossReads: the program's bracketed-paste switch is
// seen when its sequence is split between reads, even a byte at a time
// (it was seen within one read only).
func TestBracketedPasteAcrossReads(t *testing.T) {
	for _, c := range []struct {
		reads []string
		want  bool
	}{
		{[]string{"ab\x1b[?2004h"}, true},
		{[]string{"ab\x1b[?20", "04hcd"}, true},
		{[]string{"\x1b[?2004h", "x\x1b[?20", "04l"}, false},
		{[]string{"\x1b[?2004l\x1b[?2004h"}, true},
		{[]string{"\x1b", "[", "?", "2", "0", "0", "4", "h"}, true},
		{[]string{"\x1b[?2004h", "plain output with no sequence"}, true},
	} {
		j := &Job{}
		for _, r := range c.reads {
			j.trackBracketedPasteLocked([]byte(r))
		}
		if j.in.bracketed != c.want {
			t.Errorf("%q: bracketed %v, want %v", c.reads, j.in.bracketed, c.want)
		}
	}
}
