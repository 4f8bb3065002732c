package journal

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Intents is the journal's append-only companion: one line per job start,
// or per change a reply must not lose, written before it is acknowledged,
// so that a supervisor that dies before the next journal write (the
// journal is written at most every 100 ms, and each write costs two
// fsyncs) still leaves a record of the job: the next run reports its fate
// and terminates its orphans as it does for a journaled job.
//
// The file is <journal>.intents: a header line naming its generation,
// then one Intent per line, numbered from 1 by Seq within the generation
// (a supervisor that takes over the file goes on numbering). A journal
// document names the generation and the last seq its snapshot covers
// (File.IntentsGeneration, File.IntentsCovered): lines past it are newer
// than the journal, those up to it are not needed any more.
//
// A job start's line is not fsynced (Append: a process crash keeps what
// was written; a power loss takes the processes too), which keeps it at
// one write(2). A change a reply must not lose (a kill, a stop, a start
// of a service: the job's record as it is after it) is appended with
// AppendDurable, which also syncs, one sync shared by all who wait at
// once: the reply no longer waits for a rewrite of the whole journal.
//
// After each journal write that landed, the file says itself how far it
// is covered: a line {"covered":N} (so that covered lines are never taken
// for new ones, even when the journal is lost later and names no
// generation, and a successor numbers on past N). Once every line is
// covered, the file is cut back to its header and that line; while new
// lines keep coming, it is rewritten without the covered ones when it
// passes intentsCompactBytes.
type Intents struct {
	path string
	gen  string

	mu      sync.Mutex
	f       *os.File // O_APPEND; nil while the file cannot be written
	closed  bool
	seq     uint64 // the last line's
	covered uint64 // the highest seq a landed journal write covered
	marked  uint64 // the highest covered mark in the file
	hdrLen  int64  // the header line's length in the file
	size    int64
	pending []intentLine // lines not covered by a journal write, by seq
	durable uint64       // the highest seq known to be on the disk

	syncMu sync.Mutex // one sync at a time (see syncThrough)

	// Failures counts Append calls that did not write their line, and
	// AppendDurable calls whose line could not be synced.
	Failures atomic.Uint64
	// Syncs counts the syncs AppendDurable made (fewer than its calls
	// when they came together).
	Syncs atomic.Uint64
}

type intentLine struct {
	seq  uint64
	line []byte // with its newline
}

// Intent is one line of the intents file: a job's record when it started.
type Intent struct {
	Seq    uint64 `json:"seq"`
	Record Record `json:"record"`
}

// intentsLine is any line after the header: an Intent, or a covered mark
// ({"covered":N}: a journal write that landed covered the lines up to N).
type intentsLine struct {
	Seq     uint64  `json:"seq"`
	Record  *Record `json:"record"`
	Covered uint64  `json:"covered"`
}

// intentsHeader is the intents file's first line.
type intentsHeader struct {
	Intents    int    `json:"intents"` // IntentsVersion
	Generation string `json:"generation"`
}

// IntentsVersion is the intents file format version.
const IntentsVersion = 1

// MaxIntentsBytes bounds the intents file read at start: a larger one is
// moved aside (it is compacted long before it could grow so large).
const MaxIntentsBytes = 64 << 20

// markRoom is what an append leaves free below MaxIntentsBytes for the
// covered mark that follows it.
const markRoom = 64

// intentsCompactBytes is the size past which the file is rewritten
// without its covered lines.
const intentsCompactBytes = 1 << 20

// IntentsPath is where the intents of the journal at journalPath live.
func IntentsPath(journalPath string) string { return journalPath + ".intents" }

// IntentsReport is what OpenIntents found in the file it took over.
type IntentsReport struct {
	// Generation and Intents are the file's (no lines: none, or a new
	// file); Covered is the highest covered mark in it (see Uncovered).
	Generation string
	Intents    []Intent
	Covered    uint64
	// Dropped says which lines were left out as invalid; Torn is set when
	// the last line was cut short (a write the crash interrupted).
	Dropped []string
	Torn    bool
	// MovedTo is where an unusable file was moved (a new one was started),
	// and Why why it was unusable.
	MovedTo string
	Why     error
}

