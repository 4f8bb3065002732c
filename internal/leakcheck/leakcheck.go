// Package leakcheck makes a package's tests fail when they leave
// goroutines of this module running: every goroutine a test starts must
// have been stopped and waited for by its owner. It has no dependencies,
// so that any package's tests can use it.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

const module = "github.com/exec-supervisor/exec-supervisor/"

// Main runs the tests (m.Run) and then fails (exit code 1) if goroutines
// of this module are still running 5 s later, printing their stacks.
// Call it from TestMain: os.Exit(leakcheck.Main(m)).
func Main(m interface{ Run() int }) int {
	code := m.Run()
	if code == 0 {
		code = Report()
	}
	return code
}

// Report prints the goroutines of this module still running 5 s from
// now, if any, and returns 1 then (0 when none is left).
func Report() int {
	if left := Goroutines(5 * time.Second); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: tests left %d goroutines of this module running:\n\n%s\n", len(left), strings.Join(left, "\n\n"))
		return 1
	}
	return 0
}

// Goroutines returns the stacks of goroutines running code of this
// module (other than the caller's), once none is left or after d.
func Goroutines(d time.Duration) []string {
	buf := make([]byte, 8<<20)
	for deadline := time.Now().Add(d); ; {
		n := runtime.Stack(buf, true)
		var left []string
		for i, g := range strings.Split(string(buf[:n]), "\n\n") {
			if i > 0 && strings.Contains(g, module) { // (the first is the caller's)
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond) // goroutines on their way out; nothing to wait on
	}
}
