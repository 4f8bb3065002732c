package zmtp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rejections collects a policy's rejection reasons, and signals each.
type rejections struct {
	mu  sync.Mutex
	n   map[string]int
	got chan string
}

func newRejections() *rejections {
	return &rejections{n: map[string]int{}, got: make(chan string, 1000)}
}

func (r *rejections) add(reason string) {
	r.mu.Lock()
	r.n[reason]++
	r.mu.Unlock()
	select {
	case r.got <- reason:
	default:
	}
}

// snapshot is a copy of the counts (for messages: the map itself is
// written by the server's goroutines).
func (r *rejections) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.n)
}

func (r *rejections) count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

// countIs waits (up to 5 s) until reason was counted want times and
// reports whether it was: the client may see a refusal a moment before
// the listener counts it.
func (r *rejections) countIs(reason string, want int) bool {
	for deadline := time.Now().Add(5 * time.Second); r.count(reason) < want; {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond) // polling a counter: nothing to block on
	}
	return r.count(reason) == want
}

// waitFor waits until want of the reasons have been seen.
func (r *rejections) waitFor(t *testing.T, want int, d time.Duration, reasons ...string) {
	t.Helper()
	timeout := time.After(d)
	seen := 0
	for seen < want {
		select {
		case reason := <-r.got:
			for _, x := range reasons {
				if reason == x {
					seen++
				}
			}
		case <-timeout:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("saw %d of %d rejections %v within %v; all: %v", seen, want, reasons, d, r.snapshot())
		}
	}
}

// sizeRouter serves a Router whose handler answers a message naming a
// size in bytes with a reply of that many bytes.
func sizeRouter(t *testing.T, endpoint string, p *Policy, peerQueue int) (*Router, *atomic.Int64) {
	t.Helper()
	r, err := ListenRouter(context.Background(), endpoint, p, peerQueue)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	payload := bytes.Repeat([]byte{'x'}, 8<<20) // shared, never modified
	var maxQueued atomic.Int64
	r.SetHandler(func(in Incoming) {
		defer in.Peer.Release()
		n, err := strconv.Atoi(string(in.Frames[len(in.Frames)-1]))
		if err != nil || n > len(payload) {
			return
		}
		_ = r.Send(in.Peer, [][]byte{payload[:n]})
		for q := r.QueuedBytes(); q > maxQueued.Load(); q = r.QueuedBytes() {
			if maxQueued.CompareAndSwap(maxQueued.Load(), q) {
				break
			}
		}
	})
	return r, &maxQueued
}

// TestReplyQueueTotal: peers that ask for large replies and never read
// them are cut off once the replies waiting for all peers together exceed
// ReplyQueueBytes (each alone stays under its own bound), while a peer
// that reads gets every one of its large replies; and the bytes waiting
// stay near the budget.
func TestReplyQueueTotal(t *testing.T) {
	const (
		budget     = 16 << 20
		peerQueue  = 64 << 20 // (only the total acts here)
		nonReaders = 4
	)
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "r.sock")
	rej := newRejections()
	r, maxQueued := sizeRouter(t, endpoint, &Policy{ReplyQueueBytes: budget, WriteTimeout: 20 * time.Second, OnReject: rej.add}, peerQueue)

	reader, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var wg sync.WaitGroup
	for i := 0; i < nonReaders; i++ {
		c, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 40; j++ { // 40 MiB asked for, never read
				if c.Send([]byte(strconv.Itoa(1<<20))) != nil {
					return
				}
			}
		}()
	}
	// The reader meanwhile: 2 MiB replies.
	for i := 0; i < 30; i++ {
		size := 2 << 20
		if err := reader.Send([]byte(strconv.Itoa(size))); err != nil {
			t.Fatalf("reader send %d: %v", i, err)
		}
		got, err := reader.Recv()
		if err != nil {
			t.Fatalf("reader cut off at reply %d: %v (reply-queue-total rejections: %d)", i, err, rej.count("reply-queue-total"))
		}
		if len(got) != 1 || len(got[0]) != size {
			t.Fatalf("reply %d: %d frames", i, len(got))
		}
	}
	wg.Wait()
	rej.waitFor(t, nonReaders, 20*time.Second, "reply-queue-total")
	// Every handler adds at most one reply of its own before the budget
	// is enforced.
	if m := maxQueued.Load(); m > budget+(nonReaders+1)*(2<<20) {
		t.Fatalf("%d bytes waited at once; the budget is %d", m, budget)
	}
	// Still served.
	if err := reader.Send([]byte("10")); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Recv(); err != nil {
		t.Fatalf("reader after the others were cut off: %v", err)
	}
	if n := r.Peers(); n != 1 {
		t.Fatalf("%d peers left; want the reader alone", n)
	}
}

