package server_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The Kubernetes example (deploy/kubernetes.yaml), parsed since no cluster is at hand: a
// Deployment whose pods request one GPU, run vkc serve on the port they expose, are ready on
// /health (a startup probe long enough for a compile), drain within their grace period; and a
// Service selecting those pods, forwarding to that port.
func TestKubernetesManifest(t *testing.T) {
	b, err := os.ReadFile("../deploy/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type probe struct {
		HTTPGet *struct {
			Path string
			Port string
		} `yaml:"httpGet"`
		TCPSocket        *struct{ Port string } `yaml:"tcpSocket"`
		PeriodSeconds    int                    `yaml:"periodSeconds"`
		FailureThreshold int                    `yaml:"failureThreshold"`
	}
	type doc struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string
		Metadata   struct{ Name string }
		Spec       struct {
			Replicas int
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			}
			Template struct {
				Metadata struct{ Labels map[string]string }
				Spec     struct {
					TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
					Containers                    []struct {
						Args  []string
						Ports []struct {
							Name          string
							ContainerPort int `yaml:"containerPort"`
						}
						StartupProbe   *probe `yaml:"startupProbe"`
						ReadinessProbe *probe `yaml:"readinessProbe"`
						LivenessProbe  *probe `yaml:"livenessProbe"`
						Resources      struct {
							Limits map[string]string
						}
					}
				}
			}
			Ports []struct { // a Service's
				Port       int
				TargetPort string `yaml:"targetPort"`
			}
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(false)
	var docs []doc
	var raw []map[string]any
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var d doc
		if err := n.Decode(&d); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := n.Decode(&m); err != nil {
			t.Fatal(err)
		}
		docs, raw = append(docs, d), append(raw, m)
	}
	if len(docs) != 2 || docs[0].Kind != "Deployment" || docs[0].APIVersion != "apps/v1" || docs[1].Kind != "Service" || docs[1].APIVersion != "v1" {
		t.Fatalf("want a Deployment (apps/v1) and a Service (v1), got %+v", docs)
	}
	dep := docs[0]
	labels := dep.Spec.Template.Metadata.Labels
	for k, v := range dep.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the Deployment's selector %s=%s does not select its pods (%v)", k, v, labels)
		}
	}
	if len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("want one container")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if !strings.HasPrefix(args, "serve ") || !strings.Contains(args, "--port 8080") || !strings.Contains(args, "--host 0.0.0.0") {
		t.Errorf("args %q: want vkc serve on 0.0.0.0:8080", args)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 || c.Ports[0].Name != "http" {
		t.Errorf("ports %+v: want http 8080", c.Ports)
	}
	for name, p := range map[string]*probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port != "http" {
			t.Errorf("%s probe %+v: want GET /health on the http port", name, p)
		}
	}
	if p := c.StartupProbe; p != nil && p.PeriodSeconds*p.FailureThreshold < 300 {
		t.Errorf("the startup probe gives %d s: a compile may take minutes", p.PeriodSeconds*p.FailureThreshold)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path == "/health" {
		t.Error("the liveness probe must not be /health (503 while loading would restart the pod)")
	}
	if g := c.Resources.Limits["nvidia.com/gpu"]; g != "1" {
		t.Errorf("GPU limit %q, want 1", g)
	}
	grace := dep.Spec.Template.Spec.TerminationGracePeriodSeconds
	if !strings.Contains(args, "--shutdown-timeout 45s") || grace <= 45 {
		t.Errorf("grace period %d s, shutdown timeout in %q: the grace period must exceed it", grace, args)
	}
	svc := docs[1]
	sel, _ := raw[1]["spec"].(map[string]any)["selector"].(map[string]any)
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("the Service's selector %s=%v does not select the pods (%v)", k, v, labels)
		}
	}
	if len(sel) == 0 || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != "http" {
		t.Errorf("service %+v: want one port forwarding to the pods' http port", svc.Spec)
	}
}

// docs/serving.md shows deploy/haproxy.cfg and deploy/kubernetes.yaml as they are, and HAProxy
// (where installed) accepts the configuration.
func TestDeployFilesInDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/serving.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"../deploy/haproxy.cfg", "../deploy/kubernetes.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(doc, append(append([]byte("\n"), b...), "```"...)) {
			t.Errorf("docs/serving.md does not show %s as it is", f)
		}
	}
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("haproxy is not installed: scripts/setup.sh installs it (Debian: apt-get install haproxy); the shipped configuration is checked with haproxy -c")
	}
	if out, err := exec.Command(haproxy, "-c", "-f", "../deploy/haproxy.cfg").CombinedOutput(); err != nil {
		t.Errorf("haproxy -c: %v\n%s", err, out)
	}
}
