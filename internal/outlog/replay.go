package outlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Replay is what the files of a job no longer in memory hold for
// subscribe (Store.Replay).
type Replay struct {
	// Info is the job as poll answers it from its files, its LastSeq
	// the terminal event's.
	Info protocol.JobInfo
	// Events are the output events with seq >= from, in order, within
	// the read's bounds (see Writer.Events); More: a bound stopped the
	// read before the files' end.
	Events []Event
	More   bool
	// Terminal is the job's terminal event: as recorded when it ended,
	// or made from its record (see terminalEvent).
	Terminal protocol.Event
	// Before is the output offset at which the events with seq >= from
	// begin, when the files tell it (BeforeKnown): the end of the last
	// output frame before them, or 0 when they begin with the job's first
	// output.
	Before      int64
	BeforeKnown bool
	// Skips are the offset ranges that skip frames read say never held
	// output from the supervisor that wrote them (see frame); ManySkips:
	// more than maxSkips were read, not all kept.
	Skips     []Span
	ManySkips bool
}

// Span is an offset range [At, At+N).
type Span struct{ At, N int64 }

// maxSkips bounds the skip frames a read keeps (one per supervisor crash
// the job lived through; the files are input).
const maxSkips = 256

// Replay reads the files of job id, not in memory: its output events
// with seq >= from (at most maxEvents of them and maxBytes of output, one
// at least), and its end. ErrNoOutput when it has no files.
func (s *Store) Replay(id string, from uint64, maxBytes int64, maxEvents int) (Replay, error) {
	dir, err := s.jobDir(id)
	if err != nil {
		return Replay{}, fmt.Errorf("replay %.64q: %w", id, ErrNoOutput)
	}
	segs, err := listSegs(dir)
	if errors.Is(err, os.ErrNotExist) {
		return Replay{}, fmt.Errorf("replay %s: %w", id, ErrNoOutput)
	}
	if err != nil {
		return Replay{}, fmt.Errorf("replay %s: %w", id, err)
	}
	info, term := readInfo(dir, id)
	end, last, err := tail(dir, segs)
	if err != nil {
		return Replay{}, fmt.Errorf("replay %s: %w", id, err)
	}
	end = max(end, info.OutputEnd)
	rd := &reading{limit: end, max: maxBytes, events: true, minSeq: max(from, 1), maxEvents: max(maxEvents, 1)}
	if len(segs) > 0 {
		i := seqSegment(dir, segs, rd.minSeq)
		rd.atStart = segs[i].start == 0
		if err := rd.run(dir, segs[i:], nil); err != nil {
			return Replay{}, fmt.Errorf("replay %s: %w", id, err)
		}
	}
	r := Replay{More: rd.res.More, Before: rd.before, BeforeKnown: rd.beforeKnown, Skips: rd.skips, ManySkips: rd.manySkips}
	r.Events = make([]Event, len(rd.res.Chunks))
	for k, c := range rd.res.Chunks {
		r.Events[k] = Event{Chunk: c, Ts: rd.stamps[k].ts, Attempt: rd.stamps[k].attempt}
	}
	r.Terminal = terminalEvent(info, term, last.seq, last.ts, end)
	info.OutputEnd, info.OutputDisk, info.LastSeq = end, true, r.Terminal.Seq
	info.RetainedFrom = end
	if len(segs) > 0 {
		info.RetainedFrom = min(segs[0].start, end)
	}
	r.Info = info
	return r, nil
}

// tail returns the end of the output in a job's files (past the last
// frame of its last segment) and their last output frame (seq 0: none).
func tail(dir string, segs []seg) (end int64, last frame, err error) {
	for i := len(segs) - 1; i >= 0; i-- {
		_, e, l, err := scanLast(filepath.Join(dir, segName(segs[i].start)))
		if errors.Is(err, os.ErrNotExist) {
			continue // (rotated away meanwhile)
		}
		if err != nil {
			return 0, frame{}, err
		}
		if i == len(segs)-1 {
			end = e
		}
		if l.seq != 0 {
			return end, l, nil
		}
	}
	return end, frame{}, nil
}
