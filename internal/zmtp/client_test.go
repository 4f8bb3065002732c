package zmtp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// echoRouter serves a ROUTER that answers every message with its frames.
func echoRouter(t *testing.T, endpoint string, token string) *Router {
	t.Helper()
	return echoRouterWith(t, endpoint, &Policy{Token: token})
}

// echoRouterWith is echoRouter with policy pol.
func echoRouterWith(t *testing.T, endpoint string, pol *Policy) *Router {
	t.Helper()
	r, err := ListenRouter(context.Background(), endpoint, pol, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			in, err := r.Recv()
			if err != nil {
				return
			}
			_ = r.Send(in.Peer, in.Frames)
			in.Peer.Release()
		}
	}()
	t.Cleanup(func() { r.Close(); <-done })
	return r
}

// TestClientDealerAgainstRouter: our client DEALER completes the NULL and
// PLAIN handshakes with our ROUTER and round-trips messages of every frame
// size class; a wrong token is refused with the server's reason.
func TestClientDealerAgainstRouter(t *testing.T) {
	for _, token := range []string{"", "s3cret-token"} {
		endpoint := "ipc://" + filepath.Join(t.TempDir(), "r.sock")
		echoRouter(t, endpoint, token)
		c, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, token)
		if err != nil {
			t.Fatalf("token %q: %v", token, err)
		}
		for _, size := range []int{0, 1, 255, 256, 70000, 1 << 20} {
			body := bytes.Repeat([]byte{byte(size)}, size)
			if err := c.Send([]byte("x"), body); err != nil {
				t.Fatal(err)
			}
			got, err := c.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || string(got[0]) != "x" || !bytes.Equal(got[1], body) {
				t.Fatalf("size %d: echo of %d frames", size, len(got))
			}
		}
		c.Close()
		if _, err := c.Recv(); err == nil {
			t.Fatal("Recv after Close succeeded")
		}
		if token != "" {
			if _, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, "wrong"); err == nil || !strings.Contains(err.Error(), "authentication failed") {
				t.Fatalf("wrong token: %v", err)
			}
			if _, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, ""); err == nil || !strings.Contains(err.Error(), "PLAIN") {
				t.Fatalf("no token against a PLAIN server: %v", err)
			}
		}
	}
}

// pubAndSub listens with a Publisher (policy pol) on an ipc endpoint and
// connects one of our SUB clients to it, both closed when t ends.
func pubAndSub(t *testing.T, pol *Policy) (*Publisher, *Client) {
	t.Helper()
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "p.sock")
	p, err := ListenPub(context.Background(), endpoint, pol, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := DialClient(context.Background(), "SUB", endpoint, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// TestClientSubAgainstPub: our client SUB subscribes to a topic on our PUB
// and receives only matching messages, in order.
func TestClientSubAgainstPub(t *testing.T) {
	p, c := pubAndSub(t, &Policy{})
	expectTopicFiltered(t, p, c)
}

// expectTopicFiltered subscribes c to "job/a/" on p and checks that it
// receives only that topic's messages, in order.
func expectTopicFiltered(t *testing.T, p *Publisher, c *Client) {
	t.Helper()
	subscribeAndWait(t, p, c, "job/a/")
	for i := 0; i < 3; i++ {
		_ = p.SendParts([]byte("job/b/"), []byte("other"))
		_ = p.SendParts([]byte("job/a/"), []byte{byte(i)}, bytes.Repeat([]byte("z"), 1000))
	}
	for i := 0; i < 3; i++ {
		m, err := c.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != 2 || string(m[0]) != "job/a/" || m[1][0] != byte(i) || len(m[1]) != 1001 {
			t.Fatalf("message %d: %q", i, m[0])
		}
	}
}

// subscribeAndWait subscribes c to topic and waits until p applied it
// (the subscription travels asynchronously).
func subscribeAndWait(t *testing.T, p *Publisher, c *Client, topic string) {
	t.Helper()
	if err := c.Subscribe(topic); err != nil {
		t.Fatal(err)
	}
	awaitSubscribers(t, p, topic, 1)
}

// subscribers connects n SUB clients with dial, subscribes each to topic
// and waits until p applied the subscriptions; they are closed when the
// test ends.
func subscribers(t *testing.T, p *Publisher, topic string, n int, dial func() (*Client, error)) []*Client {
	t.Helper()
	var subs []*Client
	for range n {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.Subscribe(topic); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, c)
	}
	awaitSubscribers(t, p, topic, n)
	return subs
}

// awaitSubscribers waits until at least n subscribers of p take topic
// (subscriptions travel asynchronously).
func awaitSubscribers(t *testing.T, p *Publisher, topic string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.subscribedN(topic) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d subscriptions to %q arrived", p.subscribedN(topic), n, topic)
		}
		time.Sleep(time.Millisecond) // no notification for a processed subscription
	}
}

