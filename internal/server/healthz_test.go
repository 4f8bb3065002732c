package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestHealthz: GET /healthz on the metrics listener is 200 "ok" while the
// control socket answers; anything but GET or HEAD is refused; once a
// shutdown began (a job holding it up in its grace period) it is 503
// "draining".
func TestHealthz(t *testing.T) {
	cfg := testConfig(t)
	cfg.MetricsAddr = "127.0.0.1:0"
	ts := startServer(t, cfg)
	url := "http://" + ts.MetricsAddr().String() + "/healthz"
	get := func(method string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(http.MethodGet); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if code, _ := get(http.MethodPost); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST healthz: %d", code)
	}
	ctx := ctxT(t, 30*time.Second)
	if _, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "trap '' TERM; echo up; sleep 5", GraceMs: 3000}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- ts.Server.Close(context.Background()) }()
	eventually(t, 10*time.Second, "healthz draining", func() bool {
		code, body := get(http.MethodGet)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "draining")
	})
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
