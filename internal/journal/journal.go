// Package journal persists the supervisor's job table so that a restarted
// supervisor knows every job's fate and can find the processes a dead
// predecessor left behind.
//
// The journal is one JSON file, replaced atomically on every write (temp
// file in the same directory, fsync, rename, fsync of the directory), so a
// crash at any moment leaves either the previous or the new complete
// version. A file that cannot be read as a journal of this version is moved
// aside under a timestamped name, never overwritten. The package also holds
// the state directory's exclusive owner lock.
//
// A job's Record (record.go) is the one model of its durable state: the
// engine (internal/jobs) takes its jobs' records and restores jobs from
// them; this package keeps them, in the JSON format its tests hold
// (testdata). It imports nothing of the engine, and knows nothing about
// processes: deciding what a record means on restart is the caller's job.
package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// MaxFileBytes bounds the journal file read at start; a larger file is
// treated as corrupt. Save and SaveEncoded never write one (ErrTooLarge):
// the previous journal, which Load accepts, stays.
const MaxFileBytes = 256 << 20

// ErrTooLarge is returned by Save and SaveEncoded for a document larger
// than MaxFileBytes: Load would refuse it (and move it aside, losing
// every record), so it is not written.
var ErrTooLarge = fmt.Errorf("journal document larger than %d bytes (it could not be read back)", MaxFileBytes)

// Journal reads and writes one journal file.
type Journal struct {
	path string
	// Writes and Failures count Save calls that succeeded and failed.
	Writes   atomic.Uint64
	Failures atomic.Uint64
	// tempName names the temp file of a write (nil: randomTempName;
	// tests choose names to plant things at).
	tempName func(path string) string

	// mu serializes writes; buf is the file being written, kept between
	// writes (the journal is rewritten up to several times a second).
	mu  sync.Mutex
	buf bytes.Buffer
}

// New returns a journal at path. Nothing is read or written yet.
func New(path string) *Journal { return &Journal{path: path} }

// Path returns the journal's path.
func (j *Journal) Path() string { return j.path }

