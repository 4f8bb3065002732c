package notify

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// The notify sockets are made mode 0666 (see Listen) in a directory of the
// supervisor's state directory. Were that directory a symlink planted
// there, they would be made (and stale ones removed) wherever it points;
// owned by someone else, or writable by others, its sockets could be
// replaced by look-alikes. CheckDir and EnsureDir refuse it, as the state
// directory's other paths are refused (no symlink is ever followed).

// CheckDir fails unless dir is missing or is a directory (not a symlink)
// of this user's (or root's) that only its owner can write to. It
// creates nothing.
func CheckDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("notify: inspect %s: %w", dir, err)
	}
	return checkDirInfo(dir, fi)
}

// EnsureDir makes dir (mode 0700) when it is missing, without following
// a symlink, and fails unless it is then a private directory of ours (as
// CheckDir).
func EnsureDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("notify: create %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("notify: inspect %s: %w", dir, err)
	}
	return checkDirInfo(dir, fi)
}

func checkDirInfo(dir string, fi os.FileInfo) error {
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("notify: %s is a symlink: refusing to follow it (remove it: the supervisor makes its own directory)", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("notify: %s is not a directory (%s): refusing to use it (remove it: the supervisor makes its own directory)", dir, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return fmt.Errorf("notify: %s is owned by uid %d, not by us (uid %d) or root: refusing to use it", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("notify: %s has mode %o: others could replace the sockets in it (chmod go-w %s)", dir, fi.Mode()&os.ModePerm|stickyBit(fi), dir)
	}
	return nil
}

// stickyBit is fi's sticky bit as chmod shows it (01000), for messages.
func stickyBit(fi os.FileInfo) os.FileMode {
	if fi.Mode()&os.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}
