package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
)

// stateMarkFile holds the state directory's mark, which every job carries
// in its environment (jobs.WithMark): 32 random hex digits made at the
// directory's first use. Random rather than derived from the path: two
// directories of the same path (in other mount namespaces, containers)
// never share it.
const stateMarkFile = "state-id"

// loadStateMark returns the mark of state directory dir, made and written
// there if it has none, or anew with renew. A file that does not hold one
// (damaged, not a regular file) is moved aside and a new mark made:
// processes carrying the old one are no longer recognised (logged by the
// caller through moved). One that cannot be read for another reason is an
// error.
func loadStateMark(dir string, renew bool) (mark, moved string, err error) {
	path := filepath.Join(dir, stateMarkFile)
	b, err := readRegular(path)
	id := strings.TrimSpace(string(b))
	switch {
	case err == nil && validStateMark(id):
		if !renew {
			return id, "", nil
		}
	case err == nil, errors.Is(err, errNotRegular):
		moved = path + ".corrupt-" + time.Now().UTC().Format("20060102T150405.000000000Z")
		if rerr := os.Rename(path, moved); rerr != nil {
			return "", "", fmt.Errorf("%s holds no state mark and cannot be moved aside: %w", path, rerr)
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return "", "", fmt.Errorf("%w (fix its permissions or move it away)", err)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", fmt.Errorf("make a state mark: %w", err)
	}
	mark = hex.EncodeToString(raw[:])
	if err := journal.WriteFileAtomic(path, []byte(mark+"\n")); err != nil {
		return "", "", err
	}
	return mark, moved, nil
}

var errNotRegular = errors.New("not a regular file")

// readRegular reads the small regular file at path (no symlink followed).
func readRegular(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, errNotRegular
		}
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, errNotRegular
	}
	return io.ReadAll(io.LimitReader(f, 4096))
}

// validStateMark reports whether id is a mark loadStateMark makes.
func validStateMark(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}
