package outlog

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// replayJob writes a job of 20 output events (seqs 2..21, 1000 bytes
// each) to s and returns its writer and the output's end.
func replayJob(t *testing.T, s *Store, id string) (*Writer, int64) {
	t.Helper()
	w, err := s.Open(id, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Begin(protocol.JobInfo{JobID: id, Name: "rp", State: protocol.StateStarting, CreatedAt: 5})
	off := int64(0)
	for seq := uint64(2); seq <= 21; seq++ {
		w.Append(protocol.Chunk{Stream: protocol.Stdout, Seq: seq, Offset: off, Data: bytes.Repeat([]byte{byte(seq)}, 1000)}, int64(seq)*10, 0)
		off += 1000
	}
	return w, off
}

// Replay gives a forgotten job's output events by seq with its terminal
// event as recorded, where the output of the events it starts from
// begins (when the files tell), within its bounds; a job whose end is
// not recorded (a record of its spawn, an earlier supervisor's record,
// or none) gets a terminal event made from what is known, numbered after
// its output.
func TestReplay(t *testing.T) {
	s := testStore(t, 8<<10, 1<<20)
	w, end := replayJob(t, s, "j-rp")
	zero := 0
	term, _ := protocol.NewEvent("j-rp", 23, 999, protocol.KindExited, protocol.ExitPayload{Reason: protocol.ReasonExit, ExitCode: &zero, OutputEnd: end, DurationMs: 7})
	w.Finish(protocol.JobInfo{JobID: "j-rp", Name: "rp", State: protocol.StateExited, Reason: protocol.ReasonExit, ExitCode: &zero, LastSeq: 23, OutputEnd: end}, &term)
	written(t, w)
	w.Release()

	r, err := s.Replay("j-rp", 1, 1<<20, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Events) != 20 || r.Events[0].Seq != 2 || r.Events[19].Seq != 21 || r.More || !r.BeforeKnown || r.Before != 0 {
		t.Fatalf("from 1: %d events, more %v, before %d (%v)", len(r.Events), r.More, r.Before, r.BeforeKnown)
	}
	if r.Terminal.Seq != 23 || r.Terminal.Ts != 999 || r.Terminal.Kind != protocol.KindExited || !bytes.Equal(r.Terminal.Payload, term.Payload) {
		t.Fatalf("terminal %+v, want the recorded %+v", r.Terminal, term)
	}
	if r.Info.LastSeq != 23 || r.Info.OutputEnd != end || !r.Info.OutputDisk || r.Info.Name != "rp" {
		t.Fatalf("info %+v", r.Info)
	}
	r, _ = s.Replay("j-rp", 12, 1<<20, 1000)
	if len(r.Events) != 10 || r.Events[0].Seq != 12 || !r.BeforeKnown || r.Before != 10000 {
		t.Fatalf("from 12: %d events, before %d (%v)", len(r.Events), r.Before, r.BeforeKnown)
	}
	r, _ = s.Replay("j-rp", 5, 1<<20, 3)
	if len(r.Events) != 3 || !r.More {
		t.Fatalf("three from 5: %d events, more %v", len(r.Events), r.More)
	}
	r, _ = s.Replay("j-rp", 30, 1<<20, 1000)
	if len(r.Events) != 0 || r.More || r.Terminal.Seq != 23 {
		t.Fatalf("past the end: %d events, more %v, terminal %d", len(r.Events), r.More, r.Terminal.Seq)
	}

	// The first segments rotated away: where the output from seq 1
	// begins is not told by the files (the first event there is not the
	// job's first).
	segs, _ := listSegs(filepath.Join(s.Dir(), "j-rp"))
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	if err := os.Remove(filepath.Join(s.Dir(), "j-rp", segName(segs[0].start))); err != nil {
		t.Fatal(err)
	}
	r, _ = s.Replay("j-rp", 1, 1<<20, 1000)
	if r.BeforeKnown || len(r.Events) == 0 || r.Events[0].Offset != segs[1].start {
		t.Fatalf("after rotation: before known %v, first event at %d (segment %d)", r.BeforeKnown, r.Events[0].Offset, segs[1].start)
	}

	// Ends not recorded.
	for _, c := range []struct {
		name, info string
		kind       protocol.Kind
		reason     protocol.Reason
		seq        uint64
	}{
		{"spawn record", "", protocol.KindFailed, protocol.ReasonSupervisorRestart, 22},
		{"no record", "-", protocol.KindFailed, protocol.ReasonSupervisorRestart, 22},
		{"an earlier supervisor's", `{"jobId":"j-x","state":"exited","reason":"exit","exitCode":3,"lastSeq":22,"startedAt":10,"endedAt":30}`, protocol.KindExited, protocol.ReasonExit, 23},
		{"a terminal event before the output", `{"jobId":"j-x","state":"exited","reason":"signal","signal":"SIGKILL","terminal":{"seq":3,"ts":1,"kind":"job.failed","payload":{"reason":"signal","signal":"SIGKILL"}}}`, protocol.KindFailed, protocol.ReasonSignal, 22},
		{"a terminal of another kind", `{"jobId":"j-x","state":"exited","reason":"exit","exitCode":0,"lastSeq":21,"terminal":{"seq":40,"kind":"job.stdout","payload":{}}}`, protocol.KindExited, protocol.ReasonExit, 22},
		{"an invalid UTF-8 error", `{"jobId":"j-x","state":"exited","reason":"spawn-error","error":"bad ` + "\xff" + `","lastSeq":21}`, protocol.KindFailed, protocol.ReasonSpawnError, 22},
	} {
		os.RemoveAll(filepath.Join(s.Dir(), "j-x"))
		w, _ := replayJob(t, s, "j-x")
		written(t, w)
		w.Release()
		switch c.info {
		case "":
		case "-":
			os.Remove(filepath.Join(s.Dir(), "j-x", infoFile))
		default:
			if err := os.WriteFile(filepath.Join(s.Dir(), "j-x", infoFile), []byte(c.info), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		r, err := s.Replay("j-x", 1, 1<<20, 1000)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var p protocol.ExitPayload
		if err := r.Terminal.DecodePayload(&p); err != nil || r.Terminal.Kind != c.kind || p.Reason != c.reason || r.Terminal.Seq != c.seq ||
			r.Info.LastSeq != c.seq || p.OutputEnd != 20000 || len(r.Events) != 20 {
			t.Fatalf("%s: terminal %s seq %d %+v (%v), info last seq %d, %d events", c.name, r.Terminal.Kind, r.Terminal.Seq, p, err, r.Info.LastSeq, len(r.Events))
		}
		if c.reason == protocol.ReasonSpawnError && p.Error != "bad \uFFFD" {
			t.Fatalf("%s: error %q", c.name, p.Error)
		}
	}
	if _, err := s.Replay("j-none", 1, 1<<20, 10); err == nil {
		t.Fatal("replay of a job without files")
	}
	if _, err := s.Replay("../x", 1, 1<<20, 10); err == nil {
		t.Fatal("replay of a path")
	}
}
