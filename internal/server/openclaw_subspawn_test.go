package server

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestOpenClawSubscribeThenSpawn: a gateway subscribes its SUB socket to
// exec:<jobId> and at once sends the spawn on its REQ socket, as
// OpenClaw's client does (subscribe(jobId, handler), then spawn): the
// job's first event, job.started (seq 0), reaches it every time, though
// the subscription and the request come on two connections. (The
// supervisor applies the subscriptions its subscribers sent before the
// spawn first; without that, the spawn often overtook the subscription
// and job.started went to nobody.)
func TestOpenClawSubscribeThenSpawn(t *testing.T) {
	for _, transport := range []string{"ipc", "tcp loopback"} {
		t.Run(transport, func(t *testing.T) {
			ts, c := newJSONServer(t, func(cfg *Config) {
				if transport != "ipc" {
					cfg.Control, cfg.Event = tcpPair(t) // (our uid: no token)
				}
			})
			c.sub(ts, "exec:warm-up") // (the SUB connection is up)
			for i := range 50 {
				id := fmt.Sprintf("%s-%d", jobID(t, "subspawn"), i)
				body, _ := json.Marshal(map[string]any{"type": "spawn", "jobId": id, "command": "true"})
				ans := c.do(map[string]any{"op": "subreq", "topic": "exec:" + id, "body": string(body)})
				var rep map[string]any
				if text, ok := ans["reply"].(string); !ok || json.Unmarshal([]byte(text), &rep) != nil {
					t.Fatalf("spawn %s: %v", id, ans)
				}
				wantOK(t, rep, "spawn")
				evs := c.eventsUntilEnd(id, 10*time.Second)
				if evs[0]["kind"] != "job.started" || evs[0]["seq"] != 0.0 {
					t.Fatalf("spawn %d of %s right after subscribing: first event %v, want job.started (seq 0); all: %v", i, id, evs[0], evs)
				}
			}
		})
	}
}
