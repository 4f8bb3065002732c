package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(withDefaultSupervisor{m}))
}

// withDefaultSupervisor runs the tests with a supervisor on the default
// endpoints (in the isolated environment testenv made) for the examples,
// which connect as a user's program does: client.New(client.Options{}).
type withDefaultSupervisor struct{ m *testing.M }

func (w withDefaultSupervisor) Run() int {
	cfg := server.DefaultConfig()
	cfg.MetricsAddr = ""
	cfg.Subreaper = false // the test process waits for children of its own
	cfg.CPUHome = false
	cfg.Jobs.MergeInterval = 10 * time.Millisecond
	s, err := server.New(cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		err = s.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "the examples' supervisor:", err)
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s.Close(ctx)
	}()
	return w.m.Run()
}
