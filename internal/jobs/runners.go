package jobs

import (
	"sync"
	"sync/atomic"
)

// maxIdleRunners bounds the goroutines kept waiting for a job's next
// reader or waiter.
const maxIdleRunners = 64

// runners runs a job's runLoop (or its output readers and its waiter) on
// goroutines kept from earlier jobs. A goroutine starts with a small stack, and the way
// from a reader or a waiter to the event socket (flush, encode, publish,
// write) is deep enough that every new one grew its stack, copying it,
// at least once per job: measured as 8% of the supervisor's CPU running
// /bin/true one after another. A kept goroutine has grown already.
//
// Idle runners wait for work or for stop; they belong to wg (the
// manager's) like the work they run.
type runners struct {
	work    chan func()
	stop    <-chan struct{}
	wg      *sync.WaitGroup
	idle    atomic.Int32
	started atomic.Int32 // runners started so far
}

func newRunners(stop <-chan struct{}, wg *sync.WaitGroup) *runners {
	return &runners{work: make(chan func()), stop: stop, wg: wg}
}

// run runs f on an idle runner, or on a new one.
func (r *runners) run(f func()) {
	select {
	case r.work <- f:
	default:
		r.started.Add(1)
		r.wg.Add(1)
		go r.loop(f)
	}
}

func (r *runners) loop(f func()) {
	defer r.wg.Done()
	for {
		f()
		f = nil
		if r.idle.Add(1) > maxIdleRunners {
			r.idle.Add(-1)
			return
		}
		select {
		case f = <-r.work:
			r.idle.Add(-1)
		case <-r.stop:
			r.idle.Add(-1)
			return
		}
	}
}
