package server

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenClawNodeClient runs testdata/node/openclawclient.mjs, a client
// of the OpenClaw dialect on zeromq.js shaped as OpenClaw's gateway client
// (REQ with one frame of JSON and no credentials, SUB on exec:<jobId>),
// against a server on private ipc endpoints and on loopback tcp ones
// without a token, as OpenClaw's defaults are. Its module comes from
// `npm install --prefix internal/server/testdata/node` (.ci/run does it,
// for TestNodeClientInterop).
func TestOpenClawNodeClient(t *testing.T) {
	node, dir := nodeModules(t, "zeromq")
	for _, transport := range []string{"ipc", "tcp loopback"} {
		t.Run(transport, func(t *testing.T) {
			cfg := testConfig(t)
			if transport != "ipc" {
				cfg.Control, cfg.Event = tcpPair(t)
			}
			startServer(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			args := []string{filepath.Join(dir, "openclawclient.mjs"), cfg.Control, cfg.Event}
			cmd := exec.CommandContext(ctx, node, args...)
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "OPENCLAWCLIENT OK") {
				t.Fatalf("%s %s: %v (ctx: %v)\n%s", node, strings.Join(args, " "), err, ctx.Err(), out)
			}
		})
	}
}
