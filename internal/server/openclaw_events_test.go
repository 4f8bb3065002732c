package server

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/openclaw"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// OpenClaw's dialect on the event socket, end to end: a real libzmq SUB
// socket on exec:<jobId> (testdata/jsonbridge.py).

// sub subscribes to topic and waits until the supervisor counts it.
func (c *jsonClient) sub(ts *testServer, topic string) {
	c.t.Helper()
	before := ts.dialectScope.Load().Count()
	c.do(map[string]any{"op": "sub", "topic": topic})
	eventually(c.t, 10*time.Second, "the subscription to "+topic, func() bool {
		return ts.dialectScope.Load().Count() > before
	})
}

// recv returns the next event (topic and decoded body), or ok false when
// none came within d.
func (c *jsonClient) recv(d time.Duration) (topic string, ev map[string]any, ok bool) {
	c.t.Helper()
	ans := c.do(map[string]any{"op": "recv", "timeoutMs": d.Milliseconds()})
	frames, _ := ans["frames"].([]any)
	if frames == nil {
		return "", nil, false
	}
	if len(frames) != 2 {
		c.t.Fatalf("event of %d frames: %v", len(frames), frames)
	}
	if err := json.Unmarshal([]byte(frames[1].(string)), &ev); err != nil {
		c.t.Fatalf("event body is not a JSON object: %v\n%v", err, frames[1])
	}
	return frames[0].(string), ev, true
}

// eventsUntilEnd collects the events of job id until its terminal event
// (job.exited or job.failed), failing after d.
func (c *jsonClient) eventsUntilEnd(id string, d time.Duration) []map[string]any {
	c.t.Helper()
	var evs []map[string]any
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		topic, ev, ok := c.recv(time.Until(deadline))
		if !ok {
			break
		}
		if topic != "exec:"+id || ev["jobId"] != id {
			c.t.Fatalf("event of topic %q for job %v while following %s: %v", topic, ev["jobId"], id, ev)
		}
		evs = append(evs, ev)
		if k := ev["kind"]; k == "job.exited" || k == "job.failed" {
			return evs
		}
	}
	c.t.Fatalf("job %s: no terminal event within %v; got %v", id, d, evs)
	return nil
}

