package jobs

import "github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"

// State is a job's lifecycle state (lifecycle.State: it moves only as the
// lifecycle core says).
type State = lifecycle.State

// Job states (see lifecycle).
const (
	Starting   = lifecycle.Starting
	Running    = lifecycle.Running
	Exiting    = lifecycle.Exiting
	Exited     = lifecycle.Exited
	Restarting = lifecycle.Restarting
	Queued     = lifecycle.Queued
)
