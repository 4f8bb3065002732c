package outlog

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Events reads whole output events by seq, across segments and the
// queue, past a skip, with their times and attempts, within its bounds.
func TestEvents(t *testing.T) {
	s := testStore(t, 16<<10, 1<<20)
	w, err := s.Open("ev", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		seq  uint64
		off  int64
		data []byte
	}
	var evs []ev
	off := int64(0)
	seq := uint64(2)
	for i := range 60 {
		if i == 30 {
			w.Skip(off + 500) // (a crash: offsets skipped, seqs jump)
			off += 500
			seq += 100
		}
		d := bytes.Repeat([]byte{byte(i)}, 3000)
		w.Append(protocol.Chunk{Stream: protocol.Stdout, Seq: seq, Offset: off, Data: d}, int64(seq)*10, 1+i/20)
		evs = append(evs, ev{seq, off, d})
		off += int64(len(d))
		seq++
	}
	check := func(name string, got []Event, want []ev) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", name, len(got), len(want))
		}
		for i, g := range got {
			e := want[i]
			if g.Seq != e.seq || g.Offset != e.off || !bytes.Equal(g.Data, e.data) || g.Ts != int64(e.seq)*10 || g.Attempt == 0 {
				t.Fatalf("%s: event %d: seq %d off %d ts %d attempt %d, want seq %d off %d", name, i, g.Seq, g.Offset, g.Ts, g.Attempt, e.seq, e.off)
			}
		}
	}
	for _, queued := range []bool{true, false} { // (while queued, then from the files)
		if !queued {
			written(t, w)
		}
		got, more, err := w.Events(1, math.MaxInt64, 1<<20, 1000)
		if err != nil || more {
			t.Fatalf("all: more %v, %v", more, err)
		}
		check("all", got, evs)
		got, _, _ = w.Events(evs[40].seq, math.MaxInt64, 1<<20, 1000)
		check("from the middle", got, evs[40:])
		got, _, _ = w.Events(evs[29].seq+1, math.MaxInt64, 1<<20, 1000) // (a seq of the jump)
		check("from a missing seq", got, evs[30:])
		got, _, _ = w.Events(evs[10].seq, evs[20].off, 1<<20, 1000)
		check("below a limit", got, evs[10:20])
		got, more, _ = w.Events(evs[5].seq, math.MaxInt64, 1<<20, 4)
		check("four", got, evs[5:9])
		if !more {
			t.Fatal("four of more events: more false")
		}
		got, more, _ = w.Events(evs[5].seq, math.MaxInt64, 10000, 1000)
		check("10000 bytes", got, evs[5:8])
		if !more {
			t.Fatal("bytes bound: more false")
		}
		got, more, _ = w.Events(evs[5].seq, math.MaxInt64, 10, 1000)
		check("one at least", got, evs[5:6])
		if !more {
			t.Fatal("one event over the bytes bound: more false")
		}
		got, more, _ = w.Events(seq, math.MaxInt64, 1<<20, 1000)
		if len(got) != 0 || more {
			t.Fatalf("past the end: %d events, more %v", len(got), more)
		}
	}
	if segs, _ := listSegs(filepath.Join(s.Dir(), "ev")); len(segs) < 5 {
		t.Fatalf("%d segments: the read is not across segments", len(segs))
	}
}

// appendFrameV1 appends a frame of the first file format (no ts, no
// attempt) to b.
func appendFrameV1(b []byte, f *frame) []byte {
	var h [headerLenV1]byte
	h[0], h[1] = magicV1, f.kind
	binary.BigEndian.PutUint32(h[2:6], uint32(len(f.data)))
	binary.BigEndian.PutUint64(h[6:14], f.seq)
	binary.BigEndian.PutUint64(h[14:22], uint64(f.off))
	binary.BigEndian.PutUint32(h[22:26], crc32.Update(crc32.Checksum(h[:22], crcTable), crcTable, f.data))
	return append(append(b, h[:]...), f.data...)
}

