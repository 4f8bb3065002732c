package server

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// replayed is a job's events as subscribe replays them, checked.
type replayed struct {
	events   []protocol.Event
	out, err []byte
}

// subscribeAll replays job id's events from seq from to its end with
// subscribe (following more), and checks that nothing is missing, the
// seqs run on one by one, the output offsets follow each other and every
// output event has a time.
func subscribeAll(t *testing.T, c *client.Client, id string, from uint64) replayed {
	t.Helper()
	var r replayed
	next, offset := from, int64(-1)
	for {
		res, err := c.Subscribe(ctxT(t, 30*time.Second), id, next, 0)
		if err != nil {
			t.Fatalf("subscribe %s from %d: %v", id, next, err)
		}
		if len(res.Missing) > 0 {
			t.Fatalf("subscribe from %d: missing %+v (%d bytes)", next, res.Missing, res.MissingBytes)
		}
		for _, ev := range res.Events {
			if ev.Seq != next {
				t.Fatalf("event seq %d (%s), want %d", ev.Seq, ev.Kind, next)
			}
			next++
			r.events = append(r.events, ev)
			if ev.Kind != protocol.KindStdout && ev.Kind != protocol.KindStderr {
				continue
			}
			p, err := ev.Output()
			if err != nil {
				t.Fatalf("event %d: %v", ev.Seq, err)
			}
			if offset >= 0 && p.Offset != offset {
				t.Fatalf("event %d at offset %d, want %d", ev.Seq, p.Offset, offset)
			}
			offset = p.Offset + int64(len(p.Data))
			if ev.Ts == 0 {
				t.Fatalf("event %d without a time", ev.Seq)
			}
			if ev.Kind == protocol.KindStderr {
				r.err = append(r.err, p.Data...)
			} else {
				r.out = append(r.out, p.Data...)
			}
		}
		if !res.More && next > res.Job.LastSeq {
			return r
		}
		if !res.More && len(res.Events) == 0 {
			t.Fatalf("subscribe from %d: nothing, not more, last seq %d", next, res.Job.LastSeq)
		}
	}
}

// Subscribe from a seq the ring evicted replays a job's output events
// from its files, byte-exact and seq-exact, with nothing missing: from
// the start, from the middle, after a supervisor restart; Follow sees no
// gap.
func TestOutputOnDiskSubscribe(t *testing.T) {
	cfg := diskConfig(t)
	cfg.Jobs.MaxFinished = 100
	ts := startServer(t, cfg)
	dir := t.TempDir()
	outPath, wantOut := randomFile(t, dir, "out", 3<<20, 11)
	errPath, wantErr := randomFile(t, dir, "err", 200<<10, 12)
	info, fin, err := ts.client.SpawnWait(ctxT(t, 60*time.Second), protocol.SpawnArgs{
		Argv: []string{"sh", "-c", `cat "$1"; cat "$2" >&2; cat "$1"`, "sh", outPath, errPath}, Output: protocol.OutputDisk,
	}, 50*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: finished %v, %v", fin, err)
	}
	id := info.JobID
	wantOut = append(append([]byte(nil), wantOut...), wantOut...)
	if info.RetainedFrom == 0 {
		t.Fatal("the ring holds the whole output: nothing to read from the files")
	}
	check := func(when string) {
		t.Helper()
		r := subscribeAll(t, ts.client, id, 1)
		if !bytes.Equal(r.out, wantOut) || !bytes.Equal(r.err, wantErr) {
			t.Fatalf("%s: stdout %d bytes (want %d), stderr %d (want %d), or not the same", when, len(r.out), len(wantOut), len(r.err), len(wantErr))
		}
		if r.events[0].Kind != protocol.KindStarted || !r.events[len(r.events)-1].Kind.Terminal() {
			t.Fatalf("%s: from %s to %s", when, r.events[0].Kind, r.events[len(r.events)-1].Kind)
		}
		// From the middle: the same events from there.
		mid := r.events[len(r.events)/3].Seq
		r2 := subscribeAll(t, ts.client, id, mid)
		if len(r2.events) != len(r.events)-int(mid-1) || !bytes.Equal(r2.events[0].Payload, r.events[mid-1].Payload) {
			t.Fatalf("%s: from seq %d: %d events, want %d", when, mid, len(r2.events), len(r.events)-int(mid-1))
		}
	}
	check("in memory")

	var out bytes.Buffer
	err = ts.client.Follow(ctxT(t, 60*time.Second), id, 1, func(ev protocol.Event) error {
		switch ev.Kind {
		case protocol.KindGap:
			return gapErr(ev)
		case protocol.KindStdout:
			p, err := ev.Output()
			out.Write(p.Data)
			return err
		}
		return nil
	})
	if err != nil || !bytes.Equal(out.Bytes(), wantOut) {
		t.Fatalf("follow: %v, %d bytes of stdout (want %d)", err, out.Len(), len(wantOut))
	}

	ts = ts.restart(t)
	check("after a restart")
}

