package server

import (
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestSubscribeFlush: subscribe with flush publishes the output still in
// the job's merge window before answering; without it, that output waits
// for its window. (The job's first output, "a", goes out at once; "hi",
// read within the window that opened, waits.)
func TestSubscribeFlush(t *testing.T) {
	cfg := testConfig(t)
	cfg.Jobs.MergeInterval = time.Minute // (a window that outlasts the test)
	ts := startServer(t, cfg)
	ctx := ctxT(t, 20*time.Second)
	info, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "printf a; read l; printf hi; exec sleep 30", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.client.Kill(ctx, info.JobID, "SIGKILL")
	eventually(t, 10*time.Second, "the job's first output published", func() bool {
		st, err := ts.client.Status(ctx, info.JobID)
		return err == nil && st.OutputEnd == 1
	})
	if _, err := ts.client.Write(ctx, info.JobID, []byte("\n"), false); err != nil {
		t.Fatal(err)
	}
	// The bytes are read (counted) before any event carries them.
	eventually(t, 10*time.Second, "the job's output read", func() bool {
		st, err := ts.client.Status(ctx, info.JobID)
		return err == nil && st.StdoutBytes == 3
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
	if got := outputs(res); got != "a" {
		t.Fatalf("without flush: output %q published before its window ended", got)
	}
	if err := ts.client.Call(ctx, protocol.OpSubscribe, protocol.SubscribeArgs{JobID: info.JobID, FromSeq: 1, Flush: true}, &res); err != nil {
		t.Fatal(err)
	}
	if got := outputs(res); got != "ahi" || res.Job.LastSeq != 3 {
		t.Fatalf("with flush: output %q, lastSeq %d; want \"ahi\", \"hi\" at seq 3", got, res.Job.LastSeq)
	}
}
