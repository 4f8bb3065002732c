package server

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// record is sn's record as this writer writes it: stamped with its
// instance (the members are the write's, see scanMembers).
func (w *journalWriter) record(sn *jobs.Snapshot) journal.Record {
	r := sn.Record
	r.InstanceID = w.instanceID
	return r
}

// beforeRun writes the journal before a service's next run starts
// if the journal on disk may hold it as finished (its supervision ended,
// or nothing was written since recovery: the dead supervisor's record):
// see jobs.Hooks.BeforeServiceRun. A restart by policy needs no write:
// its record says running or restarting, which recovery reserves from.
func (w *journalWriter) beforeRun(id string) {
	w.mu.Lock()
	c, cached := w.recCache[id]
	first := w.recGen == 0
	w.mu.Unlock()
	if first || cached && c.svc {
		w.write(false)
	}
}

// recordIntent writes the intent record of a job whose run just started
// (jobs.Hooks.Started), before the start is answered: until the next
// journal write covers it, it is what tells a supervisor started after a
// crash that the job ran, with which process (pid, start time, group,
// cgroup), so that it records the job's fate and terminates what it left
// running instead of not knowing it. A one-shot job's record goes cut
// down as in a journal over its bound (slimRecord).
func (w *journalWriter) recordIntent(j *jobs.Job) {
	if w.intents == nil {
		return
	}
	if err := w.appendRecord(j, w.intents.Append); err != nil {
		if w.intentErr.Load() == nil {
			w.intentErr.CompareAndSwap(nil, &journalFailure{err: err, since: time.Now()})
		}
		w.warnIntents("job start not recorded in the journal intents: if the supervisor dies before the next journal write, the next run will not know this job (nor, without cgroups, terminate its processes)", err, "job", j.ID())
	}
}

// change returns once what op (a kill, a stop, a start) changed in
// job j is on the disk, so that the reply sent then holds through a crash
// (a kill acknowledged then lost came back as supervisor-restart, a
// stopped service as running): the job's record as it is now, appended
// to the intents and synced with those of other replies waiting at the
// same time (Intents.AppendDurable), a fraction of a millisecond where
// await waits for a rewrite of the whole journal. That remains the
// way when the intents cannot be written. The journal catches up in the
// background.
func (w *journalWriter) change(op string, j *jobs.Job) {
	if w.intents == nil || w.appendRecord(j, w.intents.AppendDurable) != nil {
		w.await(op, j.ID())
		return
	}
	w.markDirty()
}

// changed is journalChange of the job named id.
func (w *journalWriter) changed(op, id string) {
	if j, err := w.jobs.Get(id); err == nil {
		w.change(op, j)
		return
	}
	w.await(op, id)
}

// appendRecord appends j's record as it is now to the intents with
// appendf (nothing if j was removed already) and tells the job a
// successor restores it from that record.
func (w *journalWriter) appendRecord(j *jobs.Job, appendf func(func() *journal.Record) error) error {
	var sn jobs.Snapshot
	wrote := false
	err := appendf(func() *journal.Record {
		sn = j.Snapshot()
		if cur, err := w.jobs.Get(j.ID()); err != nil || cur != j {
			// Removed already (a quick one whose end a client saw): a
			// record would bring it back after a crash. (One over but
			// not removed gets its finished record: its spawn is being
			// answered, and must not be unknown after a crash.)
			return nil
		}
		r := w.record(&sn)
		if r.Service == nil {
			r = *slimRecord(r)
		}
		wrote = true
		return &r
	})
	if err != nil || !wrote {
		return err
	}
	if f := w.intentErr.Load(); f != nil && w.intentErr.CompareAndSwap(f, nil) {
		w.log.Info("journal intents written again", "path", journal.IntentsPath(w.journal.Path()))
	}
	// (a successor restores the job from this record: what it publishes
	// from now on counts from it, as from a journal write; see
	// jobs.Job.journalHeldLocked)
	w.jobs.Journaled([]jobs.Snapshot{sn})
	return nil
}

// health is health's journalError: why journal writes fail, and
// why job starts cannot be recorded in its intents ("" when both work).
func (w *journalWriter) health() string {
	j, in := w.err.Load().String(), w.intentErr.Load().String()
	switch {
	case in == "":
		return j
	case j == "":
		return "intents " + in
	}
	return j + "; intents " + in
}

