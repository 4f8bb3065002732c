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
	"sync"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Queue marks: past highWater queued bytes a Writer is Behind (the
// engine stops reading the job's output), below lowWater it is not any
// more (OnRoom is called).
const (
	highWater = 8 << 20
	lowWater  = 2 << 20
	// A batch (one writev(2)): at most batchMax bytes (more when one
	// frame is larger), at most batchFrames frames.
	batchMax    = 4 << 20
	batchFrames = maxIovecs / 2
)

// infoFile holds the job's JobInfo as last recorded (JSON), for polls of
// a job no longer in memory: as spawned (Begin: state starting, no end)
// from when its files are made, as it ended (Finish) once it did.
// Supervisors before Begin wrote it only at the end: a reader takes a
// record whose state is not exited as one of a job whose end is not
// known (see readInfo).
const infoFile = "info.json"

// seg is one segment file: its first offset and its size on disk (what
// is committed: written whole).
type seg struct {
	start int64
	size  int64
}

// Writer appends one job's output to its directory. Its methods never
// block on the disk: frames are queued and written by a goroutine of its
// own (owned by the Store), while readers see the queue too. mu is never
// held across file or directory I/O (the job's output path takes it):
// the goroutine makes the directory and the segments under dirMu alone.
type Writer struct {
	s     *Store
	id    string
	dir   string
	fresh bool // files of an earlier job of the id are removed first
	// onRoom is called (without locks) when the queue fell below
	// lowWater after being Behind, or the writer failed while Behind.
	onRoom func()

	// dirMu serialises what makes or deletes entries of the directory
	// (the goroutine's prepare and writeInfo, Remove), so that nothing
	// is made again once Remove deleted it. Taken before mu, never under it.
	dirMu sync.Mutex

	mu    sync.Mutex
	ready bool // the directory exists (made, or found at resume)
	// segs, total and f change only on the goroutine (under mu), or
	// under mu while it does not run.
	segs    []seg
	total   int64    // sum of segs' sizes
	f       *os.File // current (last) segment, open for writing; nil: closed
	end     int64    // offset past the last frame written or queued
	queue   []frame
	queued  int64 // bytes of queue on disk
	running bool  // the goroutine runs
	err     error // the failure that ended disk output (sticky)
	behind  bool
	stallT  *time.Timer
	info    *record // to record when the queue is written
	// begun is the job as spawned (Begin), recorded as soon as its
	// files are made, before its first output: a job whose supervisor
	// dies before it ends is still found by its name.
	begun *record
	ended bool // Finish was called: Begin records nothing
	// idleClose: close the file once the queue is written (the job
	// finished or was forgotten; a later Append opens it again).
	idleClose bool
	removed   bool
}

// Open returns the Writer of job id, a job in memory until Release or
// Remove. fresh: a new job (files an earlier job of that id left are
// replaced); else a job recovered after a restart, whose files are
// appended to. onRoom: see Writer. A fresh Writer does no I/O here.
func (s *Store) Open(id string, fresh bool, onRoom func()) (*Writer, error) {
	dir, err := s.jobDir(id)
	if err != nil {
		return nil, err
	}
	w := &Writer{s: s, id: id, dir: dir, fresh: fresh, onRoom: onRoom}
	if !fresh {
		if err := w.resume(); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, ErrClosed
	}
	if o := s.open[id]; o != nil && o != w {
		return nil, fmt.Errorf("output of %s: already open", id)
	}
	s.open[id] = w
	return w, nil
}

// resume reads the segments of an existing directory: their sizes, the
// end of the output, a torn last frame cut off. No directory: nothing
// written yet.
func (w *Writer) resume() error {
	segs, err := listSegs(w.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	w.ready = true
	if len(segs) == 0 {
		return nil
	}
	last := &segs[len(segs)-1]
	valid, end, err := scanEnd(filepath.Join(w.dir, segName(last.start)))
	if err != nil {
		return err
	}
	if valid < last.size {
		// (a write cut short by a crash or a full disk)
		if f, err := openNoFollow(filepath.Join(w.dir, segName(last.start)), os.O_WRONLY, 0); err == nil {
			_ = f.Truncate(valid)
			f.Close()
		}
		last.size = valid
	}
	w.end = max(end, last.start)
	w.segs = segs
	for _, sg := range segs {
		w.total += sg.size
	}
	return nil
}

// listSegs lists dir's segments, oldest first (a directory that is a
// symlink, or not ours, is refused).
func listSegs(dir string) ([]seg, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		// (a symlink or a file where a job's directory goes: never
		// followed; a writer replaces it)
		return nil, fmt.Errorf("output %s is not a directory: %w", dir, os.ErrNotExist)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []seg
	for _, e := range ents {
		start, ok := parseSegName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		i, err := e.Info()
		if err != nil {
			continue
		}
		segs = append(segs, seg{start: start, size: i.Size()})
	}
	sort.Slice(segs, func(a, b int) bool { return segs[a].start < segs[b].start })
	return segs, nil
}

// scanEnd returns how much of segment file path is whole frames, and
// the offset past its last frame.
func scanEnd(path string) (valid, end int64, err error) {
	valid, end, _, err = scanLast(path)
	return valid, end, err
}

// scanLast is scanEnd, also returning the segment's last output frame
// (its data left out; seq 0: none).
func scanLast(path string) (valid, end int64, last frame, err error) {
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, 0, frame{}, err
	}
	defer f.Close()
	sc := scanner{r: bufio.NewReaderSize(f, 256<<10)}
	for {
		fr, err := sc.next()
		if err == io.EOF || errors.Is(err, errTorn) {
			return sc.pos, end, last, nil
		}
		if err != nil {
			return 0, 0, frame{}, err
		}
		end = fr.end()
		if fr.kind != kindSkip {
			last, last.data = fr, nil
		}
	}
}

func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
}