// Files of the first format are read, and appended to, as they are.
func TestFirstFormat(t *testing.T) {
	s := testStore(t, 64<<10, 1<<20)
	dir := filepath.Join(s.Dir(), "old")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var b []byte
	b = appendFrameV1(b, &frame{kind: kindStdout, seq: 2, off: 0, data: []byte("hello ")})
	b = appendFrameV1(b, &frame{kind: kindStderr, seq: 3, off: 6, data: []byte("world")})
	if err := os.WriteFile(filepath.Join(dir, segName(0)), b, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := s.Open("old", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Append(protocol.Chunk{Stream: protocol.Stdout, Seq: 4, Offset: 11, Data: []byte("!")}, 77, 2)
	written(t, w)
	evs, _, err := w.Events(1, math.MaxInt64, 1<<20, 100)
	if err != nil || len(evs) != 3 {
		t.Fatalf("events: %d, %v", len(evs), err)
	}
	if evs[0].Ts != 0 || evs[1].Stream != protocol.Stderr || string(evs[1].Data) != "world" || evs[2].Ts != 77 || evs[2].Attempt != 2 {
		t.Fatalf("events read back: %+v", evs)
	}
	w.Release()
	got, _ := readAll(t, s, "old", 0)
	if string(got) != "hello world!" {
		t.Fatalf("poll: %q", got)
	}
}

// A segment is input: whatever it holds, reading it neither panics nor
// returns a frame that fails its checks; a frame whose time or attempt
// was changed fails its CRC.
func FuzzSegment(f *testing.F) {
	var b []byte
	for i, fr := range []frame{
		{kind: kindStdout, seq: 2, ts: 1700000000000, attempt: 1, off: 0, data: []byte("abc")},
		{kind: kindSkip, off: 3, span: 10},
		{kind: kindStderr, seq: 9, off: 13, data: []byte("x")},
	} {
		h := make([]byte, headerLen)
		putHeader(h, &fr)
		b = append(append(b, h...), fr.data...)
		if i == 0 {
			f.Add(appendFrameV1(nil, &fr))
		}
	}
	f.Add(b)
	bad := append([]byte(nil), b...)
	bad[25] ^= 1 // (the first frame's time)
	f.Add(bad)
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := scanner{r: bufio.NewReader(bytes.NewReader(data))}
		for {
			fr, err := sc.next()
			if err != nil {
				break
			}
			if fr.off < 0 || len(fr.data) > maxFrameData || (fr.kind == kindSkip && len(fr.data) > 0) {
				t.Fatalf("frame passed its checks: %+v", fr)
			}
		}
		if sc.pos > int64(len(data)) {
			t.Fatalf("valid part %d of %d bytes", sc.pos, len(data))
		}
	})
}

// The header's checksum covers the time and the attempt.
func TestHeaderChecksum(t *testing.T) {
	fr := frame{kind: kindStdout, seq: 5, ts: 123, attempt: 2, off: 7, data: []byte("data")}
	h := make([]byte, headerLen)
	putHeader(h, &fr)
	for _, i := range []int{23, 31} { // (ts, attempt)
		b := append(append([]byte(nil), h...), fr.data...)
		b[i] ^= 0x40
		sc := scanner{r: bufio.NewReader(bytes.NewReader(b))}
		if _, err := sc.next(); !errors.Is(err, errTorn) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
}

// TestEventsSegmentGoneDuringRead: a segment deleted by rotation after
// a read of events took the ones before it (the writer overtook the
// read) ends the read there (more), not with a hole in its middle.
func TestEventsSegmentGoneDuringRead(t *testing.T) {
	s := testStore(t, 4096, 1<<20)
	w, err := s.Open("ev", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(0)
	for i := range 12 {
		d := bytes.Repeat([]byte{byte('a' + i)}, 3000)
		w.Append(protocol.Chunk{Stream: protocol.Stdout, Seq: uint64(i + 1), Offset: off, Data: d}, 1, 0)
		off += int64(len(d))
	}
	written(t, w)
	w.mu.Lock()
	segs := slices.Clone(w.segs)
	w.mu.Unlock()
	if len(segs) < 4 {
		t.Fatalf("%d segments, want 4 or more", len(segs))
	}
	// (as a read that opened the first segment sees it once the writer
	// rotated the next ones away)
	if err := os.Remove(filepath.Join(w.dir, segName(segs[1].start))); err != nil {
		t.Fatal(err)
	}
	evs, more, err := w.Events(1, off, 1<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !more || len(evs) == 0 || evs[len(evs)-1].Offset+int64(len(evs[len(evs)-1].Data)) != segs[1].start {
		t.Fatalf("%d events (more %v): want those of the first segment, more", len(evs), more)
	}
	// From the first seq not read on: the events after the hole.
	next := evs[len(evs)-1].Seq + 1
	evs, _, err = w.Events(next, off, 1<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[0].Offset != segs[2].start {
		t.Fatalf("read on from seq %d: %d events, want them from offset %d on", next, len(evs), segs[2].start)
	}
}