// warnIntents logs a failure of the journal intents, at most once per
// durableWarnEvery.
func (w *journalWriter) warnIntents(msg string, err error, attrs ...any) {
	if !warnNow(&w.lastIntentWarn) {
		return
	}
	w.log.Error(msg, append(attrs, "path", journal.IntentsPath(w.journal.Path()), "err", err)...)
}

// plausibleExit reports whether a journaled leader exit is one (the
// journal is input): an exit code 0..255, or a signal's name.
func plausibleExit(le *journal.LeaderExit) bool {
	if le.ExitCode != nil {
		return *le.ExitCode >= 0 && *le.ExitCode <= 255 && le.Signal == ""
	}
	_, err := protocol.ParseSignal(le.Signal)
	return err == nil
}

// leaderExitUnscanned reports whether a job in snaps has a leader exit
// (the rest of its group being terminated) that no member scan saw yet,
// and notes them as seen (journalMu held): one scan each, not one per
// write for the whole grace period.
func (w *journalWriter) leaderExitUnscanned(snaps []jobs.Snapshot) bool {
	var now map[string]bool
	found := false
	for _, sn := range snaps {
		if sn.Record.LeaderExit != nil {
			if now == nil {
				now = map[string]bool{}
			}
			id := sn.Info.JobID
			now[id] = true
			found = found || !w.leaderScanned[id]
		}
	}
	w.leaderScanned = now
	return found
}

// durableWaitMax bounds how long a reply waits for the journal write that
// records what its request changed (see await).
const durableWaitMax = 3 * time.Second

// await returns once a journal write that began after this call
// was attempted: so that a reply sent then tells the client that what its
// request changed (op on job: a kill, a stop, a start) survives a crash
// of the supervisor; a kill acknowledged then lost came back as
// supervisor-restart, a stopped service as running. It waits at most
// durableWaitMax (a slow disk does not hold the reply longer), and not
// past the server's end. A reply that goes without its change journaled
// (the write failed, or took too long) is logged, at most once per
// durableWarnEvery (health reports a failing journal).
func (w *journalWriter) await(op, job string) {
	t := w.tickets.Add(1)
	w.markDirty()
	timer := time.NewTimer(durableWaitMax)
	defer timer.Stop()
	for {
		w.attemptMu.Lock()
		done, ok, ch := w.attempted >= t, w.landed >= t, w.attemptDone
		w.attemptMu.Unlock()
		if done {
			if !ok {
				w.warnNotDurable(op, job, "the journal write failed")
			}
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			w.warnNotDurable(op, job, fmt.Sprintf("no journal write landed within %s", durableWaitMax))
			return
		case <-w.stop:
			return
		}
	}
}

// warnNow reports whether a warning rate-limited by last (unix ns of the
// last one logged) may be logged now, at most once per durableWarnEvery,
// and notes it as logged.
func warnNow(last *atomic.Int64) bool {
	now := time.Now().UnixNano()
	l := last.Load()
	return now-l >= int64(durableWarnEvery) && last.CompareAndSwap(l, now)
}

// durableWarnEvery bounds how often warnNotDurable logs.
const durableWarnEvery = 10 * time.Second

// warnNotDurable logs that a reply goes before its change is journaled
// (at most once per durableWarnEvery).
func (w *journalWriter) warnNotDurable(op, job, why string) {
	if !warnNow(&w.lastDurableWarn) {
		return
	}
	w.log.Warn("reply sent before the journal recorded its change: a crash now would undo it", "op", op, "job", job, "why", why)
}

// attemptFinished records that a write attempt covering the tickets up
// to covered has finished (landed: it succeeded), and wakes awaitJournal.
func (w *journalWriter) attemptFinished(covered uint64, landed bool) {
	w.attemptMu.Lock()
	defer w.attemptMu.Unlock()
	w.attempted = max(w.attempted, covered)
	if landed {
		w.landed = max(w.landed, covered)
	}
	close(w.attemptDone)
	w.attemptDone = make(chan struct{})
}

// markDirty asks the journal loop for a write. It never blocks.
func (w *journalWriter) markDirty() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

