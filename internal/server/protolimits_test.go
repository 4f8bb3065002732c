package server

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// envelope encodes a request map with its entries in the order given
// (values are encoded with protocol.Marshal; a []byte is taken as already
// encoded).
func envelope(t *testing.T, kv ...any) []byte {
	t.Helper()
	var b []byte
	n := len(kv) / 2
	b = append(b, 0xde, byte(n>>8), byte(n))
	for i := 0; i < len(kv); i += 2 {
		k, _ := protocol.Marshal(kv[i].(string))
		b = append(b, k...)
		if raw, ok := kv[i+1].([]byte); ok {
			b = append(b, raw...)
			continue
		}
		v, err := protocol.Marshal(kv[i+1])
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, v...)
	}
	return b
}

// dealerCalls sends bodies on one DEALER connection, all before reading a
// reply, and returns the replies by id (a reply without id under "").
func dealerCalls(t *testing.T, ts *testServer, bodies ...[]byte) map[string]*protocol.Reply {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	c, err := zmtp.DialClient(ctx, "DEALER", ts.cfg.Control, time.Second, ts.Server.token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, b := range bodies {
		if err := c.SendContext(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	type got struct {
		m   [][]byte
		err error
	}
	ch := make(chan got, 1)
	replies := map[string]*protocol.Reply{}
	for range bodies {
		go func() { m, err := c.Recv(); ch <- got{m, err} }()
		var g got
		select {
		case g = <-ch:
		case <-ctx.Done():
			t.Fatalf("%d replies of %d came: %v", len(replies), len(bodies), replies)
		}
		if g.err != nil {
			t.Fatal(g.err)
		}
		rep, err := protocol.DecodeReply(g.m[len(g.m)-1])
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := replies[rep.ID]; dup {
			t.Fatalf("two replies under id %q", rep.ID)
		}
		replies[rep.ID] = rep
	}
	return replies
}

// TestOversizedRequestAnsweredUnderItsID: a request over
// --max-request-bytes (but under the disconnect threshold) is refused
// with too-large under its own id, wherever the id is in the envelope, so
// that a DEALER with several requests in flight knows which was refused;
// the others are answered as usual. An id that cannot be read safely, or
// is over-long, is not echoed.
func TestOversizedRequestAnsweredUnderItsID(t *testing.T) {
	ts := startServer(t, testConfig(t)) // 1 MiB, the default
	big := strings.Repeat("x", protocol.MaxRequestBytes+8<<10)
	long := strings.Repeat("i", protocol.MaxIDBytes+1)
	args := map[string]any{"argv": []string{"echo", big}}
	health, _ := protocol.EncodeRequest("small-1", protocol.OpHealth, nil)
	health2, _ := protocol.EncodeRequest("small-2", protocol.OpHealth, nil)
	reps := dealerCalls(t, ts,
		envelope(t, "v", 2, "id", "big-1", "op", "spawn", "args", args),
		health,
		envelope(t, "v", 2, "op", "spawn", "args", args, "id", "big-2"),
		envelope(t, "v", 2, "op", "spawn", "args", args, "id", long),
		health2,
	)
	for _, id := range []string{"big-1", "big-2", ""} {
		rep := reps[id]
		if rep == nil || rep.OK || rep.Error.Code != protocol.CodeTooLarge {
			t.Fatalf("oversized request %q: want too-large under its id, got %+v (all: %v)", id, rep, reps)
		}
	}
	for _, id := range []string{"small-1", "small-2"} {
		if rep := reps[id]; rep == nil || !rep.OK {
			t.Fatalf("health %s: %+v", id, rep)
		}
	}
	// Nothing was started.
	if jobs, err := ts.client.ListJobs(ctxT(t, 5*time.Second), protocol.ListJobsArgs{}); err != nil || len(jobs) != 0 {
		t.Fatalf("jobs after oversized spawns: %v %v", jobs, err)
	}
}

// TestRequestLimitsOverWire: the 4096-element limit of a request holds in
// keys the server does not know (it was enforced only inside args), and
// health refuses args that are not a map like every op. An over-long id
// is never echoed, also with a wrong version.
func TestRequestLimitsOverWire(t *testing.T) {
	ts := startServer(t, testConfig(t))
	long := strings.Repeat("i", protocol.MaxIDBytes+1)
	entries := map[string]int{}
	for i := range 5000 {
		entries[fmt.Sprint(i)] = i
	}
	cases := []struct {
		name string
		body []byte
		id   string
		code protocol.Code // "" ok
		msg  string
	}{
		{"4096 elements under an unknown key", envelope(t, "v", 2, "id", "a", "op", "health", "junk", make([]int, 4096)), "a", "", ""},
		{"5000 elements under an unknown key", envelope(t, "v", 2, "id", "b", "op", "health", "junk", make([]int, 5000)), "b", protocol.CodeTooLarge, "5000 elements"},
		{"5000 entries under an unknown key", envelope(t, "v", 2, "id", "c", "op", "list-jobs", "junk", entries), "c", protocol.CodeTooLarge, "5000 elements"},
		{"5000 elements under an unknown spawn arg", envelope(t, "v", 2, "id", "d", "op", "spawn", "args", map[string]any{"argv": []string{"true"}, "junk": make([]int, 5000)}), "d", protocol.CodeTooLarge, "5000 elements"},
		{"nesting under an unknown key", envelope(t, "v", 2, "id", "e", "op", "health", "junk", append(bytes.Repeat([]byte{0x91}, 120), 0xc0)), "", protocol.CodeBadRequest, "nest"},
		{"health args an array", envelope(t, "v", 2, "id", "f", "op", "health", "args", []int{1}), "f", protocol.CodeBadRequest, "health args must be a msgpack map"},
		{"health args a string", envelope(t, "v", 2, "id", "g", "op", "health", "args", "x"), "g", protocol.CodeBadRequest, "health args must be a msgpack map"},
		{"health args nil", envelope(t, "v", 2, "id", "h", "op", "health", "args", nil), "h", "", ""},
		{"health args a map", envelope(t, "v", 2, "id", "i", "op", "health", "args", map[string]int{"x": 1}), "i", "", ""},
		{"over-long id, wrong version", envelope(t, "v", 1, "id", long, "op", "health"), "", protocol.CodeUnsupportedVersion, "version 1"},
		{"over-long id", envelope(t, "v", 2, "id", long, "op", "health"), "", protocol.CodeInvalidArgument, "request id longer"},
	}
	// Every op: args that are not a map are bad-request.
	for _, op := range protocol.Ops {
		id := "op-" + string(op)
		cases = append(cases, struct {
			name string
			body []byte
			id   string
			code protocol.Code
			msg  string
		}{string(op) + " args an array", envelope(t, "v", 2, "id", id, "op", string(op), "args", []int{1}), id, protocol.CodeBadRequest, string(op) + " args must be a msgpack map"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reps := dealerCalls(t, ts, tc.body)
			rep := reps[tc.id]
			if rep == nil {
				t.Fatalf("no reply under id %q: %v", tc.id, reps)
			}
			switch {
			case tc.code == "" && !rep.OK:
				t.Fatalf("want ok, got %+v", rep.Error)
			case tc.code != "" && (rep.OK || rep.Error.Code != tc.code || !strings.Contains(rep.Error.Message, tc.msg)):
				t.Fatalf("want %s (%q), got ok=%v %+v", tc.code, tc.msg, rep.OK, rep.Error)
			}
		})
	}
}

// TestListJobsPages: list-jobs never fails because the listing is large:
// it returns a page of about ListPageBytes (at least one job) and says
// that more follow; limit, after and brief select pages; a cursor keeps
// its place when its job is removed meanwhile.
func TestListJobsPages(t *testing.T) {
	cfg := testConfig(t)
	cfg.ListPageBytes = 64 << 10
	ts := startServer(t, cfg)
	ctx := ctxT(t, 60*time.Second)
	const n = 12
	arg := strings.Repeat("a", 20<<10) // about 3 jobs a page
	var ids []string
	for i := range n {
		j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true", arg}, Labels: map[string]string{"n": fmt.Sprint(i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.JobID)
	}
	for _, id := range ids {
		if _, done, err := ts.client.Wait(ctx, id, 20*time.Second); err != nil || !done {
			t.Fatalf("wait %s: %v %v", id, done, err)
		}
	}
	all := ts.jobs.List("", "") // the order list-jobs pages through
	if len(all) != n {
		t.Fatalf("%d jobs", len(all))
	}
	order := func(jobs []protocol.JobInfo) []string {
		var s []string
		for _, j := range jobs {
			s = append(s, j.JobID)
		}
		return s
	}
	want := strings.Join(order(all), " ")

	// A client that knows nothing of paging gets a first page, not an error.
	var first protocol.ListJobsResult
	if err := ts.client.Call(ctx, protocol.OpListJobs, nil, &first); err != nil {
		t.Fatal(err)
	}
	if len(first.Jobs) == 0 {
		t.Fatal("first page: no jobs")
	}
	if last := first.Jobs[len(first.Jobs)-1]; !first.More || len(first.Jobs) >= n || !strings.HasPrefix(first.Next, strconv.FormatInt(last.CreatedAt, 10)+":") || !strings.HasSuffix(first.Next, ":"+last.JobID) {
		t.Fatalf("first page: %d jobs, more %v, next %q", len(first.Jobs), first.More, first.Next)
	}
	if len(first.Jobs[0].Argv) != 2 || first.Jobs[0].Labels["n"] == "" {
		t.Fatalf("job in full: %+v", first.Jobs[0])
	}

	// Paging through by size, and by limit (brief: by limit only).
	for _, c := range []struct {
		limit int
		brief bool
		pages int // 0: at least 3
	}{{0, false, 0}, {1, false, n}, {5, false, 0}, {100, false, 0}, {0, true, 1}, {1, true, n}, {5, true, 3}, {n, true, 1}} {
		limit := c.limit
		var got []string
		pages := 0
		a := protocol.ListJobsArgs{Limit: limit, Brief: c.brief}
		for {
			r, err := ts.client.ListJobsPage(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if limit > 0 && len(r.Jobs) > limit || len(r.Jobs) == 0 && r.More {
				t.Fatalf("limit %d: page of %d, more %v", limit, len(r.Jobs), r.More)
			}
			got = append(got, order(r.Jobs)...)
			if !r.More {
				if r.Next != "" {
					t.Fatalf("last page with next %q", r.Next)
				}
				break
			}
			a.After = r.Next
		}
		if strings.Join(got, " ") != want {
			t.Fatalf("limit %d: paged\n%v\nwant\n%v", limit, got, want)
		}
		if c.pages == 0 && pages < 3 || c.pages > 0 && pages != c.pages {
			t.Fatalf("limit %d, brief %v: %d pages", limit, c.brief, pages)
		}
	}
	// client.ListJobs pages through itself.
	if jobs, err := ts.client.ListJobs(ctx, protocol.ListJobsArgs{}); err != nil || strings.Join(order(jobs), " ") != want {
		t.Fatalf("ListJobs: %v %v", order(jobs), err)
	}

	// Brief: no argv or labels; all in one page.
	r, err := ts.client.ListJobsPage(ctx, protocol.ListJobsArgs{Brief: true})
	if err != nil || r.More || len(r.Jobs) != n {
		t.Fatalf("brief: %d jobs, more %v, %v", len(r.Jobs), r.More, err)
	}
	for _, j := range r.Jobs {
		if j.Argv != nil || j.Labels != nil || j.Shell != "" || j.State != protocol.StateExited || j.JobID == "" {
			t.Fatalf("brief job: %+v", j)
		}
	}

	// The job a cursor names is removed: the next page starts after it.
	p1, err := ts.client.ListJobsPage(ctx, protocol.ListJobsArgs{Limit: 4, Brief: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.client.Remove(ctx, p1.Jobs[3].JobID); err != nil {
		t.Fatal(err)
	}
	p2, err := ts.client.ListJobsPage(ctx, protocol.ListJobsArgs{Limit: 4, Brief: true, After: p1.Next})
	if err != nil || len(p2.Jobs) != 4 || p2.Jobs[0].JobID != all[4].JobID {
		t.Fatalf("after a removed job: %v %v", order(p2.Jobs), err)
	}

	// Filters page too.
	if jobs, err := ts.client.ListJobs(ctx, protocol.ListJobsArgs{State: protocol.StateRunning}); err != nil || len(jobs) != 0 {
		t.Fatalf("running: %v %v", order(jobs), err)
	}

	// Bad paging args.
	for _, a := range []protocol.ListJobsArgs{{Limit: -1}, {After: "j-1"}, {After: "x:y"}} {
		if _, err := ts.client.ListJobsPage(ctx, a); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
			t.Fatalf("%+v: %v", a, err)
		}
	}
}

// TestListJobsPageHoldsOneBigJob: a job larger than the page budget still
// comes, alone on its page.
func TestListJobsPageHoldsOneBigJob(t *testing.T) {
	cfg := testConfig(t)
	cfg.ListPageBytes = 8 << 10
	ts := startServer(t, cfg)
	ctx := ctxT(t, 30*time.Second)
	var ids []string
	for range 3 {
		j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true", strings.Repeat("b", 20<<10)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.JobID)
	}
	for _, id := range ids {
		if _, _, err := ts.client.Wait(ctx, id, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	a := protocol.ListJobsArgs{}
	for page := 1; ; page++ {
		r, err := ts.client.ListJobsPage(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Jobs) != 1 || r.More != (page < 3) {
			t.Fatalf("page %d: %d jobs, more %v", page, len(r.Jobs), r.More)
		}
		if !r.More {
			break
		}
		a.After = r.Next
	}
}
