package server

import (
	"context"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestIdleConnectionsEvictedAtLimit: a client that fills --max-connections
// with handshaken connections that send nothing no longer locks everyone
// out: a new client takes the place of the one idle the longest, while a
// connection holding a wait is never given up (its wait is answered).
func TestIdleConnectionsEvictedAtLimit(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxConns = 5
	cfg.IdleEvictAfter = time.Nanosecond // (any idle connection may go)
	ts := startServer(t, cfg)
	job, err := ts.client.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	holder := client.New(client.Options{ControlAddress: cfg.Control, EventAddress: cfg.Event, RequestTimeout: 10 * time.Second, MaxReconnectAttempts: 1})
	defer holder.Close()
	type result struct {
		finished bool
		err      error
	}
	waited := make(chan result, 1)
	go func() {
		_, finished, err := holder.Wait(context.Background(), job.JobID, 30*time.Second)
		waited <- result{finished, err}
	}()
	eventually(t, 10*time.Second, "the wait held", func() bool { return ts.Server.heldWaits() == 1 })
	// A leaking client fills the rest: 4 more connections (with ts.client
	// and the holder, 6 tried: the last one already evicts).
	for i := 0; i < 4; i++ {
		c, err := zmtp.DialClient(context.Background(), "DEALER", cfg.Control, 2*time.Second, "")
		if err != nil {
			t.Fatalf("leaked connection %d: %v", i, err)
		}
		defer c.Close()
	}
	// New clients get in, each in place of an idle connection.
	for i := 0; i < 3; i++ {
		c := client.New(client.Options{ControlAddress: cfg.Control, EventAddress: cfg.Event, RequestTimeout: 5 * time.Second, MaxReconnectAttempts: 1})
		if _, err := c.Health(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("new client %d at the limit: %v", i, err)
		}
		defer c.Close()
	}
	if v := value(scrape2(t, ts), "exec_supervisor_connections_rejected_total", "reason", "evicted-idle"); v < 3 {
		t.Fatalf("evictions counted: %v", v)
	}
	select {
	case r := <-waited:
		t.Fatalf("the held wait ended early: %+v", r)
	default:
	}
	if n := ts.Server.heldWaits(); n != 1 {
		t.Fatalf("%d waits held; want the holder's", n)
	}
	// The holder's connection survived: its wait is answered on it.
	if _, err := ts.client.Kill(ctxT(t, 5*time.Second), job.JobID, ""); err != nil {
		t.Fatal(err)
	}
	if r := <-waited; r.err != nil || !r.finished {
		t.Fatalf("held wait: %+v", r)
	}
}
