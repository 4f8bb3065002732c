package main

import (
	"strings"
	"testing"
)

// A run with a pass, a skip with a reason, a skipped subtest, a SkipNow,
// a failure and a package that panicked mid-test: passing tests stay
// quiet, failures show their whole output, skips are listed with their
// reasons at the end.
func TestReport(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:3: hello\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:3: needs python3-zmq\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"        (apt-get install python3-zmq)\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"--- SKIP: TestA (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB/sub","Output":"    a_test.go:4: sub 1\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB/sub","Output":"--- SKIP: TestB/sub (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestB/sub"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"    a_test.go:5: noisy pass\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestC"}`,
		`{"Action":"output","Package":"p","Test":"TestD","Output":"--- SKIP: TestD (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestD"}`,
		`{"Action":"output","Package":"p","Test":"TestE","Output":"    a_test.go:9: wrong answer\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestE"}`,
		`{"Action":"output","Package":"p","Output":"ok  \tp\t0.007s\n"}`,
		`{"Action":"pass","Package":"p"}`,
		`not json: a message of go's own`,
		`{"Action":"output","Package":"q","Test":"TestHang","Output":"    q_test.go:1: still going\n"}`,
		`{"Action":"output","Package":"q","Output":"panic: test timed out\n"}`,
		`{"Action":"fail","Package":"q"}`,
	}, "\n")
	var out strings.Builder
	r := &report{out: &out, pending: map[string][]string{}}
	if err := r.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	r.summary()
	got := out.String()
	for _, want := range []string{"wrong answer", "ok  \tp", "not json", "still going\npanic: test timed out",
		"3 skipped tests:\n  p TestA: needs python3-zmq (apt-get install python3-zmq)\n  p TestB/sub: sub 1\n  p TestD: (no reason given)\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "noisy pass") || strings.Contains(got, "hello") {
		t.Errorf("a passing test's output shown:\n%s", got)
	}
	if !r.failed {
		t.Error("failures not noted")
	}
}
