package server

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// curveServer starts a supervisor on tcp with --curve (and
// --tcp-loopback-uid=false: our own uid must use CURVE too) whose
// allow-list holds the returned client key pair.
func curveServer(t *testing.T) (*testServer, zmtp.CurveKeyPair, zmtp.CurveKey) {
	t.Helper()
	cfg := testConfig(t)
	cfg.Control, cfg.Event = tcpPair(t)
	cfg.Curve, cfg.TCPLoopbackUID = true, false
	kp, err := zmtp.NewCurveKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	cfg.CurveClientsFile = filepath.Join(filepath.Dir(cfg.StateDir), "curve-clients")
	if err := os.WriteFile(cfg.CurveClientsFile, []byte("# test\n"+kp.Public.String()+" go-and-python\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, cfg)
	pub, err := zmtp.ReadCurvePublicFile(filepath.Join(cfg.StateDir, "curve.pub"))
	if err != nil {
		t.Fatal(err)
	}
	return ts, kp, pub
}

// TestCurveGoClient: pkg/client over CURVE: control round trips and a
// job's output through the event socket; a wrong server key and a key not
// allowed fail at once with clear errors, and the supervisor keeps serving.
func TestCurveGoClient(t *testing.T) {
	ts, kp, pub := curveServer(t)
	ctx := ctxT(t, 30*time.Second)
	c := client.New(client.Options{ControlAddress: ts.cfg.Control, EventAddress: ts.cfg.Event, RequestTimeout: 10 * time.Second,
		CurveServerKey: pub.String(), CurveSecretKey: kp.Secret.String()})
	defer c.Close()
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	job, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "echo over-curve; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err = c.Follow(ctx, job.JobID, 1, func(ev protocol.Event) error {
		if ev.Kind == protocol.KindStdout {
			o, err := ev.Output()
			if err != nil {
				return err
			}
			out.Write(o.Data)
		}
		if ev.Kind == protocol.KindExited || ev.Kind == protocol.KindFailed {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) || out.String() != "over-curve\n" {
		t.Fatalf("follow: %v, output %q", err, out.String())
	}

	other, _ := zmtp.NewCurveKeyPair()
	for _, tc := range []struct {
		name       string
		server     string
		secret     string
		wantServer bool
	}{
		{"wrong server key", other.Public.String(), kp.Secret.String(), true},
		{"unknown client key", pub.String(), other.Secret.String(), false},
	} {
		start := time.Now()
		bad := client.New(client.Options{ControlAddress: ts.cfg.Control, EventAddress: ts.cfg.Event, RequestTimeout: 10 * time.Second,
			CurveServerKey: tc.server, CurveSecretKey: tc.secret})
		_, err := bad.Health(ctx)
		bad.Close()
		var re *zmtp.RefusedError
		switch {
		case err == nil:
			t.Fatalf("%s: served", tc.name)
		case tc.wantServer && !errors.Is(err, zmtp.ErrCurveServerKey):
			t.Fatalf("%s: %v", tc.name, err)
		case !tc.wantServer && (!errors.As(err, &re) || re.Reason != zmtp.CurveClientRefused):
			t.Fatalf("%s: %v", tc.name, err)
		case time.Since(start) > 5*time.Second:
			t.Fatalf("%s: took %v (retried?)", tc.name, time.Since(start))
		}
		t.Logf("%s: %v", tc.name, err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("the supervisor no longer serves: %v", err)
	}
}

var errStop = errors.New("stop")

// TestCurvePythonClient runs testdata/pyclient.py (libzmq through pyzmq)
// with CURVE keys against a --curve supervisor: REQ and DEALER control,
// SUB events, the whole script.
func TestCurvePythonClient(t *testing.T) {
	py, tried := pythonWithZMQ()
	if py == "" {
		t.Skipf("no python3 that can import zmq and msgpack (tried %s)", strings.Join(tried, ", "))
	}
	if err := exec.Command(py, "-c", "import zmq,sys; sys.exit(0 if zmq.has('curve') else 1)").Run(); err != nil {
		t.Skip("pyzmq without CURVE")
	}
	ts, kp, pub := curveServer(t)
	script, err := filepath.Abs(filepath.Join("testdata", "pyclient.py"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env := append(os.Environ(), "PYCLIENT_CURVE_SERVER_KEY="+pub.String(),
		"PYCLIENT_CURVE_PUBLIC_KEY="+kp.Public.String(), "PYCLIENT_CURVE_SECRET_KEY="+kp.Secret.String())
	cmd := exec.CommandContext(ctx, py, script, ts.cfg.Control, ts.cfg.Event)
	cmd.Env, cmd.WaitDelay = env, 5*time.Second
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PYCLIENT OK") {
		t.Fatalf("pyclient over CURVE: %v\n%s", err, out)
	}
	// A libzmq client whose key is not allowed gets no reply.
	other, _ := zmtp.NewCurveKeyPair()
	cmd = exec.CommandContext(ctx, py, script, ts.cfg.Control, ts.cfg.Event, "", "--expect-refused")
	cmd.Env = append(os.Environ(), "PYCLIENT_CURVE_SERVER_KEY="+pub.String(),
		"PYCLIENT_CURVE_PUBLIC_KEY="+other.Public.String(), "PYCLIENT_CURVE_SECRET_KEY="+other.Secret.String())
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PYCLIENT REFUSED") {
		t.Fatalf("unknown libzmq client: %v\n%s", err, out)
	}
	if v := value(scrape2(t, ts), "exec_supervisor_connections_rejected_total", "reason", "curve-unknown-client"); v < 1 {
		t.Errorf("refusal not counted: %v", v)
	}
}
