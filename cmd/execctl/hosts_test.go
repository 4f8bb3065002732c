package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
)

// hosts are supervisors on loopback addresses of their own (127.0.0.2,
// 127.0.0.3, ...) over CURVE, as supervisors on several hosts are, and
// the flags that point execctl at them.
type hosts struct {
	sups     []*supervisor
	ctl, evt []string // each one's endpoints
	keyFlags []string // --curve-server-key-file ... --curve-key-file ...
}

// startHosts starts n supervisors on 127.0.0.2.. over CURVE (one key pair
// for all, as docs/kubernetes.md has it, and one client key admitted).
func startHosts(t *testing.T, n int) *hosts {
	t.Helper()
	dir := shortTempDir(t)
	serverKey := filepath.Join(dir, "server.key")
	if _, _, err := zmtp.LoadOrCreateCurveKey(serverKey); err != nil {
		t.Fatal(err)
	}
	kp, err := zmtp.NewCurveKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	clientKey := filepath.Join(dir, "client.key")
	if err := os.WriteFile(clientKey, []byte(kp.Secret.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	allow := filepath.Join(dir, "curve-clients")
	if err := os.WriteFile(allow, []byte(kp.Public.String()+" hosts-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &hosts{keyFlags: []string{"--curve-server-key-file", zmtp.CurvePublicPath(serverKey), "--curve-key-file", clientKey}}
	for i := range n {
		ip := fmt.Sprintf("127.0.0.%d", i+2)
		evt := hostPort(t, ip)
		s := startSupervisorWith(t, func(c *server.Config) {
			c.Control, c.Event = "tcp://"+ip+":0", "tcp://"+evt
			c.Curve, c.CurveKeyFile, c.CurveClientsFile = true, serverKey, allow
			c.TCPLoopbackUID = false
		})
		h.sups = append(h.sups, s)
		h.ctl = append(h.ctl, "tcp://"+s.srv.Addr().String())
		h.evt = append(h.evt, "tcp://"+s.srv.EventAddr().String())
	}
	return h
}

// hostPort returns ip and a tcp port free on it now (the control
// socket's is port 0: the server must tell one from the other).
func hostPort(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("cannot listen on %s (loopback addresses beyond 127.0.0.1 needed): %v", ip, err)
	}
	defer l.Close()
	return l.Addr().String()
}

// flags point execctl at the hosts listed (by index; all without any).
func (h *hosts) flags(which ...int) []string {
	if len(which) == 0 {
		for i := range h.ctl {
			which = append(which, i)
		}
	}
	var ctl, evt []string
	for _, i := range which {
		ctl, evt = append(ctl, h.ctl[i]), append(evt, h.evt[i])
	}
	return append([]string{"--control", strings.Join(ctl, ","), "--event", strings.Join(evt, ",")}, h.keyFlags...)
}

// run runs execctl against the hosts (all of them).
func (h *hosts) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return execctl(t, append(h.flags(), args...)...)
}

// must is run that fails the test unless execctl exits 0.
func (h *hosts) must(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := h.run(t, args...)
	if code != 0 {
		t.Fatalf("execctl %q: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out
}

// one runs execctl against host i alone (one endpoint: execctl as ever).
func (h *hosts) one(t *testing.T, i int, args ...string) string {
	t.Helper()
	code, out, errs := execctl(t, append(h.flags(i), args...)...)
	if code != 0 {
		t.Fatalf("execctl (host %d) %q: exit %d\nstdout: %s\nstderr: %s", i, args, code, out, errs)
	}
	return out
}

// spawnOn spawns through the pool (all hosts) until a job lands on host
// i (sessions place jobs; which session goes where is the pool's hash),
// and returns its id.
func (h *hosts) spawnOn(t *testing.T, i int, argv ...string) string {
	t.Helper()
	for s := 0; s < 64; s++ {
		out := h.must(t, append([]string{"spawn", "--json", "--stdin", "--session", fmt.Sprintf("s-%d", s), "--"}, argv...)...)
		job := jobOf(t, jsonObject(t, out))
		if job["host"] == h.ctl[i] {
			return job["jobId"].(string)
		}
		h.must(t, "kill", "--signal", "SIGKILL", job["jobId"].(string)) // (on another host: not wanted)
	}
	t.Fatalf("64 sessions and none placed on host %d", i)
	return ""
}

// TestHostsListStatusAndOps: with several endpoints, list and status
// show every host's jobs with their host (a HOST column, "host" in JSON);
// an op on a job goes to its host, whatever names it (the pool's id, a
// supervisor's id or its prefix, a name); a name on two hosts is refused
// naming both; health has a line per host.
func TestHostsListStatusAndOps(t *testing.T) {
	h := startHosts(t, 2)
	a := strings.TrimSpace(h.one(t, 0, "spawn", "--name", "build", "--", "sh", "-c", "echo from-a"))
	b := strings.TrimSpace(h.one(t, 1, "spawn", "--name", "build", "--", "sh", "-c", "echo from-b"))
	h.one(t, 0, "wait", a)
	h.one(t, 1, "wait", b)
	p := h.spawnOn(t, 1, "sh", "-c", "echo placed; read x") // (runs until written to)

	out := h.must(t, "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "JOB ") || !strings.Contains(lines[0], " HOST ") {
		t.Fatalf("list header: %q", lines[0])
	}
	for id, host := range map[string]string{a: h.ctl[0], b: h.ctl[1], p: h.ctl[1]} {
		if !strings.Contains(out, id) || !strings.Contains(rowOf(out, id), hostName(host)) {
			t.Errorf("list: job %s not shown on host %s:\n%s", id, hostName(host), out)
		}
	}
	var listed struct {
		Jobs []struct {
			JobID, Host string
		}
	}
	if err := json.Unmarshal([]byte(h.must(t, "--json", "list")), &listed); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, j := range listed.Jobs {
		got[j.JobID] = j.Host
	}
	if got[a] != h.ctl[0] || got[b] != h.ctl[1] || got[p] != h.ctl[1] {
		t.Errorf("list --json hosts: %v", got)
	}
	if all := h.must(t, "status"); !strings.Contains(all, " HOST ") || !strings.Contains(all, p) {
		t.Errorf("status without a job (the list):\n%s", all)
	}

	// status of one job, named every way there is.
	if st := h.must(t, "status", b); !strings.Contains(st, "host:") || !strings.Contains(rowOf(st, "host:"), hostName(h.ctl[1])) {
		t.Errorf("status %s:\n%s", b, st)
	}
	if job := jobOf(t, jsonObject(t, h.must(t, "--json", "status", p))); job["host"] != h.ctl[1] || job["jobId"] != p {
		t.Errorf("status --json of the pool's id: %v", job)
	}
	if job := jobOf(t, jsonObject(t, h.must(t, "--json", "status", a[:6]))); job["jobId"] != a || job["host"] != h.ctl[0] {
		t.Errorf("status by an id prefix: %v", job)
	}
	if job := jobOf(t, jsonObject(t, h.must(t, "--json", "status", p[:14]))); job["jobId"] != p {
		t.Errorf("status by a prefix of the pool's id: %v", job)
	}
	code, _, errs := h.run(t, "status", "build")
	if code != exitUsage || !strings.Contains(errs, hostName(h.ctl[0])) || !strings.Contains(errs, hostName(h.ctl[1])) {
		t.Errorf("status of a name on both hosts: exit %d\n%s", code, errs)
	}
	if code, _, errs := h.run(t, "status", "j-0123456789abcdef"); code != exitNotFound {
		t.Errorf("status of a job no host knows: exit %d\n%s", code, errs)
	}

	// Ops go to the job's host.
	if out := h.must(t, "poll", b); out != "from-b\n" {
		t.Errorf("poll %s: %q", b, out)
	}
	out = h.must(t, "logs", a, b)
	if !strings.Contains(out, a+" | from-a") || !strings.Contains(out, b+" | from-b") {
		t.Errorf("logs of jobs on two hosts:\n%s", out)
	}
	h.must(t, "write", p, "go")
	if code, out, errs := h.run(t, "wait", p); code != 0 {
		t.Errorf("wait %s: exit %d %q %q", p, code, out, errs)
	}
	if out := h.one(t, 1, "poll", p); out != "placed\n" {
		t.Errorf("the pool's job, on its host: %q", out)
	}
	// kill --label across hosts; stop and history on a job's host.
	k0 := strings.TrimSpace(h.one(t, 0, "spawn", "--label", "batch=7", "--", "sleep", "300"))
	k1 := strings.TrimSpace(h.one(t, 1, "spawn", "--label", "batch=7", "--", "sleep", "300"))
	out = h.must(t, "kill", "--signal", "SIGKILL", "--label", "batch=7")
	if !strings.Contains(out, k0) || !strings.Contains(out, k1) {
		t.Errorf("kill --label across hosts:\n%s", out)
	}
	if code, _, errs := h.run(t, "wait", k0, k1); code != 137 {
		t.Errorf("wait for jobs killed on two hosts: exit %d (want 137)\n%s", code, errs)
	}
	svc := strings.TrimSpace(h.one(t, 1, "spawn", "--restart", "always", "--", "sleep", "300"))
	if out := h.must(t, "stop", svc); !strings.Contains(out, svc) {
		t.Errorf("stop across hosts: %q", out)
	}
	h.must(t, "history", svc)
	h.must(t, "remove", b)
	if code, _, _ := execctl(t, append(h.flags(1), "status", b)...); code != exitNotFound {
		t.Errorf("remove across hosts did not remove %s from its host", b)
	}

	// health: a line per host.
	out = h.must(t, "health")
	for _, c := range h.ctl {
		if !strings.Contains(out, hostName(c)+": ok:") {
			t.Errorf("health: no line of %s:\n%s", c, out)
		}
	}
	var hs struct{ Hosts []map[string]any }
	if err := json.Unmarshal([]byte(h.must(t, "--json", "health")), &hs); err != nil || len(hs.Hosts) != 2 || hs.Hosts[0]["host"] == nil {
		t.Errorf("health --json: %v %+v", err, hs)
	}
}

// rowOf returns the line of out that holds s ("" if none).
func rowOf(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// TestHostsFollowAcross: logs -f follows jobs on several hosts at once,
// each event in JSON with its host; a spawn --follow is placed by the
// pool and followed on its host.
func TestHostsFollowAcross(t *testing.T) {
	h := startHosts(t, 2)
	a := h.spawnOn(t, 0, "sh", "-c", "read x; echo done-a")
	b := h.spawnOn(t, 1, "sh", "-c", "read x; echo done-b")
	done := bgCtl(t, append(h.flags(), "--json", "logs", "-f", a, b)...)
	h.must(t, "write", a, "x")
	h.must(t, "write", b, "y")
	r := <-done
	if r.code != 0 {
		t.Fatalf("logs -f across hosts: exit %d\n%s\n%s", r.code, r.out, r.errs)
	}
	hostOf := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(r.out))
	for dec.More() {
		var ev struct{ JobID, Host, Kind string }
		if err := dec.Decode(&ev); err != nil {
			t.Fatal(err)
		}
		if prev, ok := hostOf[ev.JobID]; ok && prev != ev.Host {
			t.Fatalf("events of %s from %s and %s", ev.JobID, prev, ev.Host)
		}
		hostOf[ev.JobID] = ev.Host
	}
	if hostOf[a] != h.ctl[0] || hostOf[b] != h.ctl[1] {
		t.Fatalf("hosts of the events: %v", hostOf)
	}
	if code, out, errs := h.run(t, "spawn", "--follow", "--session", "x", "--", "echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("spawn --follow across hosts: exit %d %q %q", code, out, errs)
	}
}

// TestHostsOneDown: a host that does not answer (refused, or accepting
// and saying nothing) is named on stderr while the others' results are
// shown, with exit code 6 (JSON: an error of code "partial" whose hosts
// name it); none answering is exit 3; an op on a job of a host that is
// down names that host; logs -f shows the others' output and names it.
func TestHostsOneDown(t *testing.T) {
	saved := reconnectFor
	t.Cleanup(func() { reconnectFor = saved })
	reconnectFor = time.Second

	h := startHosts(t, 3)
	a := h.spawnOn(t, 0, "sh", "-c", "echo from-a")
	c := h.spawnOn(t, 2, "sleep", "300")
	h.must(t, "wait", a)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.sups[2].srv.Close(ctx); err != nil { // host 2 goes away
		t.Fatal(err)
	}
	down := hostName(h.ctl[2])

	code, out, errs := h.run(t, "list")
	if code != exitPartial || !strings.Contains(out, a) || strings.Contains(out, c) || !strings.Contains(errs, down) {
		t.Fatalf("list with a host down: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	code, out, errs = h.run(t, "--json", "list")
	var e struct {
		Error struct {
			Code     string
			ExitCode int
			Hosts    []struct{ Host, Code string }
		}
	}
	if err := json.Unmarshal([]byte(errs), &e); err != nil || code != exitPartial || e.Error.Code != codePartial || e.Error.ExitCode != exitPartial ||
		len(e.Error.Hosts) != 1 || e.Error.Hosts[0].Host != h.ctl[2] || e.Error.Hosts[0].Code != codeUnreachable || !strings.Contains(out, a) {
		t.Fatalf("list --json with a host down: exit %d, %v\nstdout:\n%s\nstderr:\n%s", code, err, out, errs)
	}
	if code, _, errs := h.run(t, "top"); code != exitPartial || !strings.Contains(errs, down) {
		t.Errorf("top with a host down: exit %d\n%s", code, errs)
	}
	if code, out, errs := h.run(t, "health"); code != exitPartial || strings.Count(out, ": ok:") != 2 || !strings.Contains(errs, down) {
		t.Errorf("health with a host down: exit %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := h.run(t, "status", c); code != exitUnreachable || !strings.Contains(errs, down) {
		t.Errorf("status of a job of the host down: exit %d\n%s", code, errs)
	}
	code, out, errs = h.run(t, "logs", "-f", a, c)
	if code != exitPartial || !strings.Contains(out, a+" | from-a") || !strings.Contains(errs, down) {
		t.Errorf("logs -f of jobs on a host up and one down: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if code, _, errs := execctl(t, append(h.flags(2), "list")...); code != exitUnreachable {
		t.Errorf("list of the host down alone: exit %d\n%s", code, errs)
	}

	// A host that takes connections and says nothing (hung): named too,
	// and no hang.
	l, err := net.Listen("tcp", "127.0.0.5:0")
	if err != nil {
		t.Skipf("127.0.0.5: %v", err)
	}
	defer l.Close()
	go func() { // (held until the listener closes)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	hung := "tcp://" + l.Addr().String()
	args := []string{"--control", h.ctl[0] + "," + hung, "--event", h.evt[0] + ",tcp://127.0.0.5:1"}
	code, out, errs = execctl(t, append(append(args, h.keyFlags...), "list")...)
	if code != exitPartial || !strings.Contains(out, a) || !strings.Contains(errs, hostName(hung)) {
		t.Fatalf("list with a hung host: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

// TestHostsFlagsHostile: lists and endpoints files that cannot be used
// are usage errors (exit 2) saying what is wrong, before anything is
// asked of any supervisor.
func TestHostsFlagsHostile(t *testing.T) {
	dir := shortTempDir(t)
	many := make([]string, maxHosts+1)
	manyEvt := make([]string, maxHosts+1)
	for i := range many {
		many[i] = fmt.Sprintf("tcp://10.0.%d.%d:1", i/250, i%250+1)
		manyEvt[i] = fmt.Sprintf("tcp://10.0.%d.%d:2", i/250, i%250+1)
	}
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good", "# two\ntcp://127.0.0.2:1 tcp://127.0.0.2:2\n\ntcp://127.0.0.3:1 tcp://127.0.0.3:2\n", 0o644)
	if err := os.Symlink(good, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	var big strings.Builder
	for big.Len() <= maxEndpointsFile {
		big.WriteString("# padding padding padding padding padding padding padding padding\n")
	}
	var tooMany strings.Builder
	for i := range many {
		fmt.Fprintf(&tooMany, "%s %s\n", many[i], manyEvt[i])
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"empty entry", []string{"--control", "tcp://a:1,,tcp://b:1", "--event", "tcp://a:2,tcp://c:2,tcp://b:2"}, "entry 2"},
		{"trailing comma", []string{"--control", "tcp://a:1,", "--event", "tcp://a:2,tcp://b:2"}, "entry 2"},
		{"only commas", []string{"--control", ",", "--event", ","}, "empty"},
		{"bad entry", []string{"--control", "tcp://a:1,bogus", "--event", "tcp://a:2,tcp://b:2"}, "entry 2"},
		{"space", []string{"--control", "tcp://a:1, tcp://b:1", "--event", "tcp://a:2,tcp://b:2"}, "entry 2"},
		{"duplicate control", []string{"--control", "tcp://a:1,tcp://a:1", "--event", "tcp://a:2,tcp://b:2"}, "listed already"},
		{"duplicate event", []string{"--control", "tcp://a:1,tcp://b:1", "--event", "tcp://a:2,tcp://a:2"}, "listed already"},
		{"control as event", []string{"--control", "tcp://a:1,tcp://b:1", "--event", "tcp://b:1,tcp://a:2"}, "listed already"},
		{"counts differ", []string{"--control", "tcp://a:1,tcp://b:1", "--event", "tcp://a:2"}, "2 control endpoints and 1 event"},
		{"no events", []string{"--control", "tcp://a:1,tcp://b:1"}, "2 control endpoints and 0 event"},
		{"too many", []string{"--control", strings.Join(many, ","), "--event", strings.Join(manyEvt, ",")}, "at most"},
		{"file and list", []string{"--endpoints-file", good, "--control", "tcp://a:1"}, "not both"},
		{"file missing", []string{"--endpoints-file", filepath.Join(dir, "none")}, "no such file"},
		{"file empty", []string{"--endpoints-file", file("empty", "", 0o600)}, "no supervisor"},
		{"file comments only", []string{"--endpoints-file", file("comments", "# none\n\n   \n", 0o600)}, "no supervisor"},
		{"file one field", []string{"--endpoints-file", file("one", "tcp://a:1\n", 0o600)}, ":1: want CONTROL EVENT"},
		{"file three fields", []string{"--endpoints-file", file("three", "tcp://a:1 tcp://a:2\ntcp://b:1 tcp://b:2 x\n", 0o600)}, ":2: want CONTROL EVENT"},
		{"file bad endpoint", []string{"--endpoints-file", file("bad", "tcp://a:1 http://a:2\n", 0o600)}, ":1:"},
		{"file duplicate", []string{"--endpoints-file", file("dup", "tcp://a:1 tcp://a:2\n#\ntcp://a:1 tcp://b:2\n", 0o600)}, ":3: tcp://a:1 is listed already"},
		{"file too many", []string{"--endpoints-file", file("many", tooMany.String(), 0o600)}, "more than"},
		{"file too big", []string{"--endpoints-file", file("big", big.String(), 0o600)}, "more than"},
		{"file long line", []string{"--endpoints-file", file("long", "tcp://a:1 tcp://"+strings.Repeat("a", 2*maxEndpointsFile)+":2\n", 0o600)}, "more than"},
		{"file writable by others", []string{"--endpoints-file", file("open", "tcp://a:1 tcp://a:2\n", 0o666)}, "others could change it"},
		{"file symlink", []string{"--endpoints-file", filepath.Join(dir, "link")}, "symbolic link"},
		{"file a directory", []string{"--endpoints-file", dir}, "not a regular file"},
		{"daemon of several", []string{"--endpoints-file", good, "daemon", "status"}, "one supervisor"},
	}
	for _, c := range cases {
		args := c.args
		if args[len(args)-1] != "status" {
			args = append(args, "list")
		}
		code, out, errs := execctl(t, args...)
		if code != exitUsage || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d (want %d), stderr %q (want %q)", c.name, code, exitUsage, errs, c.want)
		}
		code, _, errs = execctl(t, append([]string{"--json"}, args...)...)
		if code != exitUsage || !strings.Contains(errs, `"code":"usage"`) {
			t.Errorf("%s --json: exit %d, %q", c.name, code, errs)
		}
	}
}

// TestHostsFromEnv: the variables take lists and files as the flags do;
// a flag given wins over a variable of the other kind, both variables
// are refused.
func TestHostsFromEnv(t *testing.T) {
	h := startHosts(t, 2)
	id := strings.TrimSpace(h.one(t, 1, "spawn", "--", "true"))
	dir := shortTempDir(t)
	file := filepath.Join(dir, "endpoints")
	if err := os.WriteFile(file, []byte(h.ctl[0]+" "+h.evt[0]+"\n"+h.ctl[1]+" "+h.evt[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EXEC_SUPERVISOR_CONTROL", strings.Join(h.ctl, ","))
	t.Setenv("EXEC_SUPERVISOR_EVENT", strings.Join(h.evt, ","))
	if code, out, errs := execctl(t, append(h.keyFlags, "list")...); code != 0 || !strings.Contains(rowOf(out, id), hostName(h.ctl[1])) {
		t.Fatalf("lists in the variables: exit %d\n%s\n%s", code, out, errs)
	}
	t.Setenv("EXEC_SUPERVISOR_CONTROL", h.ctl[0]+",,"+h.ctl[1])
	if code, _, errs := execctl(t, append(h.keyFlags, "list")...); code != exitUsage || !strings.Contains(errs, "entry 2") {
		t.Fatalf("an empty entry in the variable: exit %d\n%s", code, errs)
	}
	t.Setenv("EXEC_SUPERVISOR_CONTROL", strings.Join(h.ctl, ","))
	t.Setenv("EXEC_SUPERVISOR_ENDPOINTS_FILE", file)
	if code, _, errs := execctl(t, append(h.keyFlags, "list")...); code != exitUsage || !strings.Contains(errs, "both set") {
		t.Fatalf("both variables: exit %d\n%s", code, errs)
	}
	// A flag wins over the other kind's variable: one host by --control
	// (as ever: no HOST column), both by --endpoints-file.
	if code, out, errs := execctl(t, append(h.keyFlags, "--control", h.ctl[1], "--event", h.evt[1], "list")...); code != 0 || strings.Contains(out, "HOST") || !strings.Contains(out, id) {
		t.Fatalf("--control over the file's variable: exit %d\n%s\n%s", code, out, errs)
	}
	t.Setenv("EXEC_SUPERVISOR_ENDPOINTS_FILE", "")
	if code, out, errs := execctl(t, append(h.keyFlags, "--endpoints-file", file, "list")...); code != 0 || !strings.Contains(out, "HOST") {
		t.Fatalf("--endpoints-file over the list variables: exit %d\n%s\n%s", code, out, errs)
	}
	// A file of one supervisor is a list still (HOST column): scripts
	// reading it see one shape.
	one := filepath.Join(dir, "one")
	if err := os.WriteFile(one, []byte(h.ctl[1]+" "+h.evt[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := execctl(t, append(h.keyFlags, "--endpoints-file", one, "list")...); code != 0 || !strings.Contains(out, "HOST") {
		t.Fatalf("a file of one: exit %d\n%s\n%s", code, out, errs)
	}
}