// A follower that starts after the ring evicted the job's first output
// gets it from the files, then the output that follows live, in order,
// nothing lost.
func TestOutputOnDiskSubscribeThenLive(t *testing.T) {
	cfg := diskConfig(t)
	ts := startServer(t, cfg)
	dir := t.TempDir()
	p1, want1 := randomFile(t, dir, "one", 2<<20, 21)
	p2, want2 := randomFile(t, dir, "two", 2<<20, 22)
	info, err := ts.client.Spawn(ctxT(t, 10*time.Second), protocol.SpawnArgs{
		Argv: []string{"sh", "-c", `cat "$1"; read x; cat "$2"`, "sh", p1, p2}, Stdin: true, Output: protocol.OutputDisk,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := info.JobID
	eventually(t, 30*time.Second, "the first part read", func() bool {
		info, err = ts.client.Status(ctxT(t, 10*time.Second), id)
		return err == nil && info.OutputEnd == int64(len(want1))
	})
	var (
		mu   sync.Mutex
		out  bytes.Buffer
		done = make(chan error, 1)
		half = make(chan struct{})
	)
	go func() {
		done <- ts.client.Follow(ctxT(t, 60*time.Second), id, 1, func(ev protocol.Event) error {
			if ev.Kind == protocol.KindGap {
				return gapErr(ev)
			}
			if ev.Kind != protocol.KindStdout {
				return nil
			}
			p, err := ev.Output()
			mu.Lock()
			defer mu.Unlock()
			out.Write(p.Data)
			if out.Len() == len(want1) {
				close(half)
			}
			return err
		})
	}()
	select {
	case <-half:
	case err := <-done:
		t.Fatalf("follow ended before the first part: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the first part not followed")
	}
	if _, err := ts.client.Write(ctxT(t, 10*time.Second), id, []byte("go\n"), true); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("follow: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := append(append([]byte(nil), want1...), want2...); !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("followed %d bytes, want %d, or not the same", out.Len(), len(want))
	}
}

// A service's output events replayed from its files carry the run
// (attempt) they belong to.
func TestOutputOnDiskSubscribeService(t *testing.T) {
	cfg := diskConfig(t)
	ts := startServer(t, cfg)
	dir := t.TempDir()
	path, want := randomFile(t, dir, "out", 300<<10, 31)
	counter := filepath.Join(dir, "n")
	info, err := ts.client.Spawn(ctxT(t, 10*time.Second), protocol.SpawnArgs{
		Shell:   fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s; cat %[2]s; [ $n -ge 3 ]`, counter, path),
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, RestartDelayMs: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the service's end", func() bool {
		info, err = ts.client.Status(ctxT(t, 10*time.Second), info.JobID)
		return err == nil && info.State == protocol.StateExited
	})
	if !info.OutputDisk || info.RetainedFrom == 0 {
		t.Fatalf("service: output on disk %v, retained from %d", info.OutputDisk, info.RetainedFrom)
	}
	r := subscribeAll(t, ts.client, info.JobID, 1)
	if want := bytes.Repeat(want, 3); !bytes.Equal(r.out, want) {
		t.Fatalf("stdout %d bytes, want %d, or not the same", len(r.out), len(want))
	}
	attempt, runs := 0, 0
	for _, ev := range r.events {
		switch {
		case ev.Kind == protocol.KindStarted:
			attempt, runs = ev.Attempt, runs+1
		case ev.Attempt != attempt:
			t.Fatalf("event %d (%s) of attempt %d in run %d", ev.Seq, ev.Kind, ev.Attempt, attempt)
		}
	}
	if runs != 3 || attempt != 3 {
		t.Fatalf("%d runs, the last attempt %d", runs, attempt)
	}
}

// gapErr describes a gap event as an error.
func gapErr(ev protocol.Event) error {
	var g protocol.GapPayload
	if err := ev.DecodePayload(&g); err != nil {
		return fmt.Errorf("a gap (%w)", err)
	}
	return fmt.Errorf("a gap: %+v", g)
}

// A follower that falls behind a job still printing (its first output
// taken only once the ring evicted much more) catches up from the
// files while the job goes on: every byte once, in order.
func TestOutputOnDiskFollowBehind(t *testing.T) {
	size := 8 << 20
	if testing.Short() {
		size = 2 << 20
	}
	cfg := diskConfig(t)
	ts := startServer(t, cfg)
	path, want := randomFile(t, t.TempDir(), "out", size, 41)
	info, err := ts.client.Spawn(ctxT(t, 10*time.Second), protocol.SpawnArgs{
		Argv: []string{"sh", "-c", `cat "$1"; read x; cat "$1"`, "sh", path}, Stdin: true, Output: protocol.OutputDisk,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := info.JobID
	want = append(append([]byte(nil), want...), want...)
	var out bytes.Buffer
	released := false
	err = ts.client.Follow(ctxT(t, 120*time.Second), id, 1, func(ev protocol.Event) error {
		if ev.Kind == protocol.KindGap {
			return gapErr(ev)
		}
		if ev.Kind != protocol.KindStdout {
			return nil
		}
		p, err := ev.Output()
		out.Write(p.Data)
		if !released {
			// Behind by a whole first part (the ring holds 64 KiB), then
			// the second part printed while this follower catches up.
			released = true
			eventually(t, 30*time.Second, "the first part read", func() bool {
				info, err := ts.client.Status(ctxT(t, 10*time.Second), id)
				return err == nil && info.OutputEnd == int64(size)
			})
			if _, err := ts.client.Write(ctxT(t, 10*time.Second), id, []byte("go\n"), true); err != nil {
				return err
			}
		}
		return err
	})
	if err != nil || !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("follow: %v, %d bytes of %d, or not the same", err, out.Len(), len(want))
	}
}

// A follower from the start of a job whose first output was rotated out
// of its files (and evicted from the ring long before, past what the
// ring's index of evicted events keeps) is told exactly how much output
// it missed: the files say where what they hold begins, the job's start
// where its output began. (It was told all the output the ring ever
// evicted, most of which the files still had and replayed.)
func TestOutputOnDiskMissingBytesExact(t *testing.T) {
	cfg := diskConfig(t)
	cfg.Jobs.MaxFinished = 100
	cfg.Jobs.MergeMaxBytes = 512 // (small events: thousands evicted)
	cfg.OutputSegmentBytes = 64 << 10
	cfg.OutputMaxBytes = 256 << 10
	ts := startServer(t, cfg)
	path, _ := randomFile(t, t.TempDir(), "out", 4<<20, 61)
	info, fin, err := ts.client.SpawnWait(ctxT(t, 60*time.Second), protocol.SpawnArgs{
		Argv: []string{"cat", path}, Output: protocol.OutputDisk}, 50*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: %v %v", fin, err)
	}
	if info.LastSeq < 2*4096 {
		t.Fatalf("%d events: the ring's index of evicted events must overflow for this test", info.LastSeq)
	}
	// The files' writer may still be catching up (and dropping its oldest
	// segment) after the job ended: compare subscribe with polls made
	// just before and after it that agree.
	lost := func() int64 {
		p, err := ts.client.Poll(ctxT(t, 10*time.Second), info.JobID, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		return p.LostBytes
	}
	var res protocol.SubscribeResult
	var polled int64
	for deadline := time.Now().Add(30 * time.Second); ; {
		before := lost()
		if res, err = ts.client.Subscribe(ctxT(t, 30*time.Second), info.JobID, 1, 0); err != nil {
			t.Fatal(err)
		}
		if polled = lost(); polled == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the files' start still moves: %d then %d bytes lost", before, polled)
		}
	}
	if len(res.Events) < 2 || res.Events[0].Kind != protocol.KindStarted || len(res.Missing) != 1 || res.Missing[0].From != 2 {
		t.Fatalf("subscribe from 1: %d events, missing %+v", len(res.Events), res.Missing)
	}
	first, err := res.Events[1].Output()
	if err != nil {
		t.Fatal(err)
	}
	m := res.Missing[0]
	if m.To != res.Events[1].Seq-1 || m.Bytes != first.Offset || m.NoOutput || res.MissingBytes != first.Offset {
		t.Fatalf("missing %+v (%d bytes in all); the files begin at offset %d (seq %d)", m, res.MissingBytes, first.Offset, res.Events[1].Seq)
	}
	if polled != first.Offset {
		t.Fatalf("poll from 0 says %d bytes lost; subscribe %d", polled, first.Offset)
	}
}
