package client_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestTooLargeRequests: a request over protocol.MaxRequestBytes is
// refused by the client itself (too-large, nothing sent); one over a
// supervisor's lower --max-request-bytes gets the supervisor's too-large
// at once, not after RequestTimeout, while calls in flight beside it on
// the same connection are answered as usual.
func TestTooLargeRequests(t *testing.T) {
	s := start(t, func(c *server.Config) { c.MaxRequestBytes = 64 << 10 })
	// A RequestTimeout far beyond the test's deadline: a dropped reply
	// shows as a context error, not as too-large.
	c := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: s.cfg.Event, RequestTimeout: time.Hour})
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)

	_, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"echo", strings.Repeat("x", protocol.MaxRequestBytes)}})
	if protocol.CodeOf(err) != protocol.CodeTooLarge || !strings.Contains(err.Error(), "the limit is 1048576") {
		t.Fatalf("over MaxRequestBytes: %v", err)
	}

	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				_, errs[i] = c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"echo", strings.Repeat("y", 100<<10)}})
			} else {
				_, errs[i] = c.Health(ctx)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && (protocol.CodeOf(err) != protocol.CodeTooLarge || !strings.Contains(err.Error(), "the limit is 65536")) {
			t.Errorf("spawn over the supervisor's limit: %v", err)
		}
		if i%2 == 1 && err != nil {
			t.Errorf("health beside it: %v", err)
		}
	}
	if jobs, err := c.ListJobs(ctx, protocol.ListJobsArgs{}); err != nil || len(jobs) != 0 {
		t.Fatalf("jobs: %v %v", jobs, err)
	}
}

// TestTooLargeWithoutID: a too-large reply without id (a supervisor that
// could not read it) goes to the one request in flight.
func TestTooLargeWithoutID(t *testing.T) {
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "c.sock")
	r, err := zmtp.ListenRouter(context.Background(), endpoint, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetHandler(func(in zmtp.Incoming) {
		defer in.Peer.Release()
		env := in.Frames[:len(in.Frames)-1]
		_ = r.Send(in.Peer, append(env[:len(env):len(env)], protocol.ErrorReply("", protocol.Errorf(protocol.CodeTooLarge, "request is too large"))))
	})
	c := client.New(client.Options{ControlAddress: endpoint, EventAddress: endpoint, RequestTimeout: time.Hour})
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)
	if _, err := c.Health(ctx); protocol.CodeOf(err) != protocol.CodeTooLarge {
		t.Fatalf("want too-large, got %v", err)
	}
}
