package server

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDeployFilesReferenceRealMetrics: the alert rules and the Grafana
// dashboard in deploy/ only use metrics this supervisor exports.
func TestDeployFilesReferenceRealMetrics(t *testing.T) {
	ts := startServer(t, testConfig(t))
	// Vectors have no series until used: give each one.
	m := ts.metrics
	m.Requests.WithLabelValues("health", "ok")
	m.RequestSeconds.WithLabelValues("health").Observe(0)
	m.EventsPublished.WithLabelValues("job.started")
	m.OutputBytes.WithLabelValues("stdout")
	m.ConnRejected.WithLabelValues("auth-failed")
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{"up": true}
	for _, f := range fams {
		n := f.GetName()
		known[n] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			known[n+suffix] = true
		}
	}
	alerts, err := os.ReadFile(filepath.Join("..", "..", "deploy", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	dash, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dash, &d); err != nil || len(d.Panels) == 0 {
		t.Fatalf("dashboard does not parse or has no panels: %v", err)
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, line := range strings.Split(string(alerts), "\n") {
		if e, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
			exprs = append(exprs, e)
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("only %d expressions found", len(exprs))
	}
	name := regexp.MustCompile(`\b(exec_supervisor_[a-z_]+|process_[a-z_]+|go_[a-z_]+)\b`)
	for _, e := range exprs {
		for _, n := range name.FindAllString(e, -1) {
			if !known[n] {
				t.Errorf("%q uses %s, which the supervisor does not export", e, n)
			}
		}
	}
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit when the
// tool is installed (it checks directives and the ExecStart binary, which
// it is given here).
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the unit is only checked by hand (see docs/operations.md)")
	}
	unit, err := os.ReadFile(filepath.Join("..", "..", "deploy", "exec-supervisor.service"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "exec-supervisor")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	u := strings.ReplaceAll(string(unit), "/usr/local/bin/exec-supervisor", bin)
	// The dedicated user need not exist on a test machine.
	u = strings.ReplaceAll(u, "User=exec-supervisor\nGroup=exec-supervisor\n", "")
	path := filepath.Join(dir, "exec-supervisor.service")
	if err := os.WriteFile(path, []byte(u), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "System has not been booted with systemd") || strings.Contains(string(out), "Failed to connect") {
			t.Skipf("systemd-analyze cannot run here: %s", strings.TrimSpace(string(out)))
		}
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Logf("systemd-analyze: %s", s)
	}
}
