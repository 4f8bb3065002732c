package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenClawShim runs tools/openclaw/start-supervisor.mjs, the
// startSupervisor(config) of OpenClaw's tests, on node: a supervisor on
// tcp ports with a journal in a sticky directory answers a spawn (no
// token), stops, and one started at once on the same ports and journal
// reports the job that was running as failed.
func TestOpenClawShim(t *testing.T) {
	if testing.Short() {
		t.Skip("starts supervisors under node")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node")
	}
	shim, err := filepath.Abs("../../tools/openclaw/start-supervisor.mjs")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	shared := filepath.Join(dir, "tmp")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	script := fmt.Sprintf(`
import { startSupervisor, zmtpRequest } from %q;
const cfg = { controlAddress: "tcp://127.0.0.1:%d", eventAddress: "tcp://127.0.0.1:%d",
  journalPath: %q, journalFlushIntervalMs: 100, chunkMergeIntervalMs: 50, maxConcurrentJobs: 10 };
let s = await startSupervisor(cfg);
const spawned = await zmtpRequest(cfg.controlAddress, { type: "spawn", jobId: "shim-job", command: "sleep 30" }, 5000);
if (!spawned.success) throw new Error("spawn: " + JSON.stringify(spawned));
await s.stop();
s = await startSupervisor({});
const st = await zmtpRequest(cfg.controlAddress, { type: "status", jobId: "shim-job" }, 5000);
await s.stop();
if (st.job?.state !== "failed") throw new Error("status after a restart: " + JSON.stringify(st));
console.log("SHIM OK");
`, shim, ports[0], ports[1], filepath.Join(shared, "journal.json"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--input-type=module", "-e", script)
	cmd.Env = append(os.Environ(), "EXEC_SUPERVISOR_BIN="+binary, "EXEC_SUPERVISOR_SHIM_STATE_ROOT="+filepath.Join(dir, "state"),
		"EXEC_SUPERVISOR_SHIM_LOG="+filepath.Join(dir, "log"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SHIM OK") {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("shim: %v\n%s\nsupervisor log:\n%s", err, out, log)
	}
}