// TestClientRefusesHugeFrame: a frame header claiming more than the bound
// is refused before anything is allocated for it.
func TestClientRefusesHugeFrame(t *testing.T) {
	c := &Client{r: bufioOf([]byte{flagLong, 0, 0, 0, 1, 0, 0, 0, 0})}
	if _, err := c.Recv(); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("huge frame: %v", err)
	}
}

// subscribed reports whether some subscriber asked for exactly topic.
func (p *Publisher) subscribed(topic string) bool { return p.subscribedN(topic) > 0 }

// subscribedN counts the subscribers whose subscriptions include topic.
func (p *Publisher) subscribedN(topic string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for s := range p.subs {
		s.tmu.Lock()
		for _, t := range s.topics {
			if string(t) == topic {
				n++
				break
			}
		}
		s.tmu.Unlock()
	}
	return n
}

func bufioOf(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// TestIncomingAlone: a handler's message is Alone when the peer has
// nothing else in flight and nothing has arrived behind it; a message with
// another one already buffered behind it is not, nor is one whose peer
// has another message still being handled.
func TestIncomingAlone(t *testing.T) {
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "r.sock")
	r, err := ListenRouter(context.Background(), endpoint, &Policy{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	type seen struct {
		body  string
		alone bool
	}
	got := make(chan seen, 8)
	gate := make(chan struct{})
	held := make(chan *Peer, 1)
	r.SetHandler(func(in Incoming) {
		body := string(in.Frames[len(in.Frames)-1])
		got <- seen{body, in.Alone}
		switch body {
		case "1":
			<-gate // the next messages queue behind this one meanwhile
		case "4":
			held <- in.Peer // still in flight when 5 arrives
			return
		}
		in.Peer.Release()
	})
	c, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	next := func() seen {
		t.Helper()
		select {
		case s := <-got:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("no message reached the handler")
			return seen{}
		}
	}
	if err := c.Send([]byte("1")); err != nil {
		t.Fatal(err)
	}
	if s := next(); s.body != "1" || !s.alone {
		t.Fatalf("first message: %+v, want alone", s)
	}
	// 2 and 3 in one write, while the reader is in the handler: when it
	// reads 2, 3 is behind it.
	var both []byte
	for _, b := range []string{"2", "3"} {
		bufs, _ := encodeMessage([][]byte{[]byte(b)})
		for _, x := range bufs {
			both = append(both, x...)
		}
	}
	if _, err := c.conn.Write(both); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if s2, s3 := next(), next(); s2.body != "2" || s2.alone || s3.body != "3" || !s3.alone {
		t.Fatalf("got %+v then %+v, want 2 not alone, then 3 alone", s2, s3)
	}
	if err := c.Send([]byte("4")); err != nil {
		t.Fatal(err)
	}
	if s := next(); s.body != "4" || !s.alone {
		t.Fatalf("got %+v, want 4 alone", s)
	}
	p := <-held
	if err := c.Send([]byte("5")); err != nil {
		t.Fatal(err)
	}
	if s := next(); s.body != "5" || s.alone {
		t.Fatalf("got %+v, want 5 not alone (4 is still being handled)", s)
	}
	p.Release()
}

// TestSendContextGivesUp: a Send waiting behind another one that the
// server does not take gives up with its context, not after the other's
// write timeout.
func TestSendContextGivesUp(t *testing.T) {
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "r.sock")
	r, err := ListenRouter(context.Background(), endpoint, &Policy{MaxFrameBytes: 64 << 20}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stuck := make(chan struct{})
	defer close(stuck)
	r.SetHandler(func(in Incoming) { <-stuck }) // the reader stops reading
	c, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send([]byte("first")); err != nil {
		t.Fatal(err)
	}
	big := make(chan error, 1)
	go func() { big <- c.Send(make([]byte, 32<<20)) }() // more than the socket buffers hold
	deadline := time.Now().Add(10 * time.Second)
	for len(c.wsem) == 0 { // until the big Send holds the connection
		if time.Now().After(deadline) {
			t.Fatal("the big Send did not start")
		}
		time.Sleep(time.Millisecond) // polling the semaphore
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = c.SendContext(ctx, []byte("second"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SendContext: %v, want its context's deadline", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("SendContext gave up after %v", took)
	}
	c.Close()
	if err := <-big; err == nil {
		t.Fatal("the big Send succeeded against a server that reads nothing")
	}
}

// TestCloseRemovesOnlyItsOwnSocketFile: an ipc listener removes its
// socket file when it closes, unless the path holds another socket by
// then (a supervisor started on the same endpoint while this one was
// shutting down: its file was deleted and no client could reach it).
func TestCloseRemovesOnlyItsOwnSocketFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.sock")
	endpoint := "ipc://" + path
	a, err := ListenRouter(context.Background(), endpoint, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The path is taken over: A's file goes (as a stale one would be
	// removed), B binds its own.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	b, err := ListenRouter(context.Background(), endpoint, nil, 0)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	a.Close()
	if _, err := os.Lstat(path); err != nil {
		b.Close()
		t.Fatalf("closing the first listener removed the second's socket file: %v", err)
	}
	c, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, "")
	if err != nil {
		b.Close()
		t.Fatalf("the second listener is unreachable: %v", err)
	}
	c.Close()
	b.Close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("closing the second listener left its socket file: %v", err)
	}
}

// TestSubscriptionsBounded: a subscriber is disconnected (reason
// too-many-subscriptions) past MaxSubscriptions subscriptions, with a
// topic over MaxTopicBytes, or past MaxSubscriptionBytes in all; up to the
// bound it is served.
func TestSubscriptionsBounded(t *testing.T) {
	for _, c := range []struct {
		name   string
		topics []string
	}{
		{"count", func() []string {
			var ts []string
			for i := 0; i <= MaxSubscriptions; i++ {
				ts = append(ts, fmt.Sprintf("job/%d/", i))
			}
			return ts
		}()},
		{"length", []string{"job/a/", strings.Repeat("x", MaxTopicBytes+1)}},
		{"bytes in all", func() []string { // (each within the length, fewer than the count)
			var ts []string
			for i := 0; i*(200+subscriptionOverhead) <= MaxSubscriptionBytes; i++ {
				ts = append(ts, fmt.Sprintf("%0200d", i))
			}
			return ts
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			rejected := make(chan string, 4)
			_, s := pubAndSub(t, &Policy{OnReject: func(r string) { rejected <- r }})
			for _, topic := range c.topics {
				if err := s.Subscribe(topic); err != nil {
					break // (the supervisor may have cut it already)
				}
			}
			select {
			case r := <-rejected:
				if r != "too-many-subscriptions" {
					t.Fatalf("rejected for %q", r)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("not disconnected")
			}
			if _, err := s.Recv(); err == nil {
				t.Fatal("still connected")
			}
		})
	}
	// Up to the bound: served; 1,024 topics of jobs, as clients name them,
	// fit.
	p, s := pubAndSub(t, &Policy{})
	topic := func(i int) string { return fmt.Sprintf("job/j-%016x/", i) }
	last := topic(MaxSubscriptions - 1)
	for i := 0; i < MaxSubscriptions; i++ {
		if err := s.Subscribe(topic(i)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !p.subscribed(last) {
		if time.Now().After(deadline) {
			t.Fatal("subscriptions never arrived")
		}
		time.Sleep(time.Millisecond) // no notification for a processed subscription
	}
	_ = p.SendParts([]byte(last), []byte("x"))
	if m, err := s.Recv(); err != nil || string(m[0]) != last {
		t.Fatalf("recv %q %v", m, err)
	}
}

// TestRejectReasonsComplete: every rejection reason the transport's code
// names is in RejectReasons (pre-created at 0 in the metrics, listed in
// docs/metrics.md).
func TestRejectReasonsComplete(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, r := range RejectReasons() {
		known[r] = true
	}
	re := regexp.MustCompile(`(?:reject\(|fail\(|violation\{|reason: |newOutQueue\([^,]+, [^,]+, )"([a-z-]+)"`)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			found++
			if !known[m[1]] {
				t.Errorf("%s: reason %q is not in RejectReasons", f, m[1])
			}
		}
	}
	if found < 10 {
		t.Fatalf("only %d reasons found in the source: the pattern no longer matches the code", found)
	}
}

// TestMechanismChosenFromServerGreeting: the client chooses its
// mechanism before it sees the server's. A token it found by itself goes only
// to a server that wants one (a server without auth gets NULL, on a
// second connection); any other disagreement is a *MechanismError naming
// both sides.
func TestMechanismChosenFromServerGreeting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open, err := ListenRouter(ctx, "tcp://127.0.0.1:0", &Policy{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	locked, err := ListenRouter(ctx, "tcp://127.0.0.1:0", &Policy{Token: "tok"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer locked.Close()
	for _, c := range []struct {
		name   string
		r      *Router
		o      DialOptions
		server string // "": connects
	}{
		{"found token, server without auth", open, DialOptions{Token: "tok", TokenToOwnOnly: true}, ""},
		{"found token, server with auth", locked, DialOptions{Token: "tok", TokenToOwnOnly: true}, ""},
		{"given token, server without auth", open, DialOptions{Token: "tok"}, "NULL"},
		{"no token, server with auth", locked, DialOptions{}, "PLAIN"},
	} {
		cl, err := DialClientWith(ctx, "DEALER", "tcp://"+c.r.Addr().String(), c.o)
		var me *MechanismError
		switch {
		case c.server == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.server != "" && (!errors.As(err, &me) || me.Server != c.server):
			t.Errorf("%s: got %v, want a MechanismError with server %s", c.name, err, c.server)
		}
		if cl != nil {
			cl.Close()
		}
	}
}
