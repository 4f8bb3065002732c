package journal

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The journal may live in a directory others can write to, if it is
// sticky (as /tmp is: --journal /tmp/exec-supervisor-journal.json, the
// path OpenClaw's Node supervisor uses): there others cannot rename or
// remove our files, but they can make any name we have not made yet, a
// symlink to a file of ours elsewhere, say. So every file is opened
// without following a symlink (O_NOFOLLOW); a file that is created is
// created exclusively (O_EXCL: a name someone took is not ours), under
// a name they cannot guess (128 random bits) when it is a temp file;
// what is read back must be ours (see Load); leftovers are removed only
// if ours; and a rename never follows a symlink at its destination. The
// caller refuses a journal path whose existing file is not ours before
// anything is read (a start as root could otherwise move another user's
// journal aside).

// WriteFileAtomic writes data to path so that path always holds either its
// old or its new complete content: temp file in the same directory (mode
// 0600, made exclusively under a random name), fsync, rename, fsync of
// the directory.
func WriteFileAtomic(path string, data []byte) error {
	_, err := replaceFile(path, data, nil)
	return err
}

// tempPrefix starts the name of every temp file of path.
func tempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

// randomTempName is a temp file name beside path that nobody can guess.
func randomTempName(path string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // (never fails on Linux; it panics if it cannot)
	return filepath.Join(filepath.Dir(path), tempPrefix(path)+hex.EncodeToString(b[:]))
}

// maxTempTries bounds the names tried for a temp file: each taken one is
// someone else's file (or a leftover of ours), never opened.
const maxTempTries = 8

// ErrTempNamesTaken says every temp file name tried was taken: something
// else makes files under those names.
var ErrTempNamesTaken = fmt.Errorf("%d temp file names in a row were taken", maxTempTries)

// createTemp creates a temp file beside path, exclusively, mode 0600,
// under a name from name (nil: randomTempName).
func createTemp(path string, name func(string) string) (*os.File, error) {
	if name == nil {
		name = randomTempName
	}
	for range maxTempTries {
		f, err := openNoFollow(name(path), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, ErrTempNamesTaken
}

// replaceFile is WriteFileAtomic (temp names from name), also saying
// whether the rename was done (an error after it, syncing the directory,
// leaves path with the new content).
func replaceFile(path string, data []byte, name func(string) string) (renamed bool, err error) {
	dir := filepath.Dir(path)
	tmp, err := createTemp(path, name)
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	tname := tmp.Name()
	fail := func(err error) (bool, error) {
		tmp.Close()
		os.Remove(tname)
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	// (rename(2) replaces what is at path, a symlink included, without
	// following it; in a sticky directory it fails on another user's)
	if err := os.Rename(tname, path); err != nil {
		os.Remove(tname)
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return true, fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return true, fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return true, nil
}

// removeOwnTemps removes the temp files a crash during a write to path
// left: those that are regular files of ours (in a shared directory,
// anything else under such a name is someone else's).
func removeOwnTemps(path string) {
	olds, _ := filepath.Glob(filepath.Join(filepath.Dir(path), tempPrefix(path)+"*"))
	for _, o := range olds {
		if fi, err := os.Lstat(o); err == nil && fi.Mode().IsRegular() && ownedByUs(fi) {
			os.Remove(o)
		}
	}
}

// createExclusive writes data to a new file at path (mode 0600), never
// through a symlink or into a file that exists.
func createExclusive(path string, data []byte) error {
	f, err := openNoFollow(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// ownedByUs reports whether fi is a file of our effective uid.
func ownedByUs(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
}

// moveAsideTo renames path to path+suffix+<UTC time> (see
// renameNoReplace) and returns the name it took.
func moveAsideTo(path, suffix string) (string, error) {
	return renameNoReplace(path, path+suffix+time.Now().UTC().Format("20060102T150405.000Z"))
}

// renameNoReplace renames path to moved, never replacing what is there
// (someone may have made that name first): then to moved with a random
// tail. It returns the name taken.
func renameNoReplace(path, moved string) (string, error) {
	name := moved
	for try := 0; ; try++ {
		err := unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, name, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			// (a filesystem without RENAME_NOREPLACE: a name nobody can
			// guess instead)
			name = randomSibling(moved)
			err = os.Rename(path, name)
		}
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, unix.EEXIST) || try == maxTempTries {
			return "", err
		}
		name = randomSibling(moved)
	}
}

// randomSibling is name with a random tail.
func randomSibling(name string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}
