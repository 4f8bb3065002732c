package server

import (
	"io"
	"net/http"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
)

// healthzTimeout bounds the control socket's answer to a /healthz probe.
const healthzTimeout = 2 * time.Second

// healthz answers GET /healthz on the metrics listener, for probes that
// speak HTTP (Kubernetes' liveness and readiness): 200 "ok" once the
// control socket answered a health request sent through a connection of
// its own, as any client's (the check the systemd watchdog makes: a
// supervisor whose request loop is stuck fails it); 503 with the reason
// when it did not within healthzTimeout, and 503 "draining" once a
// shutdown began (so that a readiness probe takes it out of service).
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	select {
	case <-s.draining:
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	default:
	}
	var c *zmtp.Client
	err := s.selfCheck(&c, healthzTimeout)
	if c != nil {
		c.Close()
	}
	if err != nil {
		http.Error(w, "control socket: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}