// OpenIntents takes over the intents file at path: it reads the lines a
// previous run left (reported, for recovery), keeps them until a journal
// write covers them, and opens the file for appending. A missing file is
// created; one that cannot be used is moved aside (reported) and a new
// one started.
//
// A read that failed for a reason that says nothing about the file (out
// of descriptors or memory, EIO) returns no Intents and an error: the
// caller must not start (the lines it did not read would be lost). Any
// other error returns usable Intents with the error: the file cannot be
// written for now (Append fails, Covered tries again), but journal
// writes still name its generation and cover what was read, so that no
// run replays those lines again.
func OpenIntents(path string) (*Intents, IntentsReport, error) {
	var rep IntentsReport
	removeOwnTemps(path) // (a rewrite the crash interrupted: never the file)
	in := &Intents{path: path}
	b, err := readIntents(path)
	var moveErr error
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil && transient(err):
		return nil, rep, fmt.Errorf("read intents %s: %w", path, err)
	case err == nil:
		hdr, lines, perr := parseIntents(b, &rep)
		if perr == nil {
			in.gen = hdr.Generation
			rep.Generation = hdr.Generation
			in.covered, in.marked, in.seq = rep.Covered, rep.Covered, rep.Covered
			for _, l := range lines {
				if l.seq > in.covered {
					in.pending = append(in.pending, l)
				}
				in.seq = max(in.seq, l.seq)
			}
			in.hdrLen = int64(bytes.IndexByte(b, '\n') + 1)
			in.size = int64(len(b))
			break
		}
		err = perr
		fallthrough
	default:
		rep.Why = err
		rep.Intents, rep.Dropped, rep.Torn = nil, nil, false
		moved, rerr := moveAsideTo(path, ".corrupt-")
		if rerr != nil {
			moveErr = fmt.Errorf("intents %s are unusable (%v) and could not be moved aside: %w", path, err, rerr)
		} else {
			rep.MovedTo = moved
		}
	}
	if in.gen == "" {
		// A new file: a generation of its own, so that a journal naming
		// another one (a file removed or moved aside since) covers none
		// of its lines.
		if in.gen, err = newGeneration(); err != nil {
			return nil, rep, err
		}
		in.size = 0
		if moveErr != nil {
			return in, rep, moveErr
		}
		return in, rep, in.rewriteLocked()
	}
	if rep.Torn || len(rep.Dropped) > 0 {
		// (so that the next line does not continue a cut one)
		return in, rep, in.rewriteLocked()
	}
	f, err := openNoFollow(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return in, rep, fmt.Errorf("open intents %s: %w", path, err)
	}
	in.f = f
	return in, rep, nil
}

// Regenerate gives the file a new generation (rewritten, with the lines
// not covered yet): for a file whose journal does not name it (the
// journal was lost or moved aside since), so that no journal written
// before, restored later, can claim to cover the lines written from now
// on.
func (in *Intents) Regenerate() error {
	gen, err := newGeneration()
	if err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.gen = gen
	return in.rewriteLocked()
}

// newGeneration returns a random generation name.
func newGeneration() (string, error) {
	var g [8]byte
	if _, err := rand.Read(g[:]); err != nil {
		return "", fmt.Errorf("intents generation: %w", err)
	}
	return hex.EncodeToString(g[:]), nil
}

// NumberFrom makes the next line's seq follow seq at least: the journal
// on disk covers the lines of this generation up to seq, and a file
// truncated since (or whose last lines were dropped) no longer says how
// far numbering went.
func (in *Intents) NumberFrom(seq uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.seq = max(in.seq, seq)
}

// readIntents reads the file at path, refusing what is not a regular
// file of ours, or too large.
func readIntents(path string) ([]byte, error) {
	f, err := openNoFollow(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := ownedByOther(f); err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxIntentsBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxIntentsBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxIntentsBytes)
	}
	return b, nil
}