// TestOpenClawEvents: a SUB socket on exec:<jobId> gets the job's events
// as JSON, seqs contiguous from 0 (job.started), a character split
// between two reads whole; subscribe backfills the same events from
// fromSeq 0; a native subscriber of everything gets no JSON.
func TestOpenClawEvents(t *testing.T) {
	ts, c := newJSONServer(t, nil) // (a merge window of 20 ms: the sleeps below split the output)
	// A native subscriber of everything, live once it hears a heartbeat.
	all, err := zmtp.DialClient(context.Background(), "SUB", ts.cfg.Event, 5*time.Second, ts.token)
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if err := all.Subscribe(""); err != nil {
		t.Fatal(err)
	}
	nativeNext := func() (string, *protocol.Event) {
		t.Helper()
		m, err := all.Recv()
		if err != nil || len(m) < 2 {
			t.Fatalf("native subscriber: %q %v", m, err)
		}
		if strings.HasPrefix(string(m[0]), openclaw.TopicPrefix) {
			t.Fatalf("a native subscriber of everything got a dialect event: %q %q", m[0], m[1])
		}
		ev, err := protocol.DecodeEvent(bytes.Join(m[1:], nil))
		if err != nil {
			t.Fatalf("native event %q: %v", m, err)
		}
		return string(m[0]), ev
	}
	for topic, _ := nativeNext(); topic != protocol.TopicHeartbeat; topic, _ = nativeNext() {
	}
	id := jobID(t, "test-events")
	c.sub(ts, "exec:"+id)
	// é (c3 a9) in two reads, 300 ms apart; a 4-byte emoji in three.
	cmd := `printf 'caf\303'; sleep 0.3; printf '\251\n'; echo err >&2; printf '\360\237'; sleep 0.3; printf '\216'; sleep 0.3; printf '\211 end\n'`
	wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": id, "command": cmd}), "spawn")
	evs := c.eventsUntilEnd(id, 10*time.Second)

	var stdout, stderr strings.Builder
	var splits int
	for i, ev := range evs {
		if ev["seq"] != float64(i) {
			t.Fatalf("event %d has seq %v: seqs must be contiguous from 0\n%v", i, ev["seq"], evs)
		}
		if ev["ts"].(float64) <= 0 {
			t.Fatalf("event without a ts: %v", ev)
		}
		switch ev["kind"] {
		case "job.stdout":
			d := ev["data"].(string)
			stdout.WriteString(d)
			if d == "" || strings.HasPrefix(d, "\n") || strings.HasPrefix(d, "é") || strings.HasPrefix(d, "🎉") {
				splits++ // (an event that got a character started in the one before)
			}
		case "job.stderr":
			stderr.WriteString(ev["data"].(string))
		}
	}
	if first := evs[0]; first["kind"] != "job.started" || first["command"] != cmd || first["pid"].(float64) <= 0 {
		t.Fatalf("first event: %v", first)
	}
	last := evs[len(evs)-1]
	if last["kind"] != "job.exited" || last["reason"] != "exit" || last["exitCode"] != 0.0 || last["exitSignal"] != nil {
		t.Fatalf("last event: %v", last)
	}
	if stdout.String() != "café\n🎉 end\n" || stderr.String() != "err\n" {
		t.Fatalf("stdout %q stderr %q (characters split between reads must come out whole)", stdout.String(), stderr.String())
	}
	if splits == 0 {
		t.Logf("no character was split between events (a loaded machine read them together): %v", evs)
	}

	// The native subscriber got the job's native events, and nothing else
	// but heartbeats.
	for {
		topic, ev := nativeNext()
		if topic != protocol.TopicHeartbeat && topic != protocol.JobTopic(id) {
			t.Fatalf("native event of topic %q", topic)
		}
		if ev.Kind.Terminal() {
			break
		}
	}

	// subscribe from 0: the same events, backfilled.
	sub := c.req(map[string]any{"type": "subscribe", "jobId": id, "fromSeq": 0})
	wantOK(t, sub, "subscribe")
	if sub["currentSeq"] != float64(len(evs)-1) {
		t.Fatalf("currentSeq %v, want %d", sub["currentSeq"], len(evs)-1)
	}
	got, _ := json.Marshal(sub["events"])
	want, _ := json.Marshal(evs)
	if string(got) != string(want) {
		t.Fatalf("subscribe from 0:\n%s\nevents:\n%s", got, want)
	}
	// From a seq: the events from it on.
	from := c.req(map[string]any{"type": "subscribe", "jobId": id, "fromSeq": 2})
	if n := len(from["events"].([]any)); n != len(evs)-2 {
		t.Fatalf("subscribe from 2: %d events, want %d", n, len(evs)-2)
	}
	// poll: the output events, same seqs and data.
	poll := c.req(map[string]any{"type": "poll", "jobId": id})
	if output(poll, "stdout") != stdout.String() || poll["cursor"] != float64(len(evs)) {
		t.Fatalf("poll: %v", poll)
	}
	for _, ch := range poll["chunks"].([]any) {
		ch := ch.(map[string]any)
		ev := evs[int(ch["seq"].(float64))]
		if ev["data"] != ch["data"] || ev["kind"] != "job."+ch["kind"].(string) {
			t.Fatalf("poll chunk %v is not event %v", ch, ev)
		}
	}
}

// TestOpenClawOverTCP: a stock client (no ZMTP PLAIN) over tcp, with the
// supervisor's tcp authentication off, as a trusted test setup has it.
func TestOpenClawOverTCP(t *testing.T) {
	ts, c := newJSONServer(t, func(cfg *Config) {
		cfg.Control, cfg.Event = tcpPair(t)
		cfg.InsecureTCP = true
	})
	wantOK(t, c.req(map[string]any{"type": "health"}), "health")
	id := jobID(t, "test-tcp")
	c.sub(ts, "exec:"+id)
	wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": id, "command": "echo over tcp"}), "spawn")
	evs := c.eventsUntilEnd(id, 10*time.Second)
	if evs[0]["kind"] != "job.started" || evs[len(evs)-1]["kind"] != "job.exited" {
		t.Fatalf("events %v", evs)
	}
	if got := output(c.req(map[string]any{"type": "poll", "jobId": id}), ""); got != "over tcp\n" {
		t.Fatalf("output %q", got)
	}
}
