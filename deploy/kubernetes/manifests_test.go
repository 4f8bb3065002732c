// Package kubernetes holds the Kubernetes manifests (no Go code): its
// test decodes them strictly into the Kubernetes API types and checks
// that they agree with the supervisor they run.
package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
)

// decodeStrict decodes one YAML document into v, refusing fields v's type
// does not have (a misspelt or misplaced key is an error, as kubectl's
// server-side validation makes it).
func decodeStrict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// documents splits a YAML stream into its documents.
func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range strings.Split("\n"+string(b), "\n---\n") {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

type manifests struct {
	ds  *appsv1.DaemonSet
	svc *corev1.Service
	np  *networkingv1.NetworkPolicy
}

func load(t *testing.T) manifests {
	t.Helper()
	var m manifests
	for i, doc := range documents(t, "exec-supervisor.yaml") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var v any
		switch head.Kind {
		case "DaemonSet":
			m.ds = &appsv1.DaemonSet{}
			v = m.ds
		case "Service":
			m.svc = &corev1.Service{}
			v = m.svc
		case "NetworkPolicy":
			m.np = &networkingv1.NetworkPolicy{}
			v = m.np
		default:
			t.Fatalf("document %d: unexpected kind %q", i, head.Kind)
		}
		if err := decodeStrict(doc, v); err != nil {
			t.Fatalf("document %d (%s): %v", i, head.Kind, err)
		}
	}
	if m.ds == nil || m.svc == nil || m.np == nil {
		t.Fatal("want a DaemonSet, a Service and a NetworkPolicy")
	}
	return m
}

// TestManifestsDecodeStrictly: every document is a valid object of its
// kind (no unknown field), the example Secret included.
func TestManifestsDecodeStrictly(t *testing.T) {
	load(t)
	docs := documents(t, "secret.example.yaml")
	if len(docs) != 1 {
		t.Fatalf("secret.example.yaml: %d documents", len(docs))
	}
	var s corev1.Secret
	if err := decodeStrict(docs[0], &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"curve.key", "curve.pub", "curve-clients"} {
		if _, ok := s.StringData[k]; !ok {
			t.Errorf("the example Secret has no %s", k)
		}
	}
}

// TestManifestsMatchTheSupervisor: the container's arguments are flags
// the supervisor takes, with values it accepts; the ports, probes, mounts
// and the Service and NetworkPolicy agree with them.
func TestManifestsMatchTheSupervisor(t *testing.T) {
	m := load(t)
	spec := m.ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	cfg := server.DefaultConfig()
	fs := pflag.NewFlagSet("exec-supervisor", pflag.ContinueOnError)
	cfg.BindFlags(fs)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatalf("the container's args: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the container's args: %v", err)
	}
	if !cfg.Curve || !strings.HasPrefix(cfg.Control, "tcp://") || !strings.HasPrefix(cfg.Event, "tcp://") {
		t.Fatalf("want CURVE on tcp sockets: control %s event %s curve %v", cfg.Control, cfg.Event, cfg.Curve)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, addr := range map[string]string{"control": cfg.Control, "events": cfg.Event, "metrics": "tcp://" + cfg.MetricsAddr} {
		if !strings.HasSuffix(addr, fmt.Sprintf(":%d", ports[name])) {
			t.Errorf("container port %s %d is not the supervisor's %s", name, ports[name], addr)
		}
	}
	for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe: want GET /healthz on the metrics port, got %+v", what, p)
		}
	}
	ann := m.ds.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != fmt.Sprint(ports["metrics"]) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("prometheus annotations %v", ann)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= cfg.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v: want more than --shutdown-timeout %s", g, cfg.ShutdownTimeout)
	}

	// The key files are mounted as regular files (subPath), the secret
	// one not readable by others, at the paths the args give.
	mounted := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounted[vm.MountPath] = vm
	}
	secretMode := int32(-1)
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.DefaultMode != nil {
			secretMode = *v.Secret.DefaultMode
		}
	}
	if secretMode < 0 || secretMode&0o077 != 0 {
		t.Errorf("the Secret's defaultMode %o: the supervisor refuses a secret key others can read", secretMode)
	}
	for _, path := range []string{cfg.CurveKeyPath(), strings.TrimSuffix(cfg.CurveKeyPath(), ".key") + ".pub", cfg.CurveClientsFile} {
		if vm, ok := mounted[path]; !ok || vm.SubPath == "" || !vm.ReadOnly {
			t.Errorf("%s: want a read-only subPath mount (a Secret's own files are symlinks), got %+v", path, vm)
		}
	}
	if vm, ok := mounted[cfg.StateDir]; !ok || vm.ReadOnly {
		t.Errorf("state directory %s: want a writable mount, got %+v", cfg.StateDir, vm)
	}

	// The Service publishes the sockets; the NetworkPolicy admits them.
	svcPorts := map[int32]bool{}
	for _, p := range m.svc.Spec.Ports {
		svcPorts[p.Port] = true
	}
	if m.svc.Spec.ClusterIP != corev1.ClusterIPNone || !svcPorts[ports["control"]] || !svcPorts[ports["events"]] {
		t.Errorf("Service: want headless with the control and event ports, got %+v", m.svc.Spec)
	}
	// A gateway finds the pods by the Service's SRV records
	// (_control._tcp and _events._tcp, docs/kubernetes.md): named TCP
	// ports, each the container port of its name.
	for _, name := range []string{"control", "events"} {
		i := slices.IndexFunc(m.svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == name })
		if i < 0 {
			t.Errorf("Service: no port named %q (its SRV records _%s._tcp)", name, name)
			continue
		}
		sp := m.svc.Spec.Ports[i]
		if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP || sp.TargetPort.StrVal != name || sp.Port != ports[name] {
			t.Errorf("Service port %q: want TCP, targetPort %q, port %d; got %+v", name, name, ports[name], sp)
		}
	}
	if sel := m.svc.Spec.Selector; sel["app.kubernetes.io/name"] != m.ds.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Errorf("Service selector %v does not select the DaemonSet's pods", sel)
	}
	allowed := map[int32]bool{}
	for _, r := range m.np.Spec.Ingress {
		for _, p := range r.Ports {
			allowed[p.Port.IntVal] = true
		}
	}
	for name, p := range ports {
		if !allowed[p] {
			t.Errorf("NetworkPolicy admits nothing to the %s port %d", name, p)
		}
	}
}