// loop writes the journal after state changes (coalescing bursts
// into one write) and every flush interval, until stop is closed; Close
// writes the final version.
func (w *journalWriter) loop(stop <-chan struct{}) {
	t := time.NewTicker(w.cfg.JournalFlushInterval)
	defer t.Stop()
	// young fires when the members of young jobs are due (youngScanDue).
	young := time.NewTimer(time.Hour)
	young.Stop()
	defer young.Stop()
	armed := time.Time{}
	arm := func() {
		switch due := w.youngScanDue(); {
		case due.IsZero() && !armed.IsZero():
			young.Stop() // (scanned meanwhile, or the young job ended)
			armed = time.Time{}
		case !due.IsZero() && !due.Equal(armed):
			armed = due
			young.Reset(max(time.Until(due), 0))
		}
	}
	for {
		select {
		case <-stop:
			return
		case <-w.dirty:
			w.write(false)
			arm()
			// Coalesce bursts: changes arriving now are written together
			// after a short pause, bounding the write rate.
			pause := time.NewTimer(w.pause())
			select {
			case <-stop:
				pause.Stop()
				return
			case <-pause.C:
			}
		case <-young.C:
			armed = time.Time{}
			w.write(false)
			arm()
		case <-t.C:
			w.write(true)
			arm()
		}
	}
}

// journalMinInterval is the shortest time between two journal writes
// triggered by state changes: a change reaches the disk within about this
// long, and a burst of spawns costs one write per interval. With a cgroup
// per job, orphans are found through their cgroups whatever the journal
// says, so the journal only has to keep fates and may lag a little more.
const (
	journalMinInterval       = 25 * time.Millisecond
	journalMinIntervalCgroup = 100 * time.Millisecond
)

func (w *journalWriter) pause() time.Duration {
	if w.cgroups {
		return journalMinIntervalCgroup
	}
	return journalMinInterval
}