// TestPeerQueueBound: a reply larger than a peer's bound goes to a peer
// that reads (nothing else waits for it); a peer that never reads is cut
// off at its own bound long before the total, and what it had waiting is
// given back.
func TestPeerQueueBound(t *testing.T) {
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "r.sock")
	rej := newRejections()
	r, _ := sizeRouter(t, endpoint, &Policy{WriteTimeout: 20 * time.Second, OnReject: rej.add}, 4<<20)
	c, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 3; i++ {
		if err := c.Send([]byte(strconv.Itoa(7 << 20))); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Recv(); err != nil || len(got) != 1 || len(got[0]) != 7<<20 {
			t.Fatalf("reply of 7 MiB (bound 4 MiB) to a reader: %v", err)
		}
	}
	for j := 0; j < 20; j++ {
		if c.Send([]byte(strconv.Itoa(1<<20))) != nil {
			break
		}
	}
	rej.waitFor(t, 1, 10*time.Second, "slow-peer-queue")
	// (counted just before the close that lets go of its bytes)
	for deadline := time.Now().Add(5 * time.Second); r.QueuedBytes() != 0; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still counted after the peer was cut off", r.QueuedBytes())
		}
	}
}

// TestIdleEviction: at MaxConns, a new client takes the place of the
// connection idle the longest; connections with a request in flight or a
// held reply are not given up, and with nothing idle the newcomer is
// refused with an ERROR saying "too many connections".
func TestIdleEviction(t *testing.T) {
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "r.sock")
	rej := newRejections()
	var logMu sync.Mutex
	var refusedRemotes []string
	logf := func(msg string, args ...any) {
		for i := 0; i+1 < len(args); i += 2 {
			if args[i] == "remote" {
				logMu.Lock()
				refusedRemotes = append(refusedRemotes, fmt.Sprint(args[i+1]))
				logMu.Unlock()
			}
		}
	}
	// (no reserve for our own uid: TestOwnReserve)
	r, err := ListenRouter(context.Background(), endpoint, &Policy{MaxConns: 3, OwnReserve: -1, IdleEvictAfter: time.Nanosecond, OnReject: rej.add, Log: logf}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	held := make(chan *Peer, 4)
	blocked := make(chan *Peer, 4)
	r.SetHandler(func(in Incoming) {
		switch string(in.Frames[len(in.Frames)-1]) {
		case "block": // a request in flight (never answered)
			blocked <- in.Peer // (the peer counts it from before the handler)
			return
		case "hold": // a held reply (as the server's waits)
			in.Peer.Hold()
			held <- in.Peer
		}
		// Released before the reply: the client may count on the peer
		// being idle as soon as it has the reply.
		in.Peer.Release()
		_ = r.Send(in.Peer, [][]byte{[]byte("ok")})
	})
	dial := func() (*Client, error) {
		return DialClient(context.Background(), "DEALER", endpoint, 2*time.Second, "")
	}
	roundTrip := func(c *Client, msg string) error {
		if err := c.Send([]byte(msg)); err != nil {
			return err
		}
		_, err := c.Recv()
		return err
	}
	var clients []*Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	busy, holder, idle := clients[0], clients[1], clients[2]
	if err := busy.Send([]byte("block")); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(holder, "hold"); err != nil {
		t.Fatal(err)
	}
	p := <-held
	if err := roundTrip(idle, "ping"); err != nil {
		t.Fatal(err)
	}
	<-blocked

	// A newcomer evicts the idle one.
	c4, err := dial()
	if err != nil {
		t.Fatalf("newcomer at the limit with an idle connection: %v", err)
	}
	clients = append(clients, c4)
	if err := roundTrip(c4, "ping"); err != nil {
		t.Fatal(err)
	}
	// It is told why (so that a request it sent meanwhile, not handled,
	// can be sent again: pkg/client does).
	if _, err := idle.Recv(); err == nil || !strings.Contains(err.Error(), IdleEvicted) {
		t.Fatalf("the idle connection: %v; want closed with %q", err, IdleEvicted)
	}
	if !rej.countIs("evicted-idle", 1) {
		t.Fatalf("evicted-idle counted %d times", rej.count("evicted-idle"))
	}
	// Keep c4 busy too: now nothing is idle, and the next is refused.
	if err := c4.Send([]byte("block")); err != nil {
		t.Fatal(err)
	}
	<-blocked
	_, err = dial()
	if err == nil || !strings.Contains(err.Error(), TooManyConnections) {
		t.Fatalf("newcomer with nothing idle: %v; want %q", err, TooManyConnections)
	}
	if !rej.countIs("too-many-connections", 1) {
		t.Fatalf("too-many-connections counted %d times", rej.count("too-many-connections"))
	}
	// Refusals of ipc peers name them by pid (their address is "@").
	logMu.Lock()
	for _, remote := range refusedRemotes {
		if remote != fmt.Sprintf("pid %d", os.Getpid()) {
			t.Errorf("an ipc refusal logged remote=%q, want our pid", remote)
		}
	}
	logMu.Unlock()
	// The busy and holding ones are still served.
	if err := roundTrip(holder, "ping"); err != nil {
		t.Fatalf("connection holding a reply: %v", err)
	}
	// Once the hold ends, the holder is idle and may be evicted.
	p.Unhold()
	c5, err := dial()
	if err != nil {
		t.Fatalf("newcomer after the hold ended: %v", err)
	}
	clients = append(clients, c5)
	if _, err := holder.Recv(); err == nil {
		t.Fatal("the holder, idle now, was not the one evicted")
	}
}

