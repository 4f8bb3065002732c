package client

import (
	"fmt"
	"strings"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func TestRendezvousMovesFewSessions(t *testing.T) {
	keys := []string{"tcp://10.0.0.1:18790", "tcp://10.0.0.2:18790", "tcp://10.0.0.3:18790"}
	const n = 3000
	owner := func(keys []string) map[string]string {
		o := map[string]string{}
		for i := 0; i < n; i++ {
			s := fmt.Sprintf("session-%d", i)
			o[s] = rankForSession(s, keys)[0]
		}
		return o
	}
	before := owner(keys)
	count := map[string]int{}
	for _, k := range before {
		count[k]++
	}
	for _, k := range keys { // spread: each about n/3
		if c := count[k]; c < n/3*8/10 || c > n/3*12/10 {
			t.Errorf("member %s holds %d of %d sessions", k, c, n)
		}
	}
	// A fourth member: it takes about n/4, the others keep the rest.
	grown := owner(append(keys, "tcp://10.0.0.4:18790"))
	moved := 0
	for s, k := range grown {
		if k != before[s] {
			moved++
			if k != "tcp://10.0.0.4:18790" {
				t.Fatalf("session %s moved between old members %s -> %s", s, before[s], k)
			}
		}
	}
	if moved < n/4*8/10 || moved > n/4*12/10 {
		t.Errorf("adding a 4th member moved %d of %d sessions, want about %d", moved, n, n/4)
	}
	// One leaving: only its sessions move.
	shrunk := owner(keys[1:])
	for s, k := range shrunk {
		if before[s] != keys[0] && k != before[s] {
			t.Fatalf("session %s moved from %s though it stayed", s, before[s])
		}
	}
	// Same ranking in every process: a fixed expectation.
	if got := rankForSession("s", keys); strings.Join(got, ",") != strings.Join(rankForSession("s", []string{keys[2], keys[0], keys[1]}), ",") {
		t.Errorf("ranking depends on the order of members: %v", got)
	}
}

func TestLeastLoaded(t *testing.T) {
	loads := []memberLoad{
		{key: "a", active: 5, maxJobs: 10},
		{key: "b", active: 5, maxJobs: 100},
		{key: "c", active: 1, inflight: 4, maxJobs: 100},
	}
	if got := leastLoaded(loads); got != "b" && got != "c" {
		t.Fatalf("least loaded %q", got)
	}
	loads[2].inflight = 0
	if got := leastLoaded(loads); got != "c" {
		t.Fatalf("least loaded %q, want c", got)
	}
	if got := leastLoaded(nil); got != "" {
		t.Fatalf("none: %q", got)
	}
}

func TestPoolJobIDTag(t *testing.T) {
	tag := memberTag("tcp://127.0.0.2:4000")
	id := newPoolJobID(tag)
	if err := protocol.ValidJobIDChoice(id); err != nil {
		t.Fatal(err)
	}
	if tagOf(id) != tag {
		t.Fatalf("tagOf(%q) = %q, want %q", id, tagOf(id), tag)
	}
	for _, other := range []string{"j-0123456789abcdef", "build", "p12345678-0123456789abcdeX", "q12345678-0123456789abcdef", ""} {
		if tagOf(other) != "" {
			t.Errorf("tagOf(%q) = %q", other, tagOf(other))
		}
	}
}