// parseIntents reads an intents file: an unusable header is an error,
// an invalid line is left out (reported in rep), a last line without its
// newline is a write the crash cut short.
func parseIntents(b []byte, rep *IntentsReport) (intentsHeader, []intentLine, error) {
	var hdr intentsHeader
	first, rest, ok := bytes.Cut(b, []byte{'\n'})
	if !ok {
		return hdr, nil, errors.New("no header line")
	}
	if err := json.Unmarshal(first, &hdr); err != nil {
		return hdr, nil, fmt.Errorf("not an intents file: %w", err)
	}
	if hdr.Intents != IntentsVersion || hdr.Generation == "" || len(hdr.Generation) > 64 {
		return hdr, nil, fmt.Errorf("unknown intents header %.100q (this supervisor writes version %d)", first, IntentsVersion)
	}
	var lines []intentLine
	var last uint64
	for n := 2; len(rest) > 0; n++ {
		line, after, ok := bytes.Cut(rest, []byte{'\n'})
		rest = after
		if !ok {
			rep.Torn = true
			break
		}
		var l intentsLine
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		why := ""
		if err := dec.Decode(&l); err != nil {
			why = fmt.Sprintf("line %d: %v", n, err)
		} else if l.Record == nil && l.Seq == 0 && l.Covered > 0 {
			rep.Covered = max(rep.Covered, l.Covered) // a covered mark
			continue
		} else if l.Record == nil || l.Covered != 0 {
			why = fmt.Sprintf("line %d: neither an intent nor a covered mark", n)
		} else if l.Seq <= last {
			why = fmt.Sprintf("line %d: seq %d does not follow %d", n, l.Seq, last)
		} else if w := checkRecord(l.Record); w != "" {
			why = fmt.Sprintf("line %d: %s", n, w)
		}
		if why != "" {
			rep.Dropped = append(rep.Dropped, why)
			continue
		}
		last = l.Seq
		rep.Intents = append(rep.Intents, Intent{Seq: l.Seq, Record: *l.Record})
		lines = append(lines, intentLine{seq: l.Seq, line: append(bytes.Clone(line), '\n')})
	}
	return hdr, lines, nil
}

// Generation is the file's generation (journal documents name it).
func (in *Intents) Generation() string { return in.gen }

// Hold runs f with appends held off, passing the seq of the last line
// appended: a journal snapshot taken in f is newer than every line up to
// it, and older than every later line (whose record Append takes after f
// returned), so that a document written from it covers exactly those.
func (in *Intents) Hold(f func(last uint64)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f(in.seq)
}

// Append writes the record rec returns as the next line (one write(2), no
// fsync). rec runs with Hold held off (see Hold); a nil record writes
// nothing.
func (in *Intents) Append(rec func() *Record) error {
	_, err := in.append(rec)
	return err
}

// AppendDurable is Append, returning once the line is on the disk: one
// fdatasync shared by every caller whose line was written before it
// began (group commit: callers that come while a sync runs wait for it,
// then one of them syncs for all). A reply sent after it is kept through
// a power loss, not only a crash.
func (in *Intents) AppendDurable(rec func() *Record) error {
	seq, err := in.append(rec)
	if err != nil || seq == 0 {
		return err
	}
	return in.syncThrough(seq)
}

// append is Append, returning the seq of the line written (0: none).
func (in *Intents) append(rec func() *Record) (uint64, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	r := rec()
	if r == nil {
		return 0, nil
	}
	b, err := json.Marshal(&Intent{Seq: in.seq + 1, Record: *r})
	switch {
	case err != nil:
	case in.closed:
		err = errors.New("intents closed")
	case in.f == nil:
		err = errors.New("intents file cannot be written (see the error logged when that began)")
	case in.size+int64(len(b))+1+markRoom > MaxIntentsBytes:
		// (what the next run could not read: the journal has not been
		// written for a long time)
		err = fmt.Errorf("intents file full (%d bytes): no journal write has covered its lines", in.size)
	}
	if err != nil {
		in.Failures.Add(1)
		return 0, fmt.Errorf("intent of job %.64q: %w", r.JobID, err)
	}
	b = append(b, '\n')
	n, err := in.f.Write(b)
	in.size += int64(n)
	if err != nil {
		in.Failures.Add(1)
		return 0, in.cutShortLocked(err, n)
	}
	in.seq++
	in.pending = append(in.pending, intentLine{seq: in.seq, line: b})
	return in.seq, nil
}

