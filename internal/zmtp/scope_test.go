package zmtp

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// waitFor polls cond for up to 5 s (a subscription travels
// asynchronously and nothing tells when it was applied).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // no notification for a processed subscription
	}
}

// TestScope: a counted prefix is active exactly while some subscriber
// holds a subscription under it (cancelled or disconnected: no longer);
// SendScoped reaches only the subscriptions under it, and encodes
// nothing when none matches.
func TestScope(t *testing.T) {
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "p.sock")
	p, err := ListenPub(context.Background(), endpoint, &Policy{}, 1<<20, CountPrefix("exec:"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sc := p.Scope("exec:")
	if sc == nil || p.Scope("job/") != nil || sc.Active() {
		t.Fatalf("scopes: exec: %v (active %v), job/ %v", sc, sc.Active(), p.Scope("job/"))
	}
	var nilScope *Scope
	if nilScope.Active() {
		t.Fatal("a nil scope is active")
	}
	dial := func() *Client {
		c, err := DialClient(context.Background(), "SUB", endpoint, time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	all := dial() // the empty subscription: everything native, nothing scoped
	if err := all.Subscribe(""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the empty subscription", func() bool { return p.subscribed("") })
	encoded := 0
	body := func(b string) func() []byte { return func() []byte { encoded++; return []byte(b) } }
	p.SendScoped(sc, []byte("exec:a"), body("nobody"))
	if sc.Active() || encoded != 0 {
		t.Fatalf("the empty subscription activated the scope (%v) or got an encoding (%d)", sc.Active(), encoded)
	}

	c := dial()
	if err := c.Subscribe("exec:a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "exec:a counted", sc.Active)
	p.SendScoped(sc, []byte("exec:b"), body("not a's")) // (nobody's: not encoded)
	p.SendScoped(sc, []byte("exec:ab"), body("ab"))     // (a prefix match, as ZeroMQ's)
	p.SendScoped(sc, []byte("exec:a"), body("a"))
	p.SendScoped(sc, []byte("exec:a"), func() []byte { encoded++; return nil }) // (nothing to send)
	_ = p.SendParts([]byte("job/x/"), []byte("native"))
	_ = p.SendParts([]byte("exec:a"), []byte("last")) // (an unscoped send matches as always)
	for _, want := range []string{"ab", "a", "last"} {
		m, err := c.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != 2 || string(m[1]) != want {
			t.Fatalf("got %q, want %q", m, want)
		}
	}
	if encoded != 3 {
		t.Fatalf("%d bodies made, want 3 (one per message that had a subscriber)", encoded)
	}
	m, err := all.Recv()
	if err != nil || string(m[0]) != "job/x/" {
		t.Fatalf("the empty subscription got %q (%v), want the native message first: no scoped ones", m, err)
	}
	if err := c.Send([]byte("\x00exec:a")); err != nil { // cancel
		t.Fatal(err)
	}
	waitFor(t, "the cancel counted", func() bool { return !sc.Active() })
	if err := c.Subscribe("exec:z"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "exec:z counted", sc.Active)
	c.Close()
	waitFor(t, "the disconnect counted", func() bool { return !sc.Active() })
}
