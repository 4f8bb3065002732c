// Command testreport reads `go test -json` on stdin and prints what a
// person needs from it: each package's result line, the whole output of
// every test that failed (and of a package that failed outside its tests:
// a build error, a panic, a timeout, a leak check), and at the end every
// skipped test with its reason, which plain `go test` hides without -v.
// It exits 1 when anything failed. `make test` pipes the suite through
// it; it is not a general test runner.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // (build-output, build-fail)
	Test       string
	Output     string
}

type skip struct{ name, reason string }

// report holds the output of tests still running, keyed by package and
// test, until their end says whether to print it.
type report struct {
	out     io.Writer
	pending map[string][]string
	skipped []skip
	failed  bool
}

func main() {
	r := &report{out: os.Stdout, pending: map[string][]string{}}
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	r.summary()
	if r.failed {
		os.Exit(1)
	}
}

func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintln(r.out, string(line)) // (not an event: go's own messages)
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *report) handle(e event) {
	key := e.Package + "\x00" + e.Test
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.out, e.Output)
	case "build-fail":
		r.failed = true
	case "output":
		r.pending[key] = append(r.pending[key], e.Output)
	case "skip":
		if e.Test != "" {
			r.skipped = append(r.skipped, skip{e.Package + " " + e.Test, skipReason(r.pending[key])})
		}
		delete(r.pending, key)
	case "pass":
		if e.Test == "" { // the package's "ok ..." line
			r.printResult(r.pending[key])
		}
		delete(r.pending, key)
	case "fail":
		r.failed = true
		if e.Test == "" {
			// Tests still running when their package failed (a panic, a
			// timeout) never end: their output comes first.
			for _, k := range r.keysOf(e.Package) {
				fmt.Fprint(r.out, strings.Join(r.pending[k], ""))
				delete(r.pending, k)
			}
		}
		fmt.Fprint(r.out, strings.Join(r.pending[key], ""))
		delete(r.pending, key)
	}
}

// keysOf lists, in order, the pending tests of package pkg.
func (r *report) keysOf(pkg string) []string {
	var keys []string
	for k := range r.pending {
		if p, test, _ := strings.Cut(k, "\x00"); p == pkg && test != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// printResult prints a passed package's own output: only its result line
// ("ok  pkg 1.2s", or "?  pkg [no test files]").
func (r *report) printResult(lines []string) {
	for _, l := range lines {
		if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "?") {
			fmt.Fprint(r.out, l)
		}
	}
}

// skipReason is what a skipped test said last before its "--- SKIP"
// line: the message of t.Skip, without its file:line prefix ("(no reason
// given)" for SkipNow).
func skipReason(lines []string) string {
	var said []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "--- SKIP"):
			if len(said) == 0 {
				return "(no reason given)"
			}
			return strings.Join(said, " ")
		case strings.HasPrefix(t, "=== "), t == "":
		case strings.HasPrefix(l, "        ") && len(said) > 0: // (a message's next line)
			said = append(said, t)
		default:
			// "file_test.go:12: reason" starts a message
			if i := strings.Index(t, ": "); i > 0 && strings.Contains(t[:i], ".go:") {
				t = t[i+2:]
			}
			said = []string{t}
		}
	}
	return "(no reason given)"
}

func (r *report) summary() {
	if len(r.skipped) == 0 {
		return
	}
	sort.Slice(r.skipped, func(i, j int) bool { return r.skipped[i].name < r.skipped[j].name })
	fmt.Fprintf(r.out, "\n%d skipped tests:\n", len(r.skipped))
	for _, s := range r.skipped {
		fmt.Fprintf(r.out, "  %s: %s\n", s.name, s.reason)
	}
}
