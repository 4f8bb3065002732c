package jobs

import (
	"sync"
	"testing"
	"time"
)

// waitFor polls cond until it holds or 10 s pass (for states with no
// event to wait on).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRunnersReuseAndStop: work runs on kept goroutines, at most
// maxIdleRunners wait, and all of them end when stop closes.
func TestRunnersReuseAndStop(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	r := newRunners(stop, &wg)

	// One at a time: kept runners take the jobs (a new one starts only
	// when a job comes before the last runner is back waiting).
	ran := make(chan struct{})
	for range 100 {
		r.run(func() { ran <- struct{}{} })
		<-ran
	}
	if got := r.started.Load(); got > 50 {
		t.Fatalf("%d runners started for 100 jobs one after another", got)
	}

	// Many at once: new runners start; afterwards only maxIdleRunners stay.
	const n = maxIdleRunners + 40
	var hold sync.WaitGroup
	hold.Add(1)
	started := make(chan struct{}, n)
	for range n {
		r.run(func() { started <- struct{}{}; hold.Wait() })
	}
	for range n {
		<-started
	}
	hold.Done()
	waitFor(t, func() bool { return r.idle.Load() == maxIdleRunners })

	close(stop)
	wg.Wait() // every runner ended (the test times out otherwise)
	if got := r.idle.Load(); got != 0 {
		t.Fatalf("%d runners idle after stop", got)
	}
}
