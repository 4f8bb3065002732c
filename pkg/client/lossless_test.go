package client_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// patterned returns the command printing n bytes of a known pattern, and
// the pattern's sha256.
func patterned(n int) (protocol.SpawnArgs, [32]byte) {
	// A 64-byte line repeated: "0123...xyz...\n".
	line := []byte(strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", 2)[:63] + "\n")
	h := sha256.New()
	for w := 0; w < n; w += len(line) {
		h.Write(line[:min(len(line), n-w)])
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	// yes prints the line forever; head cuts it at exactly n bytes.
	return protocol.SpawnArgs{Shell: fmt.Sprintf("yes '%s' | head -c %d", strings.TrimSuffix(string(line), "\n"), n)}, sum
}

func counter(t *testing.T, addr, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") {
			return strings.TrimPrefix(l, name+" ")
		}
	}
	return ""
}

// TestByteExactWithSlowConsumerAndGaps: a job prints patterned data through
// a deliberately slow consumer with the event queue's high water mark set
// low, so events are dropped and announced as gaps; the client reassembles
// exactly the bytes written (same sha256). Then the same with many jobs.
func TestByteExactWithSlowConsumerAndGaps(t *testing.T) {
	// The 200 MB run takes ~2 minutes under -race: it is the soak
	// size (make soak, EXEC_SUPERVISOR_SOAK=1); the default is 48 MB.
	size := 48 << 20
	if os.Getenv("EXEC_SUPERVISOR_SOAK") != "" {
		size = 200 << 20
	}
	jobs, perJob := 100, 1<<20
	if testing.Short() {
		size, jobs = 16<<20, 20
	}
	s := start(t, func(c *server.Config) {
		c.EventHWM = 8
		c.EventsQueuedOnly = true    // every event through the tiny queue
		c.Jobs.RingBytes = 256 << 20 // everything stays retained: backfill can fill every gap
		c.Jobs.MaxJobs = 200
		c.MetricsAddr = "127.0.0.1:0"
	})
	ctx := ctxT(t, 5*time.Minute)
	args, want := patterned(size)
	// A second job printing at the same time: with every event through
	// the tiny queue (EventsQueuedOnly), two publishing at once make it
	// overflow.
	noiseArgs, noiseWant := patterned(size / 2)
	noise, err := s.c.Start(ctx, noiseArgs, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer noise.Close()
	noiseErr := make(chan error, 1)
	go func() {
		h := sha256.New()
		k, err := io.Copy(h, noise.Stdout())
		var got [32]byte
		copy(got[:], h.Sum(nil))
		if err == nil && (k != int64(size/2) || got != noiseWant) {
			err = fmt.Errorf("second job: %d bytes, sha256 match %v", k, got == noiseWant)
		}
		noiseErr <- err
	}()
	j, err := s.c.Start(ctx, args, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	h := sha256.New()
	buf := make([]byte, 256<<10)
	n := 0
	for {
		k, err := j.Stdout().Read(buf)
		h.Write(buf[:k])
		n += k
		if n < 8<<20 {
			time.Sleep(time.Millisecond) // slow consumer at first
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", n, err)
		}
	}
	var got [32]byte
	copy(got[:], h.Sum(nil))
	if n != size || got != want {
		t.Fatalf("reassembled %d bytes (want %d), sha256 match %v", n, size, got == want)
	}
	if exit, err := j.Wait(ctx); err != nil || exit.Reason != protocol.ReasonExit {
		t.Fatalf("exit %+v %v", exit, err)
	}
	if err := <-noiseErr; err != nil {
		t.Fatal(err)
	}
	drops := counter(t, s.MetricsAddr().String(), "exec_supervisor_events_dropped_total")
	if drops == "" || drops == "0" {
		t.Fatalf("the test must force drops at the HWM; dropped = %q", drops)
	}
	t.Logf("one job: %d MiB byte-exact, %s events dropped at the HWM and backfilled", size>>20, drops)

	// Many jobs at once.
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	for i := 0; i < jobs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args, want := patterned(perJob)
			j, err := s.c.Start(ctx, args, 4<<20)
			if err != nil {
				errs <- err
				return
			}
			defer j.Close()
			h := sha256.New()
			k, err := io.Copy(h, j.Stdout())
			if err != nil {
				errs <- fmt.Errorf("job %s: %v after %d bytes", j.ID, err, k)
				return
			}
			var got [32]byte
			copy(got[:], h.Sum(nil))
			if k != int64(perJob) || got != want {
				errs <- fmt.Errorf("job %s: %d bytes, sha256 match %v", j.ID, k, got == want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d concurrent jobs byte-exact; %s events dropped in total", jobs, counter(t, s.MetricsAddr().String(), "exec_supervisor_events_dropped_total"))
	_ = context.Background
}
