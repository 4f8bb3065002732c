package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.conf")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	parse := func(file string, args ...string) (Config, error) {
		cfg := DefaultConfig()
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		cfg.BindFlags(fs)
		if err := fs.Parse(args); err != nil {
			return cfg, err
		}
		return cfg, LoadConfigFile(fs, file)
	}
	p := write("# comment\nmax-jobs = 7\ngrace = 2s\ncontrol = \"ipc:///tmp/x.sock\"\nallow-uid = 1001\nallow-uid = 1002\n\n")
	cfg, err := parse(p, "--max-jobs", "9")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Jobs.MaxJobs != 9 || cfg.Jobs.Grace != 2*time.Second || cfg.Control != "ipc:///tmp/x.sock" || len(cfg.AllowUIDs) != 2 {
		t.Fatalf("flags must win over the file, the file over defaults: %+v", cfg)
	}
	for content, want := range map[string]string{
		"nosuch = 1":      "unknown option",
		"max-jobs 5":      "want 'option = value'",
		"max-jobs = many": "max-jobs",
		"grace = -":       "grace",
		"config = x.conf": "unknown option",
		// (found by an operations audit: each was taken silently)
		"version = true": "unknown option", // (the supervisor printed its version and exited 0)
		"control = ipc:///tmp/c.sock # the socket": "a comment after the value",
		"state-dir = '/x'":                         "single quotes",
		"control = ipc:///run/x#1/c.sock # main":   "a comment after the value",
	} {
		if _, err := parse(write(content)); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), ":1:") {
			t.Errorf("%q: want an error with %q and the line, got %v", content, want, err)
		}
	}
	// A value holding " #" is quoted; an option given twice (not a list)
	// is a mistake, a list accumulates; a line longer than 64 KiB is read.
	if cfg, err := parse(write("control = \"ipc:///tmp/c #1.sock\"\n")); err != nil || cfg.Control != "ipc:///tmp/c #1.sock" {
		t.Errorf("a quoted value with \" #\": %q, %v", cfg.Control, err)
	}
	if _, err := parse(write("max-jobs = 7\nmax-jobs = 9\n")); err == nil || !strings.Contains(err.Error(), ":2:") || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("an option set twice: %v", err)
	}
	if _, err := parse(write("# " + strings.Repeat("x", 100<<10) + "\nmax-jobs = 7\n")); err != nil {
		t.Errorf("a long comment line: %v", err)
	}
	if _, err := parse(filepath.Join(dir, "missing.conf")); err == nil {
		t.Error("a missing file must be an error")
	}
}
