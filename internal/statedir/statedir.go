// Package statedir holds where the supervisor and its clients keep
// their files (the default runtime and state directories, the token
// file) and the checks that decide whether a directory or file may be
// trusted: ours (or root's), not open to others, no symlink followed.
package statedir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// RuntimeDir is the directory of the default ipc endpoints:
// $XDG_RUNTIME_DIR/exec-supervisor when XDG_RUNTIME_DIR is set, else
// /tmp/exec-supervisor-<uid>.
func RuntimeDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "exec-supervisor")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("exec-supervisor-%d", os.Getuid()))
}

// EnsurePrivate creates dir with mode 0700 if missing and refuses one
// that is a symlink, is owned by another user, or is open to others.
func EnsurePrivate(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create private directory %s: %w", dir, err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", dir, err)
	}
	return checkPrivateInfo(dir, fi)
}

// UnsafePathError says a path that would be trusted (a socket or state
// directory, a token file) is not safe to use: someone other than us (or
// root) could change it or what is in it. Err says how.
type UnsafePathError struct {
	Path string
	Err  error
}

func (e *UnsafePathError) Error() string { return e.Err.Error() }

func (e *UnsafePathError) Unwrap() error { return e.Err }

// Unsafe returns an *UnsafePathError for path: "<path> <problem>".
func Unsafe(path, problem string, args ...any) error {
	return &UnsafePathError{Path: path, Err: fmt.Errorf("%s "+problem, append([]any{path}, args...)...)}
}

// CheckPrivate is EnsurePrivate's check alone (it creates nothing).
func CheckPrivate(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", dir, err)
	}
	return checkPrivateInfo(dir, fi)
}

func checkPrivateInfo(dir string, fi os.FileInfo) error {
	if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return Unsafe(dir, "is not a directory (or is a symlink): refusing to use it")
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Geteuid() {
		return Unsafe(dir, "is owned by uid %d, not by us (uid %d): refusing to use it", st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return Unsafe(dir, "has mode %o; it must be 0700 (chmod 700 %s)", UnixMode(fi), dir)
	}
	return nil
}

// UnixMode is fi's mode as chmod and ls show it, in octal with %o:
// permissions with the sticky, setgid and setuid bits (1777 for /tmp;
// os.FileMode.Perm leaves those out).
func UnixMode(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Mode & 0o7777
	}
	m := uint32(fi.Mode().Perm())
	if fi.Mode()&os.ModeSticky != 0 {
		m |= 0o1000
	}
	if fi.Mode()&os.ModeSetgid != 0 {
		m |= 0o2000
	}
	if fi.Mode()&os.ModeSetuid != 0 {
		m |= 0o4000
	}
	return m
}

// Check refuses a directory whose contents someone other than us (or
// root) could change: a symlink or not a directory, owned by another user,
// or writable by group or others (unless sticky, as /tmp is, when sticky is
// allowed: then nobody else can rename or remove our files in it). It
// creates nothing.
func Check(dir string, stickyOK bool) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", dir, err)
	}
	if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return Unsafe(dir, "is not a directory (or is a symlink): refusing to use it")
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return Unsafe(dir, "is owned by uid %d, not by us (uid %d) or root: refusing to use it", st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 && !(stickyOK && fi.Mode()&os.ModeSticky != 0) {
		if fi.Mode()&os.ModeSticky != 0 {
			// (sticky: others cannot replace our files, but they can
			// take any name we have not made yet)
			return Unsafe(dir, "has mode %o: others can write to it (sticky: they cannot replace our files there, but can take the names of those not made yet); use a directory of your own", UnixMode(fi))
		}
		if stickyOK {
			return Unsafe(dir, "has mode %o: others could replace what is in it (chmod go-w %s; or chmod +t %s: sticky, as /tmp is)", UnixMode(fi), dir, dir)
		}
		return Unsafe(dir, "has mode %o: others could replace what is in it (chmod go-w %s)", UnixMode(fi), dir)
	}
	return nil
}

