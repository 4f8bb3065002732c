package jobs

import (
	"fmt"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// State is a job's lifecycle state. It only moves through
// (*Job).transition: forward for one-shot jobs; a service job goes from a
// run's end to Restarting and back to Starting, and a finished service
// may be started again (Exited -> Starting).
type State int

// Job states.
const (
	// Starting: the job is registered; its process is being started.
	Starting State = iota
	// Running: the process started and is being supervised.
	Running
	// Exiting: termination was requested (kill or timeout); the process
	// has not been reaped yet.
	Exiting
	// Exited: the job is finalized: reason, exit status and the last
	// event are recorded. Terminal.
	Exited
	// Restarting: a service job between runs, waiting for its delay.
	Restarting
)

func (s State) String() string {
	switch s {
	case Starting:
		return "starting"
	case Running:
		return "running"
	case Exiting:
		return "exiting"
	case Exited:
		return "exited"
	case Restarting:
		return "restarting"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Wire returns the protocol form of s.
func (s State) Wire() protocol.State { return protocol.State(s.String()) }

// legal lists the allowed moves.
var legal = map[State][]State{
	Starting:   {Running, Exited, Restarting},
	Running:    {Exiting, Exited, Restarting},
	Exiting:    {Exited, Restarting},
	Restarting: {Starting, Exited},
	Exited:     {Starting}, // only a service, by start or restart
}

// canMove reports whether from -> to is a legal transition.
func canMove(from, to State) bool {
	for _, s := range legal[from] {
		if s == to {
			return true
		}
	}
	return false
}
