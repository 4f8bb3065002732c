package server

import (
	"fmt"
	"testing"
	"time"
)

// TestOpenClawTotalJobsProcessed: health's totalJobsProcessed counts the
// jobs started since the supervisor started, as the Node server counts
// its spawns: forgetting ended jobs does not take them back (OpenClaw's
// perf.test prints it after its jobs were forgotten).
func TestOpenClawTotalJobsProcessed(t *testing.T) {
	_, c := newJSONServer(t, func(cfg *Config) {
		cfg.Jobs.Retention = 50 * time.Millisecond
		cfg.Jobs.CleanupInterval = 100 * time.Millisecond
	})
	total := func() any { return c.req(map[string]any{"type": "health"})["totalJobsProcessed"] }
	if got := total(); got != 0.0 {
		t.Fatalf("totalJobsProcessed %v before any job", got)
	}
	base := jobID(t, "total")
	for i := range 3 {
		wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": fmt.Sprintf("%s-%d", base, i), "command": "true"}), "spawn")
	}
	// A spawn refused starts nothing.
	if rep := c.req(map[string]any{"type": "spawn", "jobId": base + "-0", "command": "true"}); rep["success"] != false {
		t.Fatalf("spawn of a known id: %v", rep)
	}
	for i := range 3 {
		c.pollUntilEnded(fmt.Sprintf("%s-%d", base, i), 10*time.Second)
	}
	eventually(t, 10*time.Second, "the ended jobs forgotten", func() bool {
		return len(c.req(map[string]any{"type": "status"})["jobs"].([]any)) == 0
	})
	if got := total(); got != 3.0 {
		t.Fatalf("totalJobsProcessed %v after 3 jobs, all forgotten; want 3", got)
	}
}
