package outlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Result is output read back from disk, as poll reports it.
type Result struct {
	// Chunks are the output from the cursor on, in order (the first
	// trimmed to start at the cursor, or later: see Lost).
	Chunks []protocol.Chunk
	// Next is where the next read goes on.
	Next int64
	// More: the read stopped before the limit (max bytes, or at a gap
	// that the read from Next reports).
	More bool
	// Lost counts the offsets between the cursor and the first chunk
	// that are not on disk (rotated away, never written); CrashGap says
	// offsets skipped after a supervisor crash lie there (see frame).
	Lost     int64
	CrashGap bool
	// Found: something on disk lies at or past the cursor, below the limit.
	Found bool
}

// Read returns the job's output from cursor (at most max bytes, below
// limit), from its segments and what is queued for them.
func (w *Writer) Read(cursor, limit, maxBytes int64) (Result, error) {
	w.mu.Lock()
	segs, queue, dir := slices.Clone(w.segs), slices.Clone(w.queue), w.dir
	w.mu.Unlock()
	return read(dir, segs, queue, cursor, limit, maxBytes)
}

// Event is an output event read back from disk.
type Event struct {
	protocol.Chunk
	// Ts is the event's time (ms since the epoch), Attempt the service
	// run it belongs to; both 0 for output written by a supervisor
	// without them (the first file format).
	Ts      int64
	Attempt int
}

// Events returns the job's output events with seq >= from that begin
// below limit (an output offset), in order, from its segments and what
// is queued for them: at most maxEvents of them and maxBytes of output
// (one event at least). Events are whole; what lies between them (output
// rotated away, offsets skipped after a crash) is passed over: the
// caller sees the seqs missing. more: a bound stopped the read.
func (w *Writer) Events(from uint64, limit, maxBytes int64, maxEvents int) (evs []Event, more bool, err error) {
	w.mu.Lock()
	segs, queue, dir := slices.Clone(w.segs), slices.Clone(w.queue), w.dir
	w.mu.Unlock()
	rd := &reading{limit: limit, max: maxBytes, events: true, minSeq: from, maxEvents: max(maxEvents, 1)}
	i := seqSegment(dir, segs, from)
	if err := rd.run(dir, segs[i:], queue); err != nil {
		return nil, false, err
	}
	evs = make([]Event, len(rd.res.Chunks))
	for k, c := range rd.res.Chunks {
		evs[k] = Event{Chunk: c, Ts: rd.stamps[k].ts, Attempt: rd.stamps[k].attempt}
	}
	return evs, rd.res.More, nil
}

// seqSegment returns the index of the segment the events with seq >= seq
// are read from: the last one whose first output event is at most seq
// (0 when none is). A segment whose first seq cannot be read counts as
// later (the read starts earlier: never past the events wanted).
func seqSegment(dir string, segs []seg, seq uint64) int {
	i := sort.Search(len(segs), func(i int) bool {
		first, ok := firstSeq(filepath.Join(dir, segName(segs[i].start)), segs[i].size)
		return !ok || first > seq
	})
	return max(i-1, 0)
}

// firstSeq returns the seq of the first output frame of a segment file
// (its first size bytes).
func firstSeq(path string, size int64) (uint64, bool) {
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := scanner{r: bufio.NewReaderSize(io.LimitReader(f, size), 64<<10)}
	for {
		fr, err := sc.next()
		if err != nil {
			return 0, false
		}
		if fr.kind != kindSkip {
			return fr.seq, true
		}
	}
}

// reading is one read's state.
type reading struct {
	limit, max int64
	// events: a read of whole output events with seq >= minSeq (at most
	// maxEvents), not of output by offset (see Events).
	events    bool
	minSeq    uint64
	maxEvents int
	stamps    []stamp // (events: Chunks[i]'s)
	// events: where the output of the events read begins, when known
	// (the end of an output frame before them, or 0 when the read began
	// at the job's first frame: atStart, the segment from offset 0); the
	// skip frames passed (at most maxSkips, then manySkips).
	atStart           bool
	before            int64
	beforeKnown       bool
	skips             []Span
	manySkips, passed bool

	n    int64
	res  Result
	done bool
}

// stamp is what an output event carried beside its chunk.
type stamp struct {
	ts      int64
	attempt int
}

func read(dir string, segs []seg, queue []frame, cursor, limit, maxBytes int64) (Result, error) {
	rd := &reading{limit: limit, max: maxBytes, res: Result{Next: cursor}}
	if cursor >= limit {
		return Result{Next: cursor, Chunks: []protocol.Chunk{}}, nil
	}
	// From the last segment that starts at or before the cursor.
	i := max(sort.Search(len(segs), func(i int) bool { return segs[i].start > cursor })-1, 0)
	if err := rd.run(dir, segs[i:], queue); err != nil {
		return Result{}, err
	}
	return rd.res, nil
}

// run reads segs (up to the limit), then queue.
func (rd *reading) run(dir string, segs []seg, queue []frame) error {
	rd.res.Chunks = []protocol.Chunk{}
	for i := 0; i < len(segs) && !rd.done && segs[i].start < rd.limit; i++ {
		if err := rd.segment(filepath.Join(dir, segName(segs[i].start)), segs[i].size); err != nil {
			return err
		}
	}
	for q := range queue {
		if rd.done {
			break
		}
		rd.take(&queue[q], false)
	}
	return nil
}

