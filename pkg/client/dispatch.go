package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Mode says where a Dispatcher runs new jobs.
type Mode string

// Dispatcher modes.
const (
	// ModeOrigin runs jobs through the Dispatcher's Origin (usually a
	// pkg/local Engine: children of this process, with the same job
	// semantics as the supervisor).
	ModeOrigin Mode = "origin"
	// ModeZMQ runs jobs through the supervisor.
	ModeZMQ Mode = "zmq"
)

// Origin runs jobs for a Dispatcher's origin mode. pkg/local's Engine is
// one: this package does not link that engine itself, so that a program
// using the supervisor only does not carry it.
type Origin interface {
	// Start spawns a job and follows it, as Client.Start does.
	Start(ctx context.Context, args protocol.SpawnArgs, bufferBytes int) (*Job, error)
}

// Dispatcher runs commands through its Origin or through the supervisor
// and can switch between the two at run time. Switching affects only new
// jobs: a Job keeps the mode it started in. Safe for concurrent use.
type Dispatcher struct {
	c      *Client
	origin Origin

	mu   sync.Mutex
	mode Mode
	// gen counts SetMode calls: one that finishes after a later call
	// began (its health check was slow) does not override it.
	gen uint64
}

// NewDispatcher returns a Dispatcher in ModeOrigin. c may be nil when only
// origin mode is used; origin must not be nil (see pkg/local for the
// in-process engine).
func NewDispatcher(c *Client, origin Origin) *Dispatcher {
	return &Dispatcher{c: c, origin: origin, mode: ModeOrigin}
}

// Mode returns the current mode.
func (d *Dispatcher) Mode() Mode {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mode
}

// SetMode switches the mode for new jobs. Switching to ModeZMQ requires a
// healthy supervisor (a health check is made); switching to ModeOrigin
// needs nothing. Of calls that overlap, the last one begun wins: an earlier
// one that finishes later (its health check was slow) changes nothing and
// returns an error.
func (d *Dispatcher) SetMode(ctx context.Context, m Mode) error {
	switch {
	case m != ModeOrigin && m != ModeZMQ:
		return fmt.Errorf("unknown mode %q (want %s or %s)", m, ModeOrigin, ModeZMQ)
	case m == ModeZMQ && d.c == nil:
		return fmt.Errorf("switch to %s: no supervisor client configured", m)
	}
	d.mu.Lock()
	d.gen++
	gen := d.gen
	d.mu.Unlock()
	if m == ModeZMQ {
		h, err := d.c.Health(ctx)
		if err != nil {
			return fmt.Errorf("switch to %s: supervisor not healthy: %w", m, err)
		}
		if !h.OK {
			return fmt.Errorf("switch to %s: supervisor is shutting down", m)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen != gen {
		return fmt.Errorf("switch to %s: overtaken by a later SetMode (mode is %s)", m, d.mode)
	}
	d.mode = m
	return nil
}

// Start runs a job in the current mode.
func (d *Dispatcher) Start(ctx context.Context, args protocol.SpawnArgs, bufferBytes int) (*Job, error) {
	if d.Mode() == ModeZMQ {
		return d.c.Start(ctx, args, bufferBytes)
	}
	return d.origin.Start(ctx, args, bufferBytes)
}
