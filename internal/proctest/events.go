package proctest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// EventWatch follows every job's events on a supervisor's event socket
// for a benchmark: when each job's first output and its terminal event
// were received. Close stops it.
type EventWatch struct {
	sub  *zmtp.Client
	done chan struct{}
	mu   sync.Mutex
	seen map[watchKey]*sighting
}

type watchKey struct {
	id   string
	exit bool // the terminal event (else the first output event)
}

type sighting struct {
	ch chan struct{} // closed when received
	at time.Time     // when received (set before ch is closed)
}

// WatchEvents subscribes to every job's events at eventAddr and returns
// once the subscription is live (a /bin/true spawned through c was heard
// ending).
func WatchEvents(b *testing.B, c *client.Client, eventAddr string) *EventWatch {
	ctx := context.Background()
	sub, err := zmtp.DialClient(ctx, "SUB", eventAddr, time.Second, "")
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.Subscribe(protocol.TopicJobPrefix); err != nil {
		b.Fatal(err)
	}
	w := &EventWatch{sub: sub, done: make(chan struct{}), seen: map[watchKey]*sighting{}}
	go w.run()
	// The subscription travels asynchronously: wait until one job's exit
	// is heard.
	for {
		j, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"/bin/true"}})
		if err != nil {
			w.Close()
			b.Fatal(err)
		}
		if _, err := w.Ended(j.JobID, 200*time.Millisecond); err == nil {
			return w
		}
		w.Forget(j.JobID)
	}
}

func (w *EventWatch) run() {
	defer close(w.done)
	for {
		m, err := w.sub.Recv()
		if err != nil {
			return
		}
		if len(m) != 2 {
			continue
		}
		ev, err := protocol.DecodeEventNoCopy(m[1])
		if err != nil {
			continue
		}
		switch {
		case ev.Kind.Terminal():
			w.mark(watchKey{ev.JobID, true})
		case ev.Kind == protocol.KindStdout || ev.Kind == protocol.KindStderr:
			w.mark(watchKey{ev.JobID, false})
		}
	}
}

func (w *EventWatch) sightingLocked(k watchKey) *sighting {
	s := w.seen[k]
	if s == nil {
		s = &sighting{ch: make(chan struct{})}
		w.seen[k] = s
	}
	return s
}

func (w *EventWatch) mark(k watchKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.sightingLocked(k); s.at.IsZero() {
		s.at = time.Now()
		close(s.ch)
	}
}

func (w *EventWatch) wait(k watchKey, d time.Duration) (time.Time, error) {
	w.mu.Lock()
	s := w.sightingLocked(k)
	w.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.ch:
		w.mu.Lock()
		defer w.mu.Unlock()
		return s.at, nil
	case <-t.C:
		return time.Time{}, context.DeadlineExceeded
	}
}

// Ended waits up to d for job id's terminal event and returns when it
// was received.
func (w *EventWatch) Ended(id string, d time.Duration) (time.Time, error) {
	return w.wait(watchKey{id, true}, d)
}

// FirstOutput waits up to d for job id's first output event and returns
// when it was received.
func (w *EventWatch) FirstOutput(id string, d time.Duration) (time.Time, error) {
	return w.wait(watchKey{id, false}, d)
}

// Forget drops what was seen of job id.
func (w *EventWatch) Forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.seen, watchKey{id, true})
	delete(w.seen, watchKey{id, false})
}

// Close stops watching and waits for the watcher to end.
func (w *EventWatch) Close() {
	w.sub.Close()
	<-w.done
}