// segment reads the frames of one segment file (its first size bytes).
func (rd *reading) segment(path string, size int64) error {
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		// Rotated away meanwhile: a gap. One past events already read
		// (the writer's rotation overtook the read) ends the read of
		// events there, as a bound does: the next read from there sees
		// the seqs missing. (A read by offset stops at the gap itself.)
		if rd.events && len(rd.res.Chunks) > 0 {
			rd.res.More, rd.done = true, true
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read output: %w", err)
	}
	defer f.Close()
	sc := scanner{r: bufio.NewReaderSize(io.LimitReader(f, size), 256<<10)}
	for !rd.done {
		fr, err := sc.next()
		if err == io.EOF || errors.Is(err, errTorn) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read output %s: %w", path, err)
		}
		rd.take(&fr, true)
	}
	return nil
}

// take adds what of fr lies past the read's position.
func (rd *reading) take(fr *frame, copyData bool) {
	if rd.events {
		rd.takeEvent(fr, copyData)
		return
	}
	res := &rd.res
	pos := res.Next
	if fr.end() <= pos {
		return
	}
	if fr.off >= rd.limit {
		rd.done = true
		return
	}
	res.Found = true
	if fr.kind == kindSkip {
		if len(res.Chunks) > 0 {
			res.More, rd.done = true, true
			return
		}
		res.CrashGap = true
		res.Next = min(fr.end(), rd.limit)
		rd.done = res.Next >= rd.limit
		return
	}
	if fr.off > pos {
		if len(res.Chunks) > 0 {
			res.More, rd.done = true, true // (the read from Next reports it)
			return
		}
		res.Lost += fr.off - pos
		pos = fr.off
	}
	d := fr.data[pos-fr.off:]
	if e := pos + int64(len(d)); e > rd.limit {
		d = d[:rd.limit-pos]
	}
	if rd.n+int64(len(d)) > rd.max {
		d = d[:rd.max-rd.n]
		res.More, rd.done = true, true
	}
	if len(d) > 0 {
		if copyData {
			d = slices.Clone(d)
		}
		res.Chunks = append(res.Chunks, protocol.Chunk{Seq: fr.seq, Stream: streamOf(fr.kind), Offset: pos, Data: d})
		rd.n += int64(len(d))
	}
	res.Next = pos + int64(len(d))
	if res.Next >= rd.limit {
		rd.done = true
	}
}

// takeEvent adds fr, when it is an output event of the read (see Events).
func (rd *reading) takeEvent(fr *frame, copyData bool) {
	res := &rd.res
	if fr.end() <= res.Next {
		return // (read already)
	}
	if fr.off >= rd.limit {
		rd.done = true
		return
	}
	if fr.kind == kindSkip {
		if len(rd.skips) < maxSkips {
			rd.skips = append(rd.skips, Span{At: fr.off, N: fr.span})
		} else {
			rd.manySkips = true
		}
	}
	if fr.kind == kindSkip || fr.seq < rd.minSeq {
		if fr.kind != kindSkip && len(res.Chunks) == 0 {
			rd.before, rd.beforeKnown = fr.end(), true
		}
		res.Next, rd.passed = fr.end(), true
		return
	}
	if len(res.Chunks) > 0 && (len(res.Chunks) >= rd.maxEvents || rd.n+int64(len(fr.data)) > rd.max) {
		res.More, rd.done = true, true
		return
	}
	if len(res.Chunks) == 0 && !rd.passed && rd.atStart && fr.off == 0 {
		rd.before, rd.beforeKnown = 0, true // (no output before it)
	}
	d := fr.data
	if copyData {
		d = slices.Clone(d)
	}
	res.Chunks = append(res.Chunks, protocol.Chunk{Seq: fr.seq, Stream: streamOf(fr.kind), Offset: fr.off, Data: d})
	rd.stamps = append(rd.stamps, stamp{ts: fr.ts, attempt: fr.attempt})
	rd.n += int64(len(d))
	res.Next = fr.end()
}

// Poll reads the output of job id, not in memory, from its files: as
// poll answers it, with the job as last recorded (its outputEnd the end
// of what is known of its output, retainedFrom the first offset on
// disk). ErrNoOutput when it has none; ErrCursor for a cursor past the end.
func (s *Store) Poll(id string, cursor, maxBytes int64) (protocol.PollResult, error) {
	dir, err := s.jobDir(id)
	if err != nil {
		return protocol.PollResult{}, fmt.Errorf("poll %.64q: %w", id, ErrNoOutput)
	}
	segs, err := listSegs(dir)
	if errors.Is(err, os.ErrNotExist) {
		return protocol.PollResult{}, fmt.Errorf("poll %s: %w", id, ErrNoOutput)
	}
	if err != nil {
		return protocol.PollResult{}, fmt.Errorf("poll %s: %w", id, err)
	}
	info, _ := readInfo(dir, id)
	end := info.OutputEnd
	from := end
	if len(segs) > 0 {
		_, e, err := scanEnd(filepath.Join(dir, segName(segs[len(segs)-1].start)))
		if err != nil {
			return protocol.PollResult{}, fmt.Errorf("poll %s: %w", id, err)
		}
		end, from = max(end, e), segs[0].start
	}
	if cursor > end {
		return protocol.PollResult{}, fmt.Errorf("poll %s: %w: cursor %d, output end %d", id, ErrCursor, cursor, end)
	}
	if maxBytes <= 0 || maxBytes > protocol.MaxPollBytes {
		maxBytes = protocol.MaxPollBytes
	}
	r, err := read(dir, segs, nil, cursor, end, maxBytes)
	if err != nil {
		return protocol.PollResult{}, fmt.Errorf("poll %s: %w", id, err)
	}
	if !r.Found {
		r.Lost, r.Next = end-cursor, end
	}
	info.OutputEnd, info.RetainedFrom, info.OutputDisk = end, min(from, end), true
	return protocol.PollResult{
		Job: info, Chunks: r.Chunks, Next: r.Next, More: r.More || r.Next < end,
		Truncated: r.Lost > 0 || r.CrashGap, LostBytes: r.Lost, CrashGap: r.CrashGap,
	}, nil
}