// CheckPeer is Check (sticky allowed) for a client about to connect
// to a socket in dir, except that a directory owned by another user (a
// supervisor that lets us in with --allow-uid/--allow-gid) is accepted too
// when nobody but root or us could have made it: it is writable by its
// owner only, and its parent is root's or ours and writable by nobody
// else, sticky or not (in /tmp, anyone could have made it to receive our
// spawns).
func CheckPeer(dir string) error {
	err := Check(dir, true)
	if err == nil {
		return nil
	}
	fi, lerr := os.Lstat(dir)
	if lerr != nil || fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() || st.Uid == 0 {
		return err // (refused for another reason)
	}
	// The way to it must be beyond anyone else's reach too (a directory
	// others can rename things in could hold a look-alike), symlinks
	// resolved: the parent without the sticky exception, the rest with.
	real, rerr := filepath.EvalSymlinks(filepath.Dir(dir))
	perr := rerr
	if rerr == nil {
		perr = Check(real, false)
		for d := filepath.Dir(real); perr == nil; d = filepath.Dir(d) {
			perr = Check(d, true)
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	if perr != nil {
		return &UnsafePathError{Path: dir, Err: fmt.Errorf("%s is owned by uid %d, not by us (uid %d) or root, and anyone could have made it there (%w): refusing to use it; a supervisor shared with other users keeps its sockets in a directory of its own under a root-owned one, e.g. /run/exec-supervisor", dir, st.Uid, os.Geteuid(), perr)}
	}
	return nil
}

// CheckOwnFile refuses a file (open as f, at path) that is not owned by us:
// what the supervisor reads back (journal, token) must be its own.
func CheckOwnFile(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return Unsafe(path, "is owned by uid %d, not by us (uid %d): refusing to trust it", st.Uid, os.Geteuid())
	}
	return nil
}

// Default is the default state directory:
// $XDG_STATE_HOME/exec-supervisor, else ~/.local/state/exec-supervisor, else
// <RuntimeDir>/state.
func Default() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "exec-supervisor")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" && h != "/" {
		return filepath.Join(h, ".local", "state", "exec-supervisor")
	}
	return filepath.Join(RuntimeDir(), "state")
}

// TokenFile is where the supervisor keeps its tcp token by default.
func TokenFile() string { return filepath.Join(Default(), "token") }

// ReadToken reads a token file, refusing symlinks, files readable by
// others and files owned by another user (who would know the token).
func ReadToken(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	if err := CheckOwnFile(f, path); err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %o; it must not be accessible to others (chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("read token %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || len(tok) > 255 {
		return "", fmt.Errorf("token file %s must hold 1..255 bytes", path)
	}
	return tok, nil
}

// ReadTrusted reads the file at path without following a symlink, and
// refuses a file someone else could have written: not a regular file,
// not ours (or root's, when rootOK), or writable by group or others;
// secret also refuses any access by group or others. A file over maxBytes
// is refused too.
func ReadTrusted(path string, secret, rootOK bool, maxBytes int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, Unsafe(path, "is not a regular file: refusing to use it")
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() && !(rootOK && st.Uid == 0) {
		whose := ""
		if rootOK {
			whose = " or root"
		}
		return nil, Unsafe(path, "is owned by uid %d, not by us (uid %d)%s: refusing to trust it", st.Uid, os.Geteuid(), whose)
	}
	if secret && fi.Mode().Perm()&0o077 != 0 {
		return nil, Unsafe(path, "has mode %o; a secret key must not be accessible to others (chmod 600 %s)", fi.Mode().Perm(), path)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, Unsafe(path, "has mode %o: others could change it (chmod go-w %s)", fi.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(maxBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxBytes {
		return nil, fmt.Errorf("%s: more than %d bytes", path, maxBytes)
	}
	return b, nil
}
