// Package testenv gives a test binary private home, state and runtime
// directories, so that no test reads or writes the user's own: a default
// token file in the user's state directory, or a supervisor of theirs on
// the default ipc sockets, must not change what a test sees, and a test
// must not leave anything there. Every package's TestMain goes through
// Main (or proctest.RunWithoutLeaks, which calls Isolate).
//
// It does not isolate the Go tool's own cache and module directories:
// those keep pointing where they did, so that tests which build binaries
// stay fast and work offline.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/exec-supervisor/exec-supervisor/internal/leakcheck"
)

// Main isolates the environment (Isolate), runs the tests through
// leakcheck.Main, removes the private directories and returns the exit
// code. Call it from TestMain: os.Exit(testenv.Main(m)).
func Main(m interface{ Run() int }) int {
	cleanup, err := Isolate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	defer cleanup()
	return leakcheck.Main(m)
}

// Isolate points HOME, XDG_STATE_HOME and XDG_RUNTIME_DIR at fresh
// directories of a temporary directory (0700), after pinning the Go
// tool's cache, config and module paths to where they were. It returns a
// function that removes the directories. Child processes of the tests
// inherit the environment, so supervisors the tests start are isolated
// too.
func Isolate() (cleanup func(), err error) {
	// Pin what the go command derives from HOME (tests run `go build`).
	pin := func(name string, value func() (string, error)) {
		if os.Getenv(name) != "" {
			return
		}
		if v, err := value(); err == nil && v != "" {
			os.Setenv(name, v)
		}
	}
	pin("XDG_CACHE_HOME", os.UserCacheDir)
	pin("XDG_CONFIG_HOME", os.UserConfigDir)
	pin("GOPATH", func() (string, error) {
		h, err := os.UserHomeDir()
		return filepath.Join(h, "go"), err
	})

	dir, err := os.MkdirTemp("", "es-env-")
	if err != nil {
		return nil, fmt.Errorf("isolate: %w", err)
	}
	for name, sub := range map[string]string{"HOME": "home", "XDG_STATE_HOME": "state", "XDG_RUNTIME_DIR": "run"} {
		p := filepath.Join(dir, sub)
		if err := os.Mkdir(p, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("isolate: %w", err)
		}
		os.Setenv(name, p)
	}
	return func() { os.RemoveAll(dir) }, nil
}
