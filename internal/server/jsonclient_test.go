package server

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// jsonClient is testdata/jsonbridge.py: a client of OpenClaw's JSON
// dialect on libzmq (pyzmq), REQ for control and SUB for events, as
// OpenClaw's gateway client is on zeromq.js.
type jsonClient struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Reader
}

// startJSONClient starts the bridge against ts, or skips the test when
// no python can import zmq.
func startJSONClient(t *testing.T, ts *testServer) *jsonClient {
	t.Helper()
	py, tried := pythonImporting("zmq")
	if py == "" {
		t.Skipf("no python3 that can import zmq (tried %s); install it with: apt-get install -y python3-zmq (or: pip install pyzmq)",
			strings.Join(tried, ", "))
	}
	script, err := filepath.Abs(filepath.Join("testdata", "jsonbridge.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script, ts.cfg.Control, ts.cfg.Event)
	c := &jsonClient{t: t}
	if c.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.out = bufio.NewReaderSize(stdout, 1<<20)
	t.Cleanup(func() {
		c.in.Close() // (it ends at the end of its input)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("jsonbridge.py: %v\n%s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("jsonbridge.py did not end\n%s", stderr.String())
		}
	})
	return c
}

// do sends one bridge command and returns its answer (the bridge bounds
// every wait: it always answers).
func (c *jsonClient) do(cmd map[string]any) map[string]any {
	c.t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		c.t.Fatalf("jsonbridge: %v", err)
	}
	line, err := c.out.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("jsonbridge: %v", err)
	}
	var ans map[string]any
	if err := json.Unmarshal(line, &ans); err != nil {
		c.t.Fatalf("jsonbridge answered %q: %v", line, err)
	}
	return ans
}

// raw sends body as one frame and returns the reply, decoded: it must be
// one frame of UTF-8 JSON, an object.
func (c *jsonClient) raw(body []byte) map[string]any {
	c.t.Helper()
	ans := c.do(map[string]any{"op": "req", "hex": hex.EncodeToString(body)})
	text, ok := ans["reply"].(string)
	if !ok {
		c.t.Fatalf("request %.200q: no reply of one UTF-8 frame: %v", body, ans)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(text), &rep); err != nil {
		c.t.Fatalf("request %.200q: reply is not a JSON object: %v\n%.500s", body, err, text)
	}
	return rep
}

// req sends v as JSON and returns the reply.
func (c *jsonClient) req(v map[string]any) map[string]any {
	c.t.Helper()
	b, _ := json.Marshal(v)
	return c.raw(b)
}

// pollUntilEnded polls job id until its state is exited or failed,
// failing after d, and returns the last reply and when it came.
func (c *jsonClient) pollUntilEnded(id string, d time.Duration) (map[string]any, time.Time) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		rep := c.req(map[string]any{"type": "poll", "jobId": id})
		if st := rep["state"]; st == "exited" || st == "failed" {
			return rep, time.Now()
		}
		if rep["success"] != true || time.Now().After(deadline) {
			c.t.Fatalf("job %s not ended within %v: %v", id, d, rep)
		}
		time.Sleep(10 * time.Millisecond) // polling, as a poll-mode gateway does: nothing to block on
	}
}

// output joins the data of poll chunks (of kind, or all when "").
func output(rep map[string]any, kind string) string {
	var b strings.Builder
	chunks, _ := rep["chunks"].([]any)
	for _, c := range chunks {
		ch := c.(map[string]any)
		if kind == "" || ch["kind"] == kind {
			b.WriteString(ch["data"].(string))
		}
	}
	return b.String()
}
