package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// replayForgotten subscribes to a job from seq from to its end (limit
// events a reply), following more, and returns the events and the
// missing ranges, checked in order: every seq once, in an event or a
// range.
func replayForgotten(t *testing.T, c *client.Client, ref string, from uint64, limit int) ([]protocol.Event, []protocol.SeqRange, protocol.SubscribeResult) {
	t.Helper()
	var evs []protocol.Event
	var missing []protocol.SeqRange
	var res protocol.SubscribeResult
	next := from
	for range 100000 {
		var err error
		res, err = c.Subscribe(ctxT(t, 30*time.Second), ref, next, limit)
		if err != nil {
			t.Fatalf("subscribe %s from %d: %v", ref, next, err)
		}
		mi := 0
		account := func(below uint64) {
			for ; mi < len(res.Missing) && res.Missing[mi].From < below; mi++ {
				if res.Missing[mi].From != next {
					t.Fatalf("missing %+v, expected from %d", res.Missing[mi], next)
				}
				missing = append(missing, res.Missing[mi])
				next = res.Missing[mi].To + 1
			}
		}
		for _, ev := range res.Events {
			account(ev.Seq)
			if ev.Seq != next {
				t.Fatalf("event %d (%s), want %d", ev.Seq, ev.Kind, next)
			}
			evs = append(evs, ev)
			next++
		}
		account(^uint64(0))
		if !res.More {
			if next <= res.Job.LastSeq {
				t.Fatalf("not more at %d, last seq %d", next, res.Job.LastSeq)
			}
			return evs, missing, res
		}
	}
	t.Fatal("subscribe never ended")
	return nil, nil, res
}

