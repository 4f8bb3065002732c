package jobs

import (
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
)

// WithMark starts every job with proc.EnvJobID=<its id> and proc.EnvStateID=stateID
// in its environment (replacing any value the supervisor inherited or the
// client gave): the mark by which a later supervisor of the same state
// finds what this one left running (proc.FindMarked), whether or not its
// journal recorded the job, and whatever process group or session a
// descendant moved to, as long as it kept the environment it was given.
func WithMark(stateID string) Option {
	return func(m *Manager) {
		m.mark = stateID
		m.environUnmarked = proc.Unmarked(m.environ)
	}
}
