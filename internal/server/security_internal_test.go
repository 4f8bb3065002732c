package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestRejectLogsLimited: refused connections are logged at most
// rejectLogsPerSecond times a second per endpoint (anyone who can connect
// could fill the log), and the next line says how many were left out.
func TestRejectLogsLimited(t *testing.T) {
	var buf bytes.Buffer
	warn := limitedWarn(slog.New(slog.NewTextHandler(&buf, nil)), "ipc:///x")
	for range 1000 {
		warn("connection rejected", "reason", "peer-credentials")
	}
	lines := strings.Count(buf.String(), "\n")
	if lines > rejectLogsPerSecond*2 { // (two windows at most, if the loop straddled one)
		t.Fatalf("%d lines for 1000 rejections", lines)
	}
	if lines < rejectLogsPerSecond {
		t.Fatalf("only %d lines", lines)
	}
}
