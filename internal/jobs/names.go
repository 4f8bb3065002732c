package jobs

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Job names. A job spawned with a name (SpawnArgs.Name) holds it while it
// is not finished (a service: while supervised, between runs included);
// no other job may take it then (ErrNameTaken). Once the holder has
// finished the name is free again, and a reference (Resolve) finds, in
// this order: the job of that id; the job holding the name; of the
// finished jobs of that name, the one that finished last (its end, then
// its creation). A name equal to a known job's id could never be found,
// so a spawn of one is refused too, as is a chosen job id equal to a name
// that a job holds.
//
// m.names indexes every known job by its name (m.mu): jobs are added when
// they become known and dropped when forgotten (forgetLocked), so that a
// forgotten job's memory is not kept by the index.

// nameState is a named job's hold on its name (guarded by Manager.mu).
type nameState struct {
	// held: the job is not finished and holds its name.
	held bool
	// endedMs is when it last let the name go (its end; 0: never).
	endedMs int64
}

// name is the job's name ("": none). Set before the job is visible (at
// spawn or restore) and never changed.
func (j *Job) name() string { return j.spec.Name }

// nameHolderLocked returns the job holding name, or nil. m.mu must be held.
func (m *Manager) nameHolderLocked(name string) *Job {
	for _, o := range m.names[name] {
		if o.acct.nameSt.held {
			return o
		}
	}
	return nil
}

// nameTakenLocked returns an ErrNameTaken error if j may not hold its
// name now: another job holds it, or a job other than j has that id; and,
// for a job id chosen at spawn (chosen), if a job holds the id as its
// name. m.mu must be held.
func (m *Manager) nameTakenLocked(j *Job, chosen bool) error {
	if chosen {
		if h := m.nameHolderLocked(j.id); h != nil && h != j {
			return &Error{Kind: ErrNameTaken, JobID: h.id,
				Msg: fmt.Sprintf("job id %q is the name of job %s, which has not finished: choose another id; nothing was started", j.id, h.id)}
		}
	}
	name := j.name()
	if name == "" {
		return nil
	}
	if h := m.nameHolderLocked(name); h != nil && h != j {
		return &Error{Kind: ErrNameTaken, JobID: h.id,
			Msg: fmt.Sprintf("name %q is held by job %s, which has not finished (a name is free again once its job has finished): nothing was started", name, h.id)}
	}
	if o := m.jobs[name]; o != nil && o != j {
		return &Error{Kind: ErrNameTaken, JobID: o.id,
			Msg: fmt.Sprintf("name %q is the id of job %s (ids come first: the name could not be used): nothing was started", name, o.id)}
	}
	return nil
}

// indexNameLocked adds j (just made known) to the name index, holding
// its name if held. m.mu must be held.
func (m *Manager) indexNameLocked(j *Job, held bool, endedMs int64) {
	name := j.name()
	if name == "" {
		return
	}
	if m.names == nil {
		m.names = map[string][]*Job{}
	}
	j.acct.nameSt = nameState{held: held, endedMs: endedMs}
	m.names[name] = append(m.names[name], j)
}

// releaseNameLocked lets j's name go: j finished at endedMs. m.mu must
// be held.
func (m *Manager) releaseNameLocked(j *Job, endedMs int64) {
	if j.name() != "" {
		j.acct.nameSt = nameState{endedMs: endedMs}
	}
}

// forgetLocked forgets job j: it leaves the jobs known and the name
// index. m.mu must be held.
func (m *Manager) forgetLocked(j *Job) {
	if m.jobs[j.id] == j {
		delete(m.jobs, j.id)
		if j.out.disk != nil {
			j.out.disk.Release() // (its files stay, for the age sweep)
		}
	}
	name := j.name()
	if name == "" {
		return
	}
	js := slices.DeleteFunc(m.names[name], func(o *Job) bool { return o == j })
	if len(js) == 0 {
		delete(m.names, name)
	} else {
		m.names[name] = js
	}
}

// Resolve returns the id of the job that ref names: ref itself when a
// job has that id, else the job holding the name ref, else the job of
// that name that finished last; ref as it is when none does (the caller's
// lookup then reports it not found).
func (m *Manager) Resolve(ref string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.jobs[ref] != nil {
		return ref
	}
	var best *Job
	for _, j := range m.names[ref] {
		if j.acct.nameSt.held {
			return j.id
		}
		if best == nil || cmp.Or(cmp.Compare(j.acct.nameSt.endedMs, best.acct.nameSt.endedMs), cmp.Compare(j.acct.createN, best.acct.createN)) > 0 {
			best = j
		}
	}
	if best == nil {
		return ref
	}
	return best.id
}

// validRestoredName is the name a job restored from the journal keeps:
// its recorded one, or none when that is not a valid name (the journal
// is input).
func (m *Manager) validRestoredName(id, name string) string {
	if name == "" {
		return ""
	}
	if err := protocol.ValidJobName(name); err != nil {
		m.log.Warn("journal: job name invalid; the job is restored without it", "job", id, "err", err)
		return ""
	}
	return name
}