// TestSubscriberEviction: at MaxConns, a new subscriber takes the place of
// the oldest subscriber of the peer holding the most connections: here
// every peer is this process, so a newcomer replaces its own oldest (it
// was refused: over tcp, where a peer is an address, clients behind one
// address locked every later subscriber out); another peer replaces the
// oldest too.
func TestSubscriberEviction(t *testing.T) {
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "p.sock")
	rej := newRejections()
	p, err := ListenPub(context.Background(), endpoint, &Policy{MaxConns: 2, OnReject: rej.add}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var subs []*Client
	defer func() {
		for _, c := range subs {
			c.Close()
		}
	}()
	dial := func() *Client {
		t.Helper()
		c, err := DialClient(context.Background(), "SUB", endpoint, time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, c)
		return c
	}
	registered := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); p.Subscribers() < n; runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatalf("%d subscribers registered, want %d", p.Subscribers(), n)
			}
		}
	}
	dial()
	registered(1)
	dial()
	registered(2)
	// The same peer again: it replaces its own oldest.
	dial()
	if _, err := subs[0].Recv(); err == nil {
		t.Fatal("the oldest subscriber was not the one given up")
	}
	registered(2)
	// Another peer (evictBusiestPeer with another key) replaces the oldest
	// left.
	if !p.evictBusiestPeer("pid 1") {
		t.Fatal("no subscriber given up for another peer")
	}
	if _, err := subs[1].Recv(); err == nil {
		t.Fatal("the oldest subscriber was not the one given up for another peer")
	}
	if !rej.countIs("evicted-busiest-peer", 2) {
		t.Fatalf("evicted-busiest-peer counted %d times", rej.count("evicted-busiest-peer"))
	}
}

