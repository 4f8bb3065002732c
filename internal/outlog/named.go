package outlog

import (
	"cmp"
	"os"

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
	if protocol.ValidJobName(name) != nil {
		return "", false
	}
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return "", false
	}
	var best protocol.JobInfo
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir, err := s.jobDir(e.Name())
		if err != nil {
			continue
		}
		info, found := recordedInfo(dir, e.Name())
		if !found || info.Name != name {
			continue
		}
		if !ok || cmp.Or(cmp.Compare(endKey(info.JobInfo), endKey(best)), cmp.Compare(info.CreatedAt, best.CreatedAt)) > 0 {
			best, ok = info.JobInfo, true
		}
	}
	return best.JobID, ok
}

// endKey is when a job on disk ended, for Named: as recorded, or its
// creation for a job whose end is not recorded.
func endKey(info protocol.JobInfo) int64 {
	if info.State != protocol.StateExited || info.EndedAt == 0 {
		return info.CreatedAt
	}
	return info.EndedAt
}