// Append queues output event c (its time ts, its service run attempt).
// Bytes below what was already written (output a crashed supervisor
// wrote before its successor published it again) are dropped. c.Data
// must not change afterwards. Nothing happens once the writer failed.
func (w *Writer) Append(c protocol.Chunk, ts int64, attempt int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, off := c.Data, c.Offset
	if w.err != nil || w.removed || len(data) == 0 {
		return
	}
	if e := off + int64(len(data)); e <= w.end {
		return
	}
	if off < w.end {
		data, off = data[w.end-off:], w.end
	}
	w.pushLocked(frame{kind: kindOf(c.Stream), seq: c.Seq, ts: ts, attempt: attempt, off: off, data: data})
}

// Skip records that the offsets from the end of the output to off never
// held output (see frame).
func (w *Writer) Skip(off int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.removed || off <= w.end {
		return
	}
	w.pushLocked(frame{kind: kindSkip, off: w.end, span: off - w.end})
}

func (w *Writer) pushLocked(f frame) {
	w.queue = append(w.queue, f)
	w.queued += f.size()
	w.end = f.end()
	if w.queued > highWater && !w.behind {
		w.behind = true
		w.stallT = time.AfterFunc(w.s.cfg.StallLimit, func() {
			w.fail(fmt.Errorf("%w: %d bytes of output queued for over %v", ErrStalled, w.Queued(), w.s.cfg.StallLimit))
		})
	}
	w.kickLocked()
}

func (w *Writer) kickLocked() {
	if w.running {
		return
	}
	if !w.s.goWrite(w.run) {
		// (the store closed: nothing more is written)
		w.queue, w.queued = nil, 0
		return
	}
	w.running = true
}

// Queued returns the bytes queued, not yet written.
func (w *Writer) Queued() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queued
}

// Behind reports whether more than the high-water mark is queued: the
// caller should stop producing until OnRoom.
func (w *Writer) Behind() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.behind
}