// A job that left memory is replayed by subscribe from its files, by its
// id or its name, from the start or the middle, a few events at a time:
// the same output events (seq, time, payload) and terminal event as it
// had in memory; the events other than output, not in the files, are
// missing with no output (noOutput), so that Follow and a Job read its
// whole output, report nothing lost and end with its end; also after a
// restart. A forgotten service's events carry their runs.
func TestOutputOnDiskSubscribeForgotten(t *testing.T) {
	cfg := diskConfig(t)
	cfg.Jobs.MaxFinishedServices = 1
	ts := startServer(t, cfg)
	path, want := randomFile(t, t.TempDir(), "out", 1<<20, 51)
	info, fin, err := ts.client.SpawnWait(ctxT(t, 30*time.Second), protocol.SpawnArgs{
		Name: "replayed", Argv: []string{"sh", "-c", `cat "$1"; echo err >&2; exit 3`, "sh", path}, Output: protocol.OutputDisk,
	}, 25*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: %v %v", fin, err)
	}
	id := info.JobID
	inMemory := subscribeAll(t, ts.client, id, 1)
	forgetBySpawning(t, ts.client, id)

	check := func(when, ref string, from uint64, limit int) {
		t.Helper()
		evs, missing, res := replayForgotten(t, ts.client, ref, from, limit)
		if res.Job.JobID != id || res.Job.Name != "replayed" || res.Job.State != protocol.StateExited || res.Job.LastSeq != inMemory.events[len(inMemory.events)-1].Seq {
			t.Fatalf("%s: job %+v", when, res.Job)
		}
		k := 0
		for _, ev := range inMemory.events {
			if ev.Seq < from {
				continue
			}
			if ev.Kind != protocol.KindStdout && ev.Kind != protocol.KindStderr && !ev.Kind.Terminal() {
				continue // (not in the files)
			}
			for k < len(evs) && evs[k].Seq < ev.Seq {
				k++
			}
			if k == len(evs) || evs[k].Seq != ev.Seq || evs[k].Kind != ev.Kind || evs[k].Ts != ev.Ts || evs[k].Attempt != ev.Attempt || !bytes.Equal(evs[k].Payload, ev.Payload) {
				t.Fatalf("%s: event %d (%s) not replayed as it was", when, ev.Seq, ev.Kind)
			}
		}
		if len(evs) == 0 || !evs[len(evs)-1].Kind.Terminal() {
			t.Fatalf("%s: the replay does not end with the terminal event", when)
		}
		for _, m := range missing {
			if !m.NoOutput || m.Bytes != 0 {
				t.Fatalf("%s: missing %+v: not known to hold no output", when, m)
			}
		}
		if res.MissingBytes != 0 {
			t.Fatalf("%s: missing bytes %d", when, res.MissingBytes)
		}
	}
	follow := func(when string) {
		t.Helper()
		var out, errb bytes.Buffer
		var end protocol.ExitPayload
		err := ts.client.Follow(ctxT(t, 30*time.Second), id, 1, func(ev protocol.Event) error {
			switch ev.Kind {
			case protocol.KindGap:
				var g protocol.GapPayload
				if ev.DecodePayload(&g) != nil || !g.NoOutput {
					return gapErr(ev)
				}
			case protocol.KindStdout, protocol.KindStderr:
				p, err := ev.Output()
				if ev.Kind == protocol.KindStderr {
					errb.Write(p.Data)
				} else {
					out.Write(p.Data)
				}
				return err
			case protocol.KindExited, protocol.KindFailed:
				return ev.DecodePayload(&end)
			}
			return nil
		})
		if err != nil || !bytes.Equal(out.Bytes(), want) || errb.String() != "err\n" || end.ExitCode == nil || *end.ExitCode != 3 {
			t.Fatalf("%s: follow: %v, %d bytes of stdout (want %d), stderr %q, end %+v", when, err, out.Len(), len(want), errb.String(), end)
		}
		j := ts.client.Open(id, 4<<20)
		defer j.Close()
		got, err := io.ReadAll(j.Stdout())
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: Job's stdout: %d bytes (want %d), %v", when, len(got), len(want), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if p, err := j.Wait(ctx); err != nil || p.ExitCode == nil || *p.ExitCode != 3 || len(j.Lost()) != 0 {
			t.Fatalf("%s: Job's end %+v, %v, lost %v", when, p, err, j.Lost())
		}
	}
	for _, when := range []string{"forgotten", "after a restart"} {
		if when == "after a restart" {
			ts = ts.restart(t)
		}
		check(when, id, 1, 0)
		check(when+", by name", "replayed", 1, 0)
		check(when+", from the middle", id, inMemory.events[len(inMemory.events)/2].Seq, 0)
		check(when+", 7 at a time", id, 1, 7)
		follow(when)
	}
	// Past the end: nothing, not more.
	res, err := ts.client.Subscribe(ctxT(t, 10*time.Second), id, 1<<40, 0)
	if err != nil || len(res.Events) != 0 || len(res.Missing) != 0 || res.More {
		t.Fatalf("subscribe past the end: %+v, %v", res, err)
	}
	for _, ref := range []string{"nosuch", "replay*", "../" + id, "j-replayed", string(bytes.Repeat([]byte{'r'}, 100))} {
		if _, err := ts.client.Subscribe(ctxT(t, 10*time.Second), ref, 1, 0); !errors.Is(err, protocol.ErrNotFound) {
			t.Fatalf("subscribe %.20q: %v, want not-found", ref, err)
		}
	}

	// A service that ended and was forgotten: its runs' events.
	counter := filepath.Join(t.TempDir(), "n")
	svc, err := ts.client.Spawn(ctxT(t, 10*time.Second), protocol.SpawnArgs{
		Shell:   fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s; echo run $n; [ $n -ge 3 ]`, counter),
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, RestartDelayMs: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	forgetService := func(id string) {
		eventually(t, 30*time.Second, "the service's end", func() bool {
			st, err := ts.client.Status(ctxT(t, 10*time.Second), id)
			return err == nil && st.State == protocol.StateExited
		})
	}
	forgetService(svc.JobID)
	other, err := ts.client.Spawn(ctxT(t, 10*time.Second), protocol.SpawnArgs{Argv: []string{"true"}, Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure}})
	if err != nil {
		t.Fatal(err)
	}
	forgetService(other.JobID)
	eventually(t, 10*time.Second, "the first service forgotten", func() bool {
		_, err := ts.client.Status(ctxT(t, 10*time.Second), svc.JobID)
		return errors.Is(err, protocol.ErrNotFound)
	})
	evs, _, _ := replayForgotten(t, ts.client, svc.JobID, 1, 0)
	var runs []string
	for _, ev := range evs {
		if p, err := ev.Output(); err == nil && ev.Kind == protocol.KindStdout {
			runs = append(runs, fmt.Sprintf("%d:%s", ev.Attempt, p.Data))
		}
	}
	if last := evs[len(evs)-1]; fmt.Sprint(runs) != "[1:run 1\n 2:run 2\n 3:run 3\n]" || !last.Kind.Terminal() || last.Attempt != 3 {
		t.Fatalf("the forgotten service: %q, last event %s of attempt %d", runs, last.Kind, last.Attempt)
	}
}

// remove of a name finds a forgotten job on disk when exactly one has
// it (the reply gives its id); a name several forgotten jobs have is
// refused with their ids, newest first, and nothing is deleted; an id
// comes before a name; a name a job in memory has names that job; refs
// that are no name of a job on disk are not-found.
func TestOutputOnDiskRemoveByName(t *testing.T) {
	cfg := diskConfig(t)
	ts := startServer(t, cfg)
	spawn := func(id, name string) string {
		t.Helper()
		info, fin, err := ts.client.SpawnWait(ctxT(t, 20*time.Second), protocol.SpawnArgs{
			JobID: id, Name: name, Argv: []string{"echo", name}, Output: protocol.OutputDisk}, 15*time.Second)
		if err != nil || !fin {
			t.Fatalf("spawn %s: finished %v, %v", name, fin, err)
		}
		forgetBySpawning(t, ts.client, info.JobID)
		// (Its files' writer may not have recorded it yet: wait until
		// they name it.)
		eventually(t, 10*time.Second, "the forgotten job's files name it", func() bool {
			res, err := ts.client.Poll(ctxT(t, 10*time.Second), info.JobID, 0, 0)
			return err == nil && res.Job.Name == name
		})
		return info.JobID
	}
	onDisk := func(id string) bool {
		_, err := ts.client.Poll(ctxT(t, 10*time.Second), id, 0, 0)
		return err == nil
	}
	first, second := spawn("", "web"), spawn("", "web")
	var pe *protocol.Error
	err := ts.client.Remove(ctxT(t, 10*time.Second), "web")
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidArgument || pe.Details["reason"] != "ambiguous-name" ||
		pe.Details["jobIds"] != second+" "+first || !strings.Contains(pe.Message, second) {
		t.Fatalf("remove of a name two forgotten jobs have: %v (details %v)", err, pe)
	}
	if !onDisk(first) || !onDisk(second) {
		t.Fatal("a refused remove deleted files")
	}
	if err := ts.client.Remove(ctxT(t, 10*time.Second), second); err != nil {
		t.Fatal(err)
	}
	var res protocol.RemoveResult
	if err := ts.client.Call(ctxT(t, 10*time.Second), protocol.OpRemove, protocol.JobArgs{JobID: "web"}, &res); err != nil || res.JobID != first {
		t.Fatalf("remove web, one job on disk named so: %+v, %v", res, err)
	}
	if onDisk(first) {
		t.Fatal("remove by name left the files")
	}
	if err := ts.client.Remove(ctxT(t, 10*time.Second), "web"); !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("remove web again: %v, want not-found", err)
	}

	// An id before a name: a job of id "api" and one named "api".
	byID, named := spawn("api", "other"), spawn("", "api")
	if err := ts.client.Call(ctxT(t, 10*time.Second), protocol.OpRemove, protocol.JobArgs{JobID: "api"}, &res); err != nil || res.JobID != byID {
		t.Fatalf("remove api: %+v, %v; want the job of that id", res, err)
	}
	if !onDisk(named) {
		t.Fatal("the job named api was removed with the one of that id")
	}
	// A finished job in memory of that name is the one removed.
	info, fin, err := ts.client.SpawnWait(ctxT(t, 20*time.Second), protocol.SpawnArgs{Name: "api", Argv: []string{"true"}, Output: protocol.OutputDisk}, 15*time.Second)
	if err != nil || !fin {
		t.Fatal(err)
	}
	if err := ts.client.Call(ctxT(t, 10*time.Second), protocol.OpRemove, protocol.JobArgs{JobID: "api"}, &res); err != nil || res.JobID != info.JobID {
		t.Fatalf("remove api with a job of that name in memory: %+v, %v", res, err)
	}
	if !onDisk(named) {
		t.Fatal("the forgotten job named api was removed instead of the one in memory")
	}
	for _, ref := range []string{"ap*", "../api", "j-api", "nosuch", string(bytes.Repeat([]byte{'a'}, 100))} {
		if err := ts.client.Remove(ctxT(t, 10*time.Second), ref); !errors.Is(err, protocol.ErrNotFound) {
			t.Fatalf("remove %.20q: %v, want not-found", ref, err)
		}
	}
	if !onDisk(named) {
		t.Fatal("a refused remove deleted files")
	}
}
