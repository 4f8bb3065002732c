package keeper

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Status is what a keeper says of itself in keeper.json in the state
// directory while it runs (removed when it stops): its pid, its
// supervisor's, when it started, and the crashes so far.
type Status struct {
	Pid           int       `json:"pid"`
	SupervisorPid int       `json:"supervisorPid"`
	StartedAt     time.Time `json:"startedAt"`
	Crashes       int       `json:"crashes"`
	LastCrashAt   time.Time `json:"lastCrashAt,omitzero"`
}

const statusFile = "keeper.json"

// writeStatus replaces <dir>/keeper.json (temp file and rename).
func writeStatus(dir string, st Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".keeper-*.json")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(append(b, '\n'))
	if err := errors.Join(werr, tmp.Chmod(0o600), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, statusFile))
}

// ReadStatus reads the status of the keeper of state directory dir. ok is
// false when no keeper runs there (no keeper.json, or its process is
// gone).
func ReadStatus(dir string) (st Status, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, statusFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false, fmt.Errorf("%s: %w", filepath.Join(dir, statusFile), err)
	}
	return st, st.Pid > 0 && syscall.Kill(st.Pid, 0) == nil, nil
}

// Crash is one entry of crash.log: its header line and the rest.
type Crash struct {
	Header string `json:"header"`
	Detail string `json:"detail"`
}

// ReadCrashes returns the last n entries of <dir>/crash.log (all with n
// 0), oldest first, and how many it holds.
func ReadCrashes(dir string, n int) (crashes []Crash, total int, err error) {
	f, err := os.Open(filepath.Join(dir, "crash.log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<20))
	if err != nil {
		return nil, 0, err
	}
	for _, e := range strings.Split(string(b), "=== CRASH ")[1:] {
		head, rest, _ := strings.Cut(e, "\n")
		crashes = append(crashes, Crash{Header: strings.TrimSuffix(head, " ==="), Detail: strings.TrimRight(rest, "\n")})
	}
	total = len(crashes)
	if n > 0 && len(crashes) > n {
		crashes = crashes[len(crashes)-n:]
	}
	return crashes, total, nil
}