// TestGreetingAsServer: the listener's greeting sets as-server with PLAIN
// (RFC 23/24: the PLAIN server) and not with NULL; our client sends 0,
// and accepts servers that say either (older supervisors said 0).
func TestGreetingAsServer(t *testing.T) {
	for _, tc := range []struct {
		token string
		want  byte
	}{{"", 0}, {"tok", 1}} {
		endpoint := "ipc://" + filepath.Join(t.TempDir(), "r.sock")
		r, err := ListenRouter(context.Background(), endpoint, &Policy{Token: tc.token}, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, addr, _ := Split(endpoint)
		c, err := net.Dial("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		mech := "NULL"
		if tc.token != "" {
			mech = "PLAIN"
		}
		g := make([]byte, greetingLen)
		g[0], g[9], g[10] = 0xFF, 0x7F, 3
		copy(g[12:], mech)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(g); err != nil {
			t.Fatal(err)
		}
		var got [greetingLen]byte
		if _, err := io.ReadFull(c, got[:]); err != nil {
			t.Fatal(err)
		}
		if got[32] != tc.want {
			t.Errorf("mechanism %s: as-server %d; want %d", mech, got[32], tc.want)
		}
		c.Close()
		r.Close()
	}

	// Our client against a fake PLAIN server saying as-server 0 or 1.
	for _, asServer := range []byte{0, 1} {
		dir := t.TempDir()
		ln, err := net.Listen("unix", filepath.Join(dir, "f.sock"))
		if err != nil {
			t.Fatal(err)
		}
		clientGreeting := make(chan []byte, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			g := make([]byte, greetingLen)
			g[0], g[9], g[10] = 0xFF, 0x7F, 3
			copy(g[12:], "PLAIN")
			g[32] = asServer
			if _, err := c.Write(g); err != nil {
				return
			}
			peer := make([]byte, greetingLen)
			if _, err := io.ReadFull(c, peer); err != nil {
				return
			}
			clientGreeting <- peer
			if _, _, err := readFrame(c, 4096); err != nil { // HELLO
				return
			}
			if writeCommand(c, "WELCOME", nil) != nil {
				return
			}
			if _, _, err := readFrame(c, 4096); err != nil { // INITIATE
				return
			}
			_ = writeCommand(c, "READY", metadata("Socket-Type", "ROUTER"))
			_, _, _ = readFrame(c, 4096) // until the client closes
		}()
		cl, err := DialClient(context.Background(), "DEALER", "ipc://"+filepath.Join(dir, "f.sock"), 2*time.Second, "tok")
		if err != nil {
			t.Fatalf("server with as-server %d: %v", asServer, err)
		}
		if g := <-clientGreeting; g[32] != 0 {
			t.Errorf("our client sent as-server %d; want 0", g[32])
		}
		cl.Close()
		<-done
		ln.Close()
	}
}

// TestBigReplyThenMore: a reply over the per-connection bound goes to a
// client that reads, even when it asked for another reply meanwhile (the
// second was counted with the first, still being written, and the client
// was cut off).
func TestBigReplyThenMore(t *testing.T) {
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "r.sock")
	rej := newRejections()
	sizeRouter(t, endpoint, &Policy{OnReject: rej.add}, 4<<20)
	c, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, n := range []int{6 << 20, 100} {
		if err := c.Send([]byte(strconv.Itoa(n))); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []int{6 << 20, 100} {
		got, err := c.Recv()
		if err != nil || len(got) != 1 || len(got[0]) != n {
			t.Fatalf("reply of %d: %v (rejections %v)", n, err, rej.snapshot())
		}
	}
}

// TestBudgetCutsWhoStoppedReading: with the replies of all connections
// over the budget, the one cut off is a peer whose replies pile up
// unread, not a client that just asked for one large reply and reads it
// (the queue with the most bytes was cut: that client).
func TestBudgetCutsWhoStoppedReading(t *testing.T) {
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "r.sock")
	rej := newRejections()
	r, _ := sizeRouter(t, endpoint, &Policy{ReplyQueueBytes: 16 << 20, WriteTimeout: 20 * time.Second, OnReject: rej.add}, 4<<20)
	for i := 0; i < 3; i++ {
		c, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for j := 0; j < 4; j++ { // ~4 MiB each, never read
			if err := c.Send([]byte(strconv.Itoa(1<<20 - 4<<10))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Wait until their replies wait (about 12 MiB, less what the sockets took).
	for deadline := time.Now().Add(10 * time.Second); r.QueuedBytes() < 10<<20; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("only %d bytes queued", r.QueuedBytes())
		}
	}
	reader, err := DialClient(context.Background(), "DEALER", endpoint, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if err := reader.Send([]byte(strconv.Itoa(8 << 20))); err != nil {
		t.Fatal(err)
	}
	got, err := reader.Recv()
	if err != nil || len(got) != 1 || len(got[0]) != 8<<20 {
		t.Fatalf("the reader was cut off: %v (rejections %v)", err, rej.snapshot())
	}
	rej.waitFor(t, 1, 10*time.Second, "reply-queue-total")
}

// TestOwnReserve: at MaxConns with nothing to give up (every connection
// holds a request), a peer of our own uid still gets one of OwnReserve
// more slots, so that the operator can always look in; past those, it is
// refused too.
func TestOwnReserve(t *testing.T) {
	t.Run("ipc", func(t *testing.T) { ownReserve(t, "ipc://"+filepath.Join(t.TempDir(), "r.sock")) })
	// (our uid told from the socket table, the peer on loopback)
	t.Run("tcp", func(t *testing.T) { ownReserve(t, "tcp://127.0.0.1:0") })
}

func ownReserve(t *testing.T, endpoint string) {
	rej := newRejections()
	r, err := ListenRouter(context.Background(), endpoint, &Policy{MaxConns: 2, OwnReserve: 2, OnReject: rej.add}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if strings.HasPrefix(endpoint, "tcp://") {
		endpoint = "tcp://" + r.Addr().String()
	}
	r.SetHandler(func(in Incoming) {
		if string(in.Frames[len(in.Frames)-1]) == "block" {
			return // (in flight for good: the peer is never idle)
		}
		in.Peer.Release()
		_ = r.Send(in.Peer, [][]byte{[]byte("ok")})
	})
	var clients []*Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i := 0; i < 4; i++ { // MaxConns, then the reserve
		c, err := DialClient(context.Background(), "DEALER", endpoint, 2*time.Second, "")
		if err != nil {
			t.Fatalf("connection %d (limit 2, reserve 2): %v", i, err)
		}
		clients = append(clients, c)
		if i == 3 { // the operator's: served
			if err := c.Send([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Recv(); err != nil {
				t.Fatalf("reserved connection: %v", err)
			}
		}
		if err := c.Send([]byte("block")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := DialClient(context.Background(), "DEALER", endpoint, 2*time.Second, ""); err == nil || !strings.Contains(err.Error(), TooManyConnections) {
		t.Fatalf("past the reserve: %v; want %q", err, TooManyConnections)
	}
}

// TestHandshakeDisplacement: connections that never finish the handshake,
// however many, do not keep out one that does: past MaxHandshakes a new
// connection displaces the oldest still in the handshake (counted as
// handshake-displaced), and a real client, which finishes within a round
// trip, gets in meanwhile.
func TestHandshakeDisplacement(t *testing.T) {
	endpoint := "tcp://127.0.0.1:0"
	rej := newRejections()
	r, err := ListenRouter(context.Background(), endpoint, &Policy{MaxConns: 4, MaxHandshakes: 4, HandshakeTimeout: time.Minute, OnReject: rej.add}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetHandler(func(in Incoming) {
		in.Peer.Release()
		_ = r.Send(in.Peer, [][]byte{[]byte("ok")})
	})
	const silent = 10
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < silent; i++ {
		c, err := net.Dial("tcp", r.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// The oldest six are cut (their handshake timeout is a minute away).
	if !rej.countIs("handshake-displaced", silent-4) {
		t.Fatalf("displaced %d; want %d", rej.count("handshake-displaced"), silent-4)
	}
	for i, c := range conns {
		// (closed before counted: a displaced one reads EOF at once; the
		// others, silent, get no greeting before their signature)
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, err := io.ReadAll(c)
		if displaced := i < silent-4; displaced != (err == nil) {
			t.Errorf("connection %d (displaced %v): read %v", i, displaced, err)
		}
	}
	c, err := DialClient(context.Background(), "DEALER", "tcp://"+r.Addr().String(), 2*time.Second, "")
	if err != nil {
		t.Fatalf("a real client among silent handshakes: %v", err)
	}
	defer c.Close()
	if err := c.Send([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recv(); err != nil {
		t.Fatal(err)
	}
}
