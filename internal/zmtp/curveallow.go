package zmtp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
)

// CurveAllowList is the file of client public keys a CURVE server admits
// (its ZAP, in libzmq terms): one Z85 key per line, optionally followed by
// whitespace and a name (logged when the client connects); blank lines
// and lines starting with '#' are comments. It is read again whenever it
// changed (size, modification or change time, inode), looked at on every
// CURVE handshake: no reload signal and no goroutine. A file that is
// missing admits nobody; one that cannot be used (another user's,
// writable by others, a line that is not a key) keeps the keys last read
// and says why in Err (logged by the caller).
type CurveAllowList struct {
	path string

	mu    sync.Mutex
	stamp fileStamp
	keys  map[CurveKey]string // key -> name
	err   error
}

type fileStamp struct {
	ino, size   uint64
	mtime, ctim time.Time
	exists      bool
}

// NewCurveAllowList returns the allow-list at path (read on first use).
func NewCurveAllowList(path string) *CurveAllowList {
	return &CurveAllowList{path: path, stamp: fileStamp{exists: true}} // (differs from any first stamp)
}

// Path is the file's path.
func (a *CurveAllowList) Path() string { return a.path }

// Lookup says whether key is admitted, with the name the file gives it.
// reloaded is set when the file was read again (or found gone, or
// unusable: err says why) by this call.
func (a *CurveAllowList) Lookup(key CurveKey) (name string, ok bool, reloaded bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := stampOf(a.path)
	if st != a.stamp {
		a.stamp = st
		reloaded = true
		keys, rerr := readAllowList(a.path)
		switch {
		case errors.Is(rerr, os.ErrNotExist):
			a.keys, a.err = nil, nil
		case rerr != nil:
			a.err = rerr // (the keys last read stay)
		default:
			a.keys, a.err = keys, nil
		}
	}
	name, ok = a.keys[key]
	return name, ok, reloaded, a.err
}

// Len is how many keys were last read.
func (a *CurveAllowList) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.keys)
}

func stampOf(path string) fileStamp {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileStamp{}
	}
	return fileStamp{ino: st.Ino, size: uint64(st.Size), exists: true,
		mtime: time.Unix(st.Mtim.Unix()), ctim: time.Unix(st.Ctim.Unix())}
}

// readAllowList parses the allow-list file.
func readAllowList(path string) (map[CurveKey]string, error) {
	b, err := statedir.ReadTrusted(path, false, true, maxAllowListBytes)
	if err != nil {
		return nil, err
	}
	keys := map[CurveKey]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		field, name, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(field, '\t'); i >= 0 {
			field, name = field[:i], field[i+1:]+" "+name
		}
		k, err := ParseCurveKey(field)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		keys[k] = strings.TrimSpace(name)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return keys, nil
}

// maxAllowListBytes bounds the allow-list file (some 20,000 keys).
const maxAllowListBytes = 1 << 20