// syncThrough returns once the lines up to seq are on the disk: synced,
// or written into a file that replaced the old one (rewriteLocked syncs
// it). Syncs run one at a time (syncMu); each covers every line written
// before it began, so a caller that waited for one usually finds its
// line covered and returns without a sync of its own.
func (in *Intents) syncThrough(seq uint64) error {
	in.syncMu.Lock()
	defer in.syncMu.Unlock()
	in.mu.Lock()
	f, last, done := in.f, in.seq, in.durable >= seq
	in.mu.Unlock()
	if done {
		return nil
	}
	var serr error
	if f == nil {
		serr = errors.New("intents file cannot be written")
	} else if rc, err := f.SyscallConn(); err != nil {
		serr = err
	} else if err := rc.Control(func(fd uintptr) { serr = unix.Fdatasync(int(fd)) }); err != nil {
		serr = err // (closed by a rewrite meanwhile: see below)
	} else {
		in.Syncs.Add(1)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if serr == nil {
		in.durable = max(in.durable, last)
	}
	if in.durable >= seq {
		return nil // (synced, or rewritten meanwhile)
	}
	in.Failures.Add(1)
	return fmt.Errorf("sync intents %s: %w", in.path, serr)
}

// Covered says that a journal write landed whose snapshot was taken in
// Hold given seq: the lines up to seq are not needed any more. The file
// says so (a covered mark, one write); when that is all of its lines it
// is cut back to its header and the mark, and it is rewritten without
// them when it has grown past intentsCompactBytes. A file that could not
// be written is rewritten (it may be writable again).
func (in *Intents) Covered(seq uint64) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed || seq <= in.marked && in.f != nil {
		return nil
	}
	in.covered = max(in.covered, seq)
	k := 0
	for k < len(in.pending) && in.pending[k].seq <= in.covered {
		k++
	}
	in.pending = append(in.pending[:0], in.pending[k:]...)
	var rerr error
	if in.f == nil || in.size > intentsCompactBytes {
		if rerr = in.rewriteLocked(); rerr == nil || in.f == nil {
			return rerr
		}
		// (the compaction failed: the old file stays, and still gets
		// the mark)
	} else if len(in.pending) == 0 {
		if err := in.f.Truncate(in.hdrLen); err != nil {
			return fmt.Errorf("truncate intents %s: %w", in.path, err)
		}
		in.size = in.hdrLen
	}
	n, err := in.f.Write(in.coveredLine())
	in.size += int64(n)
	if err != nil {
		return errors.Join(rerr, in.cutShortLocked(err, n))
	}
	in.marked = in.covered
	return rerr
}

// cutShortLocked handles a line write that failed with err after n bytes:
// a line cut short must end before the next is appended, so the file is
// rewritten without it (its pending lines and covered mark), or, if that
// fails too, not appended to until a rewrite works.
func (in *Intents) cutShortLocked(err error, n int) error {
	err = fmt.Errorf("write intents %s: %w", in.path, err)
	if n == 0 {
		return err
	}
	if rerr := in.rewriteLocked(); rerr != nil {
		if in.f != nil {
			in.f.Close()
			in.f = nil
		}
		return errors.Join(err, rerr)
	}
	return err
}

// coveredLine is the covered mark of in.covered.
func (in *Intents) coveredLine() []byte {
	return fmt.Appendf(nil, "{\"covered\":%d}\n", in.covered)
}

func (in *Intents) headerLine() []byte {
	b, _ := json.Marshal(intentsHeader{Intents: IntentsVersion, Generation: in.gen})
	return append(b, '\n')
}

// rewriteLocked replaces the file (atomically: temp file, fsync, rename,
// fsync of the directory) with the header and the pending lines, and
// appends to the new file from then on. Until the rename, the old file
// and its descriptor stay as they were.
func (in *Intents) rewriteLocked() error {
	var b bytes.Buffer
	b.Write(in.headerLine())
	hdrLen := int64(b.Len())
	if in.covered > 0 {
		b.Write(in.coveredLine())
	}
	for _, l := range in.pending {
		b.Write(l.line)
	}
	if renamed, err := replaceFile(in.path, b.Bytes(), nil); !renamed {
		return fmt.Errorf("rewrite intents: %w", err)
	}
	// (an error after the rename, syncing the directory, is let go: a
	// power loss may bring the old file back, whose lines are covered
	// or newer.) The new file is in place: the old descriptor writes
	// nowhere now.
	if in.f != nil {
		in.f.Close()
		in.f = nil
	}
	f, err := openNoFollow(in.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open intents %s: %w", in.path, err)
	}
	in.f = f
	in.size, in.hdrLen, in.marked = int64(b.Len()), hdrLen, in.covered
	in.durable = in.seq // (replaceFile synced the file with every line)
	return nil
}

// Writable reports whether lines can be appended now.
func (in *Intents) Writable() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.f != nil && !in.closed
}

// Close closes the file (its lines stay for the next run).
func (in *Intents) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.closed = true
	if in.f == nil {
		return nil
	}
	err := in.f.Close()
	in.f = nil
	return err
}

// Uncovered returns the intents of rep (what OpenIntents read) that no
// journal write covers, oldest first: those past the file's own covered
// mark and, when doc names the file's generation, past doc's
// IntentsCovered. Each is newer than doc's record of its job.
func Uncovered(doc *File, rep IntentsReport) []Intent {
	covered := rep.Covered
	if doc != nil && doc.IntentsGeneration == rep.Generation {
		covered = max(covered, doc.IntentsCovered)
	}
	var out []Intent
	for _, in := range rep.Intents {
		if in.Seq > covered {
			out = append(out, in)
		}
	}
	return out
}