// Err returns the failure that ended the job's disk output (nil: none).
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Begin records info (the job's, as spawned: its name, command and
// creation time) in its directory as soon as the directory is made,
// before its first output. It does no I/O here (the writer's goroutine
// does, when output or Finish starts it). Finish's record replaces it.
func (w *Writer) Begin(info protocol.JobInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.removed || w.ended {
		return
	}
	w.begun = &record{JobInfo: info}
}

// Finish records info (the job's, as it ended) and its terminal event
// (as published; nil: none) once what is queued is written, and closes
// the current segment (a later Append opens it again).
func (w *Writer) Finish(info protocol.JobInfo, terminal *protocol.Event) {
	rec := newRecord(info, terminal)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.removed {
		return
	}
	w.info, w.begun, w.ended = rec, nil, true
	w.idleClose = true
	w.kickLocked()
}

// Release says the job left memory (forgotten by retention): the writer
// closes its file once its queue is written, and the job's files are
// the age sweep's from then on.
func (w *Writer) Release() {
	w.mu.Lock()
	w.idleClose = true
	if !w.running && w.f != nil {
		w.f.Close()
		w.f = nil
	}
	w.mu.Unlock()
	w.unregister()
}

// Remove deletes the job's files (the job was removed) and drops what is
// queued.
func (w *Writer) Remove() error {
	w.mu.Lock()
	w.removed = true
	w.queue, w.queued = nil, 0
	if w.f != nil && !w.running {
		w.f.Close()
		w.f = nil
	}
	w.segs, w.total = nil, 0
	room := w.clearBehindLocked()
	w.mu.Unlock()
	if room && w.onRoom != nil {
		w.onRoom()
	}
	// (the goroutine makes nothing more once it sees removed: this waits
	// only for directory I/O under way, never holding mu)
	w.dirMu.Lock()
	err := os.RemoveAll(w.dir)
	w.dirMu.Unlock()
	w.unregister()
	if err != nil {
		return fmt.Errorf("remove output of %s: %w", w.id, err)
	}
	return nil
}

func (w *Writer) unregister() {
	w.s.mu.Lock()
	if w.s.open[w.id] == w {
		delete(w.s.open, w.id)
	}
	w.s.mu.Unlock()
}

// clearBehindLocked ends the Behind state, reporting whether it was on.
func (w *Writer) clearBehindLocked() bool {
	if !w.behind {
		return false
	}
	w.behind = false
	if w.stallT != nil {
		w.stallT.Stop()
		w.stallT = nil
	}
	return true
}

// fail ends the job's disk output with err: what is queued is dropped
// (the ring still has it), the file closed.
func (w *Writer) fail(err error) {
	w.mu.Lock()
	if w.err != nil || w.removed {
		w.mu.Unlock()
		return
	}
	w.err = err
	w.queue, w.queued = nil, 0
	if w.f != nil && !w.running {
		w.f.Close()
		w.f = nil
	}
	room := w.clearBehindLocked()
	w.mu.Unlock()
	w.s.NoteError(w.id, err)
	if room && w.onRoom != nil {
		w.onRoom()
	}
}

// run writes the record of the job as spawned (Begin) first, then the
// queue until it is empty, then the info, then exits.
func (w *Writer) run() {
	hdrs := make([]byte, batchFrames*headerLen)
	var iovs [][]byte
	var batch []frame
	for {
		w.mu.Lock()
		if rec := w.begun; rec != nil && w.err == nil && !w.removed {
			w.begun = nil
			w.mu.Unlock()
			if err := w.writeInfo(rec); err != nil {
				w.fail(err)
			}
			continue
		}
		if w.err != nil || w.removed || len(w.queue) == 0 {
			info := w.info
			w.info = nil
			if w.err == nil && !w.removed && info != nil {
				w.mu.Unlock()
				err := w.writeInfo(info)
				w.mu.Lock()
				if err != nil && w.err == nil && !w.removed {
					w.mu.Unlock()
					w.fail(err)
					w.mu.Lock()
				}
				if w.info != nil || len(w.queue) > 0 {
					w.mu.Unlock()
					continue // (more came meanwhile)
				}
			}
			if w.f != nil && (w.idleClose || w.err != nil || w.removed) {
				w.f.Close()
				w.f = nil
				w.idleClose = false
			}
			w.running = false
			w.mu.Unlock()
			return
		}
		// One batch: the frames that fit in the current segment (at least
		// one), at most batchMax bytes, written as they are queued (their
		// headers beside them) by one writev.
		if first := &w.queue[0]; !w.fitsLocked(first.size()) {
			off, size := first.off, first.size()
			w.mu.Unlock()
			if err := w.prepare(off, size); err != nil {
				w.fail(err)
			}
			continue
		}
		f, room := w.f, w.s.cfg.SegmentBytes-w.segs[len(w.segs)-1].size
		batch = batch[:0]
		var size int64
		for _, fr := range w.queue[:min(len(w.queue), batchFrames)] {
			if len(batch) > 0 && (size+fr.size() > room || size+fr.size() > batchMax) {
				break
			}
			batch = append(batch, fr)
			size += fr.size()
		}
		w.mu.Unlock()
		// (the frames' data never changes: read without the lock)
		iovs = iovs[:0]
		for n := range batch {
			h := hdrs[n*headerLen : (n+1)*headerLen]
			putHeader(h, &batch[n])
			iovs = append(iovs, h)
			if len(batch[n].data) > 0 {
				iovs = append(iovs, batch[n].data)
			}
		}
		_, err := writev(f, iovs)
		clear(iovs) // (let the payloads go)
		clear(batch)
		w.mu.Lock()
		if w.err != nil || w.removed {
			w.mu.Unlock()
			continue
		}
		if err != nil {
			// (a partial frame would end the segment for readers: cut it)
			_ = f.Truncate(w.segs[len(w.segs)-1].size)
			w.mu.Unlock()
			w.fail(fmt.Errorf("write output of %s: %w", w.id, err))
			continue
		}
		w.segs[len(w.segs)-1].size += size
		w.total += size
		w.queue = slices.Delete(w.queue, 0, len(batch))
		if len(w.queue) == 0 {
			w.queue = nil // (let the payloads go)
		}
		w.queued -= size
		room2 := w.queued < lowWater && w.clearBehindLocked()
		w.mu.Unlock()
		w.s.noteBytes(int(size))
		if room2 && w.onRoom != nil {
			w.onRoom()
		}
	}
}

// fitsLocked says whether the current segment is open and can take a
// frame of size bytes (else prepare makes it so).
func (w *Writer) fitsLocked(size int64) bool {
	n := len(w.segs)
	return w.ready && w.f != nil && n > 0 && (w.segs[n-1].size == 0 || w.segs[n-1].size+size <= w.s.cfg.SegmentBytes)
}

// prepare makes sure the current segment can take a frame at off of
// size bytes: the directory exists, a segment is open, a full one
// replaced by a new one (the oldest deleted to stay under MaxBytes).
// Run by the goroutine without mu (Append, Read and the rest never wait
// for this I/O), under dirMu; nothing when the writer failed or was
// removed meanwhile.
func (w *Writer) prepare(off, size int64) error {
	w.dirMu.Lock()
	defer w.dirMu.Unlock()
	w.mu.Lock()
	gone := w.err != nil || w.removed
	ready, segs, total, cur := w.ready, slices.Clone(w.segs), w.total, w.f
	w.mu.Unlock()
	if gone {
		return nil
	}
	if err := w.readyDir(ready); err != nil {
		return err
	}
	cfg := &w.s.cfg
	if n := len(segs); n > 0 && (segs[n-1].size == 0 || segs[n-1].size+size <= cfg.SegmentBytes) {
		if cur != nil {
			return nil
		}
		f, err := openNoFollow(filepath.Join(w.dir, segName(segs[n-1].start)), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("open output of %s: %w", w.id, err)
		}
		w.publish(f, 0, 0, nil)
		return nil
	}
	// A new segment, starting at off.
	if cur != nil {
		w.mu.Lock()
		w.f = nil
		w.mu.Unlock()
		cur.Close()
	}
	dropped, droppedSize := 0, int64(0)
	for ; dropped < len(segs) && total-droppedSize+cfg.SegmentBytes > cfg.MaxBytes; dropped++ {
		old := segs[dropped]
		if err := os.Remove(filepath.Join(w.dir, segName(old.start))); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.publish(nil, dropped, droppedSize, nil)
			return fmt.Errorf("rotate output of %s: %w", w.id, err)
		}
		droppedSize += old.size
	}
	f, err := openNoFollow(filepath.Join(w.dir, segName(off)), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		w.publish(nil, dropped, droppedSize, nil)
		return fmt.Errorf("create output segment of %s: %w", w.id, err)
	}
	w.publish(f, dropped, droppedSize, &seg{start: off})
	return nil
}

