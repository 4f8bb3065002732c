package outlog

import (
	"cmp"
	"os"
	"slices"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Named returns the id of the job named name (SpawnArgs.Name) among the
// jobs whose files record it (info.json): the one that ended last (then:
// was created last), as a reference to a name finds the finished jobs in
// memory; a job whose end is not recorded (its supervisor died first:
// its record is the one made at its spawn) counts as ending when it was
// created. ok false: none. It reads the record of every job on disk: for
// a job no longer in memory, looked up by an operator.
func (s *Store) Named(name string) (id string, ok bool) {
	ids := s.NamedAll(name)
	if len(ids) == 0 {
		return "", false
	}
	return ids[0], true
}

// NamedAll returns the ids of every job on disk named name, in Named's
// order (the one Named finds first). It reads every job's record.
func (s *Store) NamedAll(name string) []string {
	if protocol.ValidJobName(name) != nil {
		return nil
	}
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return nil
	}
	var found []protocol.JobInfo
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir, err := s.jobDir(e.Name())
		if err != nil {
			continue
		}
		if rec, ok := recordedInfo(dir, e.Name()); ok && rec.Name == name {
			found = append(found, rec.JobInfo)
		}
	}
	slices.SortFunc(found, func(a, b protocol.JobInfo) int {
		return cmp.Or(cmp.Compare(endKey(b), endKey(a)), cmp.Compare(b.CreatedAt, a.CreatedAt), cmp.Compare(a.JobID, b.JobID))
	})
	ids := make([]string, len(found))
	for i, info := range found {
		ids[i] = info.JobID
	}
	return ids
}

// endKey is when a job on disk ended, for Named: as recorded, or its
// creation for a job whose end is not recorded.
func endKey(info protocol.JobInfo) int64 {
	if info.State != protocol.StateExited || info.EndedAt == 0 {
		return info.CreatedAt
	}
	return info.EndedAt
}