// write saves a snapshot of every job. Failures are logged (once
// per failure streak) and counted; the supervisor keeps running.
//
// The journal is bounded in bytes (JournalMaxBytes) as well as in finished
// jobs (JournalMaxFinished): running jobs and services are always written
// (they are what a restarted supervisor must reconcile or resume), and
// the most recently finished one-shot jobs fill what they leave, newest
// first. When running jobs and services alone pass the bound, the records
// of running one-shot jobs are written cut down (slimRecord: argv, shell,
// cwd, labels clipped; what reconciles the process is whole); a document
// Load would refuse (journal.MaxFileBytes) is never written.
func (w *journalWriter) write(periodic bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// (tickets taken before the jobs' snapshots below: what their
	// requests changed is in them)
	covered, landed := w.tickets.Load(), false
	defer func() { w.attemptFinished(covered, landed) }()
	if w.recCache == nil {
		w.recCache = map[string]cachedRecord{}
	}
	budget := w.cfg.JournalMaxBytes
	if budget <= 0 {
		budget = DefaultConfig().JournalMaxBytes
	}
	// Finished records do not change: each is encoded once and reused.
	// The cache is kept in place (entries not seen in this write are
	// dropped after it) and the list of records reused, so that a write
	// allocates for what changed only: with a thousand finished jobs kept
	// and ten writes a second, rebuilding both was a good part of the
	// supervisor's garbage. A finished record left out for size stays in
	// the cache without its encoding (it is not encoded again at every
	// write only to be left out again).
	w.recGen++
	gen := w.recGen
	encoded := w.encBuf[:0] // running jobs and services, then finished ones
	fin := w.finBuf[:0]
	cached := func(id string, seq uint64) bool {
		c, ok := w.recCache[id]
		if ok && c.seq == seq {
			c.gen = gen
			w.recCache[id] = c
			if c.svc {
				encoded = append(encoded, c.b)
			} else {
				fin = append(fin, finRecord{id: id, finN: c.finN, size: c.size, b: c.b})
			}
			return true
		}
		return false
	}
	var snaps []jobs.Snapshot
	var intentsCovered uint64
	take := func(last uint64) {
		intentsCovered = last
		snaps = w.jobs.Snapshots(w.cfg.JournalMaxFinished, cached)
	}
	if w.intents != nil {
		// (the intents appended before these snapshots are covered by
		// this write, later ones are newer than it: see Intents.Hold)
		w.intents.Hold(take)
	} else {
		take(0)
	}
	scan := periodic || !w.cgroups && w.leaderExitUnscanned(snaps)
	if !scan && !w.cgroups {
		scan = w.youngScanDueLocked(snaps)
	}
	if scan {
		// (also at once when a job's leader ended and the rest of its
		// group is being terminated, and soon after a job started:
		// without cgroups the members found now are how a restarted
		// supervisor proves them its own)
		w.scanMembers(snaps)
		w.lastScan, w.youngScanAt = time.Now(), time.Time{}
		w.scannedRuns = make(map[string]int64, len(snaps))
		for _, sn := range snaps {
			if youngScanned(sn) {
				w.scannedRuns[sn.Info.JobID] = sn.Info.StartedAt
			}
		}
	}
	var slimmable []int // running one-shot jobs' records, in encoded
	var slimRecs []journal.Record
	var slimView, slimSnap []int // and their entries in view, their snapshots
	view := w.viewBuf[:0]
	for si := range snaps {
		sn := &snaps[si]
		id := sn.Record.JobID
		r := w.record(sn)
		r.Members = w.members[id]
		b, err := json.Marshal(&r)
		if err != nil {
			w.log.Error("encode journal record", "job", id, "err", err)
			continue
		}
		if r.Finished() {
			w.recCache[id] = cachedRecord{seq: r.LastSeq, b: b, gen: gen, svc: r.Service != nil, finN: sn.FinN, size: len(b)}
			if r.Service == nil {
				fin = append(fin, finRecord{id: id, finN: sn.FinN, size: len(b), b: b})
				continue
			}
		} else {
			if r.Service == nil {
				slimmable = append(slimmable, len(encoded))
				slimRecs = append(slimRecs, r)
				slimView = append(slimView, len(view))
				slimSnap = append(slimSnap, si)
			}
			view = append(view, openClawJob(&sn.Info, false))
		}
		encoded = append(encoded, b)
	}
	must := int64(journalHeaderBytes)
	for _, b := range encoded {
		must += int64(len(b)) + 1
	}
	for i := range view {
		must += openClawBytes(&view[i]) + 1
	}
	if must > budget && len(slimmable) > 0 {
		// Running jobs and services alone pass the bound: the running
		// one-shot jobs' records go cut down (what reconciles the
		// process, its fate and output tail stay whole).
		for i, k := range slimmable {
			if b, err := json.Marshal(slimRecord(slimRecs[i])); err == nil && len(b) < len(encoded[k]) {
				must -= int64(len(encoded[k]) - len(b))
				encoded[k] = b
			}
			e := &view[slimView[i]]
			was := openClawBytes(e)
			*e = openClawJob(&snaps[slimSnap[i]].Info, true)
			must -= was - openClawBytes(e)
		}
	}
	if must > budget {
		if !w.overBound {
			w.log.Warn("running jobs and services alone pass --journal-max-bytes; no finished job is journaled while they do",
				"bytes", must, "journalMaxBytes", budget, "runningAndServices", len(encoded))
		}
		w.overBound = true
	} else {
		w.overBound = false
	}
	// The finished jobs' records fill the rest, newest first (then in
	// the order they finished: a restarted supervisor restores them in
	// file order, which is the order its bounds forget them in).
	slices.SortFunc(fin, func(a, b finRecord) int { return cmp.Compare(b.finN, a.finN) })
	room := budget - must
	kept := len(encoded)
	for _, f := range fin {
		if int64(f.size)+1 > room {
			if f.b != nil { // left out for size: remembered without its encoding
				c := w.recCache[f.id]
				c.b = nil
				w.recCache[f.id] = c
			}
			continue
		}
		room -= int64(f.size) + 1
		if f.b == nil {
			// It fits again (newer ones were removed or forgotten): its
			// record is encoded anew at the next write, asked for now
			// (else it waited for the next change or periodic write).
			delete(w.recCache, f.id)
			w.markDirty()
			continue
		}
		encoded = append(encoded, f.b)
	}
	slices.Reverse(encoded[kept:])
	for id, c := range w.recCache {
		if c.gen != gen {
			delete(w.recCache, id)
		}
	}
	defer func() {
		clear(encoded) // (no record kept alive by the reused lists)
		w.encBuf = encoded[:0]
		clear(fin)
		w.finBuf = fin[:0]
		clear(view)
		w.viewBuf = view[:0]
	}()
	hdr := &journal.File{InstanceID: w.instanceID, Pid: os.Getpid(), WrittenAt: time.Now().UnixMilli(), OpenClaw: view}
	if w.intents != nil {
		hdr.IntentsGeneration, hdr.IntentsCovered = w.intents.Generation(), intentsCovered
	}
	if err := w.journal.SaveEncoded(hdr, encoded); err != nil {
		if w.final.Load() {
			// (no retry follows: say what the next start will find)
			w.log.Error("journal write at shutdown failed: the journal on disk is older than this stop; the next start reports what became of the jobs from it and from the intents file", "path", w.journal.Path(), "err", err)
		} else if !w.failing {
			msg := "journal write failed; will keep retrying"
			if errors.Is(err, journal.ErrTooLarge) {
				msg = "journal write refused: running jobs and services alone would make a journal too large to read back; the previous journal is kept (will keep retrying)"
			}
			w.log.Error(msg, "path", w.journal.Path(), "err", err)
			w.err.Store(&journalFailure{err: err, since: time.Now()})
		}
		w.failing = true
		return
	}
	landed = true
	w.jobs.Journaled(snaps)
	if w.intents != nil {
		// (a file that could not be written is rewritten by Covered: if
		// that worked, intents are written again)
		was := w.intents.Writable()
		if err := w.intents.Covered(intentsCovered); err != nil {
			w.warnIntents("journal intents not compacted", err)
		} else if f := w.intentErr.Load(); f != nil && !was && w.intents.Writable() && w.intentErr.CompareAndSwap(f, nil) {
			w.log.Info("journal intents can be written again", "path", journal.IntentsPath(w.journal.Path()))
		}
	}
	if w.failing {
		w.log.Info("journal writes recovered", "path", w.journal.Path())
		w.failing = false
		w.err.Store(nil)
	}
}

