package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveProc is a `vkc serve` process started by a test.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	mu     sync.Mutex
	log    bytes.Buffer // standard error, JSON lines
	exited chan error
}

func (p *serveProc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startServe starts vkc serve on a free loopback port with the JSON log and waits until it
// listens (its first log line names the address).
func startServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(vkcBinary(t), append([]string{"serve", "--port", "0", "--log-format", "json"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, exited: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			var e struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "listening" {
				addr <- e.Addr
			}
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	select {
	case a := <-addr:
		p.url = "http://" + a
	case err := <-p.exited:
		t.Fatalf("vkc serve exited before listening: %v\n%s", err, p.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("vkc serve did not listen within a minute:\n%s", p.logText())
	}
	return p
}

// waitHealthy polls /health until 200.
func (p *serveProc) waitHealthy(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(p.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
			if resp.StatusCode != 503 {
				t.Fatalf("/health: %d", resp.StatusCode)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not healthy within %v:\n%s", within, p.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func chatTinyPlan(t *testing.T) string {
	t.Helper()
	needDevice(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "chat.plan")
	model, _ := filepath.Abs("../../testdata/chat-tiny/model.yaml")
	if r := runVKC(t, dir, nil, "compile", "-q", model, "-o", path); r.code != 0 {
		t.Fatalf("compile chat-tiny: %s", r.stderr)
	}
	return path
}

// vkc serve from a model.yaml (compiled first): healthy, answers a chat completion; on SIGTERM
// with a stream in flight it stops accepting, lets the stream finish, and exits 0, its JSON log
// saying each step.
func TestBinaryServeGracefulShutdown(t *testing.T) {
	needDevice(t)
	model, _ := filepath.Abs("../../testdata/chat-tiny/model.yaml")
	p := startServe(t, model, "--plan-cache", t.TempDir())
	p.waitHealthy(t, 2*time.Minute)
	resp, err := http.Post(p.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":60,"temperature":0,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || !strings.Contains(string(rest), `"finish_reason":"length"`) {
		t.Errorf("the stream in flight at SIGTERM: %v\n%s", err, rest)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("exit: %v\n%s", err, p.logText())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after SIGTERM:\n%s", p.logText())
	}
	log := p.logText()
	for _, msg := range []string{`"msg":"compiling"`, `"msg":"model ready"`, `"msg":"shutting down"`, `"msg":"stopped"`, `"msg":"request"`, `"status":200`, `"tokens":60`} {
		if !strings.Contains(log, msg) {
			t.Errorf("the log has no %s:\n%s", msg, log)
		}
	}
	if _, err := http.Get(p.url + "/health"); err == nil {
		t.Error("the server still answers after it stopped")
	}
}

// When a request is still running at the end of --shutdown-timeout it is cancelled, and the
// process exits 0 all the same; a second server's bad flag is a usage error.
func TestBinaryServeShutdownCancels(t *testing.T) {
	path := chatTinyPlan(t)
	p := startServe(t, path, "--shutdown-timeout", "1ms", "--api-key", "k")
	p.waitHealthy(t, time.Minute)
	req, _ := http.NewRequest("POST", p.url+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":120,"stream":true,"stop":["\u0000never"]}`))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	br.ReadString('\n')
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	io.ReadAll(br)
	resp.Body.Close()
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("exit: %v\n%s", err, p.logText())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after SIGTERM:\n%s", p.logText())
	}
	t.Logf("stopped %v after SIGTERM", time.Since(start))
	if log := p.logText(); !strings.Contains(log, "cancelling them") || !strings.Contains(log, `"error":"the request was cancelled`) {
		t.Errorf("the log does not say the request was cancelled:\n%s", log)
	}
	if r := runVKC(t, ".", nil, "serve", path, "--log-format", "xml"); r.code != 2 || !strings.Contains(r.stderr, "--log-format") {
		t.Errorf("bad --log-format: exit %d %s", r.code, r.stderr)
	}
	if r := runVKC(t, ".", nil, "serve", filepath.Join(t.TempDir(), "none.plan"), "--port", "0"); r.code != 1 {
		t.Errorf("a missing plan: exit %d %s", r.code, r.stderr)
	}
}

// TestServePrecisionFlags: --kv and --act go with a GGUF file or Hugging Face folder (a plan or
// model.yaml has its own precision), and take the importer's values.
func TestServePrecisionFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "../../testdata/chat-tiny/model.yaml", "--kv", "q8_0"}, "--act and --kv go with a GGUF file or Hugging Face folder"},
		{[]string{"serve", "../../testdata/hf/tinyllama", "--kv", "q9"}, "--kv q9: want one of f32, f16, q8_0, q4_0"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", c.args, code, errs, c.want)
		}
	}
}
