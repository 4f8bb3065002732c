package server

import (
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestSubscribeFlush: subscribe with flush publishes the output still in
// the job's merge window before answering; without it, that output waits
// for its window.
func TestSubscribeFlush(t *testing.T) {
	cfg := testConfig(t)
	cfg.Jobs.MergeInterval = time.Minute // (a window that outlasts the test)
	ts := startServer(t, cfg)
	ctx := ctxT(t, 20*time.Second)
	info, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "printf hi; exec sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.client.Kill(ctx, info.JobID, "SIGKILL")
	// The bytes are read (counted) before any event carries them.
	eventually(t, 10*time.Second, "the job's output read", func() bool {
		st, err := ts.client.Status(ctx, info.JobID)
		return err == nil && st.StdoutBytes == 2
	})
	outputs := func(res protocol.SubscribeResult) (s string) {
		for _, ev := range res.Events {
			if ev.Kind == protocol.KindStdout {
				p, _ := ev.Output()
				s += string(p.Data)
			}
		}
		return s
	}
	var res protocol.SubscribeResult
	if err := ts.client.Call(ctx, protocol.OpSubscribe, protocol.SubscribeArgs{JobID: info.JobID, FromSeq: 1}, &res); err != nil {
		t.Fatal(err)
	}
	if got := outputs(res); got != "" {
		t.Fatalf("without flush: output %q published before its window ended", got)
	}
	if err := ts.client.Call(ctx, protocol.OpSubscribe, protocol.SubscribeArgs{JobID: info.JobID, FromSeq: 1, Flush: true}, &res); err != nil {
		t.Fatal(err)
	}
	if got := outputs(res); got != "hi" || res.Job.LastSeq != 2 {
		t.Fatalf("with flush: output %q, lastSeq %d; want \"hi\" at seq 2", got, res.Job.LastSeq)
	}
}