// journalFailure is why journal writes fail, since when.
type journalFailure struct {
	err   error
	since time.Time
}

// String says so for health ("" for nil: writes land).
func (f *journalFailure) String() string {
	if f == nil {
		return ""
	}
	return fmt.Sprintf("not written since %s: %v", f.since.UTC().Format(time.RFC3339), f.err)
}

// journalHeaderBytes is what a journal write counts for the document
// around its records (version, instance id, pid, time) against
// JournalMaxBytes.
const journalHeaderBytes = 512

// finRecord is a finished one-shot job's record in a journal write (b
// nil: left out for size at an earlier write).
type finRecord struct {
	id   string
	finN uint64
	size int
	b    []byte
}

// cachedRecord is the encoding of a finished job's record, valid while
// its last seq is seq (a finished service started again changes it); b
// is nil for a record left out of the journal for size (size is its
// length).
type cachedRecord struct {
	seq  uint64
	b    []byte
	gen  uint64 // the last write that included it (see write)
	svc  bool   // a service's (always written)
	finN uint64 // a one-shot job's place in the finish order
	size int
}

// Bounds of a running one-shot job's record cut down by slimRecord.
const (
	slimArgBytes   = 1024 // each of argv (its first 16 elements), shell, cwd
	slimArgvBytes  = 4096 // argv in all
	slimLabelBytes = 4096 // labels in all
)

// slimRecord is r with its client-given text cut down (clipped, with a
// marker): argv, shell, cwd, labels (those that fit, in key order) and
// error. What identifies and reconciles the process (pid, group, start
// ticks, members, cgroup) and the job's fate and output tail stay whole.
// For running one-shot jobs only: a service's spec is what it is started
// again with, never cut.
func slimRecord(r journal.Record) *journal.Record {
	r.Argv = jobs.ClipArgv(r.Argv, 16, slimArgBytes, slimArgvBytes)
	r.Shell = jobs.Clip(r.Shell, slimArgBytes)
	r.Cwd = jobs.Clip(r.Cwd, slimArgBytes)
	r.Error = jobs.Clip(r.Error, slimArgBytes)
	n := 0
	for k, v := range r.Labels {
		n += len(k) + len(v)
	}
	if n > slimLabelBytes {
		keys := slices.Sorted(maps.Keys(r.Labels))
		kept := map[string]string{}
		n = 0
		for _, k := range keys {
			if v := r.Labels[k]; n+len(k)+len(v) <= slimLabelBytes {
				kept[k] = v
				n += len(k) + len(v)
			}
		}
		r.Labels = kept
	}
	return &r
}