// CorruptError reports a journal that could not be used and where it was
// moved.
type CorruptError struct {
	Path, MovedTo string
	Err           error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal %s is unusable (%v); moved aside to %s", e.Path, e.Err, e.MovedTo)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Load reads the journal. A missing file is an empty journal. A file that
// is not a valid journal of this version is renamed to
// <path>.corrupt-<UTC timestamp> and reported as a *CorruptError together
// with an empty journal: the caller logs it and starts anyway. Load is
// recovery: only the supervisor holding the state directory's lock calls
// it (it removes the temp files of writes it takes for interrupted ones);
// anyone else reads with Read.
func (j *Journal) Load() (*File, error) {
	// A crash during Save can leave its temp file behind; it was never
	// the journal, so it goes.
	removeOwnTemps(j.path)
	// (O_NONBLOCK: a FIFO planted there would block the start until a
	// writer came; opened so, it reads as empty, and is moved aside.)
	f, err := openNoFollow(j.path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return &File{Version: Version}, nil
	}
	if transient(err) {
		return nil, fmt.Errorf("open journal %s: %w", j.path, err) // (try again later; nothing is moved)
	}
	if err != nil {
		// Unreadable (permissions, a symlink, ...): the next write would
		// replace the only record of the jobs it names, so it is moved
		// aside like a corrupt one, or nothing is written at all.
		return j.moveAside(fmt.Errorf("open: %w", err))
	}
	// Another user's journal (planted while the directory was open to
	// them) would choose services to run and groups to terminate.
	foreign := ownedByOther(f)
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	f.Close()
	if transient(err) {
		return nil, fmt.Errorf("read journal %s: %w", j.path, err)
	}
	if err != nil {
		return j.moveAside(fmt.Errorf("read: %w", err)) // (a directory, say)
	}
	doc, perr := Parse(b)
	if foreign != nil {
		doc, perr = nil, foreign
	}
	if perr == nil {
		if len(doc.Dropped) > 0 {
			// (the next write leaves them out: the file as read is kept)
			doc.KeptAt = j.path + ".partial-" + time.Now().UTC().Format("20060102T150405.000Z")
			if err := createExclusive(doc.KeptAt, b); err != nil {
				doc.KeptAt = ""
			}
		}
		return doc, nil
	}
	return j.moveAside(perr)
}

// Read reads the journal at path as it is, for someone looking at it
// while a supervisor may be writing it (a test, a tool): unlike Load it
// changes nothing (no temp file removed, nothing moved aside, no partial
// copy kept). A missing file is an error; so is a file of another user.
func Read(path string) (*File, error) {
	f, err := openNoFollow(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	defer f.Close()
	if err := ownedByOther(f); err != nil {
		return nil, fmt.Errorf("read journal %s: %w", path, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read journal %s: %w", path, err)
	}
	doc, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("read journal %s: %w", path, err)
	}
	return doc, nil
}

// transient reports whether err, from opening or reading the journal,
// says nothing about the file (out of descriptors or memory, an I/O
// error): such a journal is not moved aside, the load fails.
func transient(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.EAGAIN, syscall.EINTR, syscall.EIO} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// moveAside renames an unusable journal (why: perr) out of the way and
// returns an empty one with a *CorruptError; if it cannot be renamed, an
// error that is not a *CorruptError: the caller must not write the
// journal then (a write would replace it).
func (j *Journal) moveAside(perr error) (*File, error) {
	moved, err := moveAsideTo(j.path, ".corrupt-")
	if err != nil {
		return nil, fmt.Errorf("journal %s is unusable (%v) and could not be moved aside: %w", j.path, perr, err)
	}
	return &File{Version: Version}, &CorruptError{Path: j.path, MovedTo: moved, Err: perr}
}

// ownedByOther says why f cannot be trusted if another user owns it.
func ownedByOther(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("owned by uid %d, not by us (uid %d)", st.Uid, os.Geteuid())
	}
	return nil
}

// Save replaces the journal with doc atomically (doc.OpenClaw as given:
// nil writes none).
func (j *Journal) Save(doc *File) error {
	j.mu.Lock() // one writer at a time, as SaveEncoded
	defer j.mu.Unlock()
	doc.Version = Version
	d := *doc
	if d.OpenClaw == nil {
		d.OpenClaw = []OpenClawJob{} // (OpenClaw's readers want an array)
	}
	b, err := json.Marshal(&d)
	if err != nil {
		j.Failures.Add(1)
		return fmt.Errorf("encode journal: %w", err)
	}
	if len(b) > MaxFileBytes {
		j.Failures.Add(1)
		return fmt.Errorf("write %s: %w", j.path, ErrTooLarge)
	}
	if err := j.replace(b); err != nil {
		j.Failures.Add(1)
		return err
	}
	j.Writes.Add(1)
	return nil
}

// SaveEncoded replaces the journal atomically with a document made of
// hdr's fields (its OpenClaw view included) and records, each an already
// JSON-encoded Record (so that a caller can encode unchanging records
// once).
func (j *Journal) SaveEncoded(hdr *File, records [][]byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	oc, err := encodeOpenClaw(hdr.OpenClaw)
	if err != nil {
		j.Failures.Add(1)
		return fmt.Errorf("encode journal: %w", err)
	}
	b := &j.buf
	b.Reset()
	defer func() {
		if b.Cap() > 64<<20 {
			*b = bytes.Buffer{} // do not keep a huge one
		}
	}()
	size := 320 + len(oc) + 6*len(hdr.InstanceID) + 6*len(hdr.IntentsGeneration) // (an upper bound: escapes)
	for _, r := range records {
		size += len(r) + 1
	}
	if size > MaxFileBytes {
		j.Failures.Add(1)
		return fmt.Errorf("write %s: %w", j.path, ErrTooLarge)
	}
	b.Grow(size)
	encodeOpen(b, hdr, oc)
	for i, r := range records {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(r)
	}
	b.WriteString("]}")
	if err := j.replace(b.Bytes()); err != nil {
		j.Failures.Add(1)
		return err
	}
	j.Writes.Add(1)
	return nil
}

// replace writes the journal file (see WriteFileAtomic).
func (j *Journal) replace(data []byte) error {
	_, err := replaceFile(j.path, data, j.tempName)
	return err
}

// Lock is an exclusive owner lock on a state directory.
type Lock struct {
	f     *os.File
	owner string // the first line: "pid N instance I"
	// PreviousStopped says the previous holder stopped cleanly
	// (MarkStopped): every job it ran had ended.
	PreviousStopped bool
	// WriteErr is why the holder's line could not be written (nil: it
	// was).
	WriteErr error
}

// HeldError says another live process owns the state directory.
type HeldError struct {
	Path  string
	Owner string // what the holder wrote: "pid N instance I"
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("state directory is in use: %s is locked by %s; stop that supervisor or use another --state-dir", e.Path, e.Owner)
}

// Acquire takes the exclusive lock <dir>/lock (flock, non-blocking) and
// records pid and instance in it. A lock left by a dead process is free:
// the kernel releases flocks when their holder dies. What the previous
// holder noted there (see MarkStopped) is in the Lock's PreviousStopped.
func Acquire(dir, instance string) (*Lock, error) {
	path := filepath.Join(dir, "lock")
	f, err := openNoFollow(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 256))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			owner, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
			if owner == "" {
				owner = "another process"
			}
			return nil, &HeldError{Path: path, Owner: owner}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	l := &Lock{f: f, owner: "pid " + strconv.Itoa(os.Getpid()) + " instance " + instance + "\n"}
	if b, err := io.ReadAll(io.LimitReader(f, 256)); err == nil {
		l.PreviousStopped = slices.Contains(strings.Split(string(b), "\n"), stoppedLine)
	}
	// The clean stop stays noted until ClearStopped: a start that fails
	// before any job of its own started leaves it for the next one.
	note := l.owner
	if l.PreviousStopped {
		note += stoppedLine + "\n"
	}
	if err := l.rewrite(note); err != nil {
		l.WriteErr = err
	}
	return l, nil
}

// rewrite replaces the lock file's content with s.
func (l *Lock) rewrite(s string) error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	if _, err := l.f.WriteAt([]byte(s), 0); err != nil {
		return err
	}
	return l.f.Sync()
}

// ClearStopped removes the previous holder's clean-stop note (see
// PreviousStopped): call it before this holder starts anything a crash
// would leave behind. An error means a crash of this holder could pass
// for a clean stop.
func (l *Lock) ClearStopped() error {
	if l == nil || l.f == nil || !l.PreviousStopped {
		return nil
	}
	return l.rewrite(l.owner)
}

// stoppedLine is the lock file's last line after a clean stop.
const stoppedLine = "stopped"

// MarkStopped notes in the lock file that its holder stopped cleanly,
// every job it ran ended: the next holder's PreviousStopped. Call it last,
// before Release.
func (l *Lock) MarkStopped() error {
	if l == nil || l.f == nil {
		return nil
	}
	st, err := l.f.Stat()
	if err != nil {
		return err
	}
	if _, err := l.f.WriteAt([]byte(stoppedLine+"\n"), st.Size()); err != nil {
		return err
	}
	return l.f.Sync()
}

// Release drops the lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	return err
}