// publish records what prepare did: f the current segment (nil: left
// as it is), the first dropped segments deleted (droppedSize bytes), add
// a new last segment. A writer removed or failed meanwhile closes f.
func (w *Writer) publish(f *os.File, dropped int, droppedSize int64, add *seg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.removed || w.err != nil {
		if f != nil {
			f.Close()
		}
		return
	}
	w.segs = w.segs[dropped:]
	w.total -= droppedSize
	if add != nil {
		w.segs = append(w.segs, *add)
	}
	if f != nil {
		w.f = f
	}
}

// writeInfo records rec in the job's directory (temp file, rename).
func (w *Writer) writeInfo(rec *record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("record output info of %s: %w", w.id, err)
	}
	w.dirMu.Lock()
	defer w.dirMu.Unlock()
	w.mu.Lock()
	gone, ready := w.err != nil || w.removed, w.ready
	w.mu.Unlock()
	if gone {
		return nil
	}
	if err := w.readyDir(ready); err != nil {
		return err
	}
	tmp := filepath.Join(w.dir, "."+infoFile+".tmp")
	_ = os.Remove(tmp)
	f, err := openNoFollow(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("record output info of %s: %w", w.id, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(w.dir, infoFile))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("record output info of %s: %w", w.id, err)
	}
	return nil
}

// readyDir makes the job's directory unless ready says it exists
// (without mu, under dirMu).
func (w *Writer) readyDir(ready bool) error {
	if ready {
		return nil
	}
	if err := w.makeDir(); err != nil {
		return err
	}
	w.mu.Lock()
	w.ready = true
	w.mu.Unlock()
	return nil
}

// makeDir makes the job's directory (an earlier job's replaced: fresh),
// without mu, under dirMu.
func (w *Writer) makeDir() error {
	if h := w.s.dirHook; h != nil {
		h(w.id)
	}
	if w.fresh {
		if err := os.RemoveAll(w.dir); err != nil {
			return fmt.Errorf("replace output of an earlier job %s: %w", w.id, err)
		}
	}
	err := os.Mkdir(w.dir, 0o700)
	if errors.Is(err, os.ErrExist) {
		if fi, lerr := os.Lstat(w.dir); lerr == nil && !fi.IsDir() {
			// (a symlink or file in its place: removed, not followed)
			if err = os.Remove(w.dir); err == nil {
				err = os.Mkdir(w.dir, 0o700)
			}
		} else if lerr == nil {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("create output directory of %s: %w", w.id, err)
	}
	return nil
}
