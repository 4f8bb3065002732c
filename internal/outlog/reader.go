package outlog

import (
	"bufio"
	"encoding/json"
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

// reading is one read's state.
type reading struct {
	limit, max int64
	n          int64
	res        Result
	done       bool
}

func read(dir string, segs []seg, queue []frame, cursor, limit, maxBytes int64) (Result, error) {
	rd := &reading{limit: limit, max: maxBytes, res: Result{Next: cursor, Chunks: []protocol.Chunk{}}}
	if cursor >= limit {
		return rd.res, nil
	}
	// From the last segment that starts at or before the cursor.
	i := max(sort.Search(len(segs), func(i int) bool { return segs[i].start > cursor })-1, 0)
	for ; i < len(segs) && !rd.done && segs[i].start < limit; i++ {
		if err := rd.segment(filepath.Join(dir, segName(segs[i].start)), segs[i].size); err != nil {
			return Result{}, err
		}
	}
	for q := range queue {
		if rd.done {
			break
		}
		rd.take(&queue[q], false)
	}
	return rd.res, nil
}

// segment reads the frames of one segment file (its first size bytes).
func (rd *reading) segment(path string, size int64) error {
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil // (rotated away meanwhile: a gap)
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
	info := readInfo(dir, id)
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

// readInfo returns the job's info as recorded, or what can be said
// without it.
func readInfo(dir, id string) protocol.JobInfo {
	var info protocol.JobInfo
	f, err := openNoFollow(filepath.Join(dir, infoFile), os.O_RDONLY, 0)
	if err == nil {
		data, rerr := io.ReadAll(io.LimitReader(f, 1<<20))
		f.Close()
		if rerr == nil && json.Unmarshal(data, &info) == nil && info.JobID == id {
			info.Usage = nil
			return info
		}
	}
	return protocol.JobInfo{JobID: id, State: protocol.StateExited,
		Error: "not known to this supervisor: output read from its files, without a record of how the job ended"}
}
