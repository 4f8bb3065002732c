package server

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
)

// journalWriter is the server's durability: it writes the journal (a
// snapshot of every job, coalesced after changes and every flush
// interval: journalwrite.go), appends to its intents what a reply must
// not lose (job starts; kills, stops and starts, synced), scans the
// members of jobs without cgroups so that a successor can prove them its
// own (members.go), and reports its failures for health. Recovery
// (recover.go) reads what it wrote and hands it the intents it took
// over. The server owns one, made by New; its loop runs from Start until
// Close, which makes the last write.
type journalWriter struct {
	cfg        *Config // the server's
	log        *slog.Logger
	instanceID string
	journal    *journal.Journal
	jobs       *jobs.Manager // set by Start, before the loop runs
	cgroups    bool          // jobs get cgroups (set by Start): orphans are found through them

	intents        *journal.Intents               // set by recover (Start stops without one)
	intentErr      atomic.Pointer[journalFailure] // while intents cannot be written (health)
	lastIntentWarn atomic.Int64                   // unix ns of the last intent failure logged

	dirty   chan struct{} // a change to write (markDirty)
	stop    chan struct{} // closed by Close: the loop ends
	wg      sync.WaitGroup
	mu      sync.Mutex                     // serializes writes
	failing bool                           // under mu
	err     atomic.Pointer[journalFailure] // while journal writes fail (health)
	final   atomic.Bool                    // Close's last write is under way (no retry follows)
	corrupt atomic.Uint64                  // journals and intents found unusable (metrics)

	// Under mu: what one write reuses from the last.
	members   map[string][]journal.Member // last group scan
	recCache  map[string]cachedRecord     // encoded finished records
	recGen    uint64                      // writes so far (cachedRecord.gen)
	encBuf    [][]byte                    // the records of a write
	finBuf    []finRecord                 // the finished records of a write
	viewBuf   []journal.OpenClawJob       // the OpenClaw view of a write
	overBound bool                        // running jobs and services alone passed JournalMaxBytes
	// Under mu: member scans (members.go).
	leaderScanned map[string]bool  // jobs whose members were scanned for their leaderExit
	lastScan      time.Time        // the last member scan
	scannedRuns   map[string]int64 // the runs (job id: startedAt) the last scan saw running
	youngScanAt   time.Time        // when young jobs' members are due (zero: none)

	// Replies waiting for a journal write (await): tickets taken, and
	// the newest ticket a finished write attempt covered, with a channel
	// closed (and replaced) after each attempt.
	tickets         atomic.Uint64
	attemptMu       sync.Mutex
	attempted       uint64 // under attemptMu
	landed          uint64 // under attemptMu: the newest ticket a successful write covered
	attemptDone     chan struct{}
	lastDurableWarn atomic.Int64 // unix ns of the last "reply before the journal" warning
}

func newJournalWriter(j *journal.Journal, cfg *Config, log *slog.Logger, instanceID string) *journalWriter {
	return &journalWriter{cfg: cfg, log: log, instanceID: instanceID, journal: j,
		dirty: make(chan struct{}, 1), stop: make(chan struct{}), attemptDone: make(chan struct{})}
}

// start runs the write loop (until close).
func (w *journalWriter) start() {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.loop(w.stop)
	}()
}

// close stops the loop and makes the last write (the jobs as they ended);
// the intents file is closed, its lines kept for the next run.
func (w *journalWriter) close() {
	close(w.stop)
	w.wg.Wait()
	w.final.Store(true)
	w.write(false)
	if w.intents != nil {
		_ = w.intents.Close()
	}
}
