package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/runtime"
	"github.com/vkc-project/vkc/server"
)

// compiled holds testdata/chat-tiny's plans (tinyllama's shape with a byte-level vocabulary and
// a ChatML template), each compiled once for the default device: model.yaml (one sequence) and
// parallel.yaml (4 slots and a batched step).
var compiled struct {
	mu    sync.Mutex
	dir   string
	paths map[string]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if compiled.dir != "" {
		os.RemoveAll(compiled.dir)
	}
	os.Exit(code)
}

// planPath compiles testdata/chat-tiny/model.yaml (once) and returns the plan's path, or skips
// without a Vulkan device.
func planPath(t *testing.T) string { return compiledPlan(t, "model.yaml") }

func compiledPlan(t *testing.T, name string) string {
	t.Helper()
	if _, _, err := runtime.Devices(runtime.Options{}); err != nil {
		t.Skipf("needs a Vulkan device (lavapipe is enough): %v", err)
	}
	compiled.mu.Lock()
	defer compiled.mu.Unlock()
	if p, ok := compiled.paths[name]; ok {
		return p
	}
	md, err := ir.ParseModel("../testdata/chat-tiny/" + name)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := vkc.Compile(context.Background(), md, vkc.Options{ArgmaxOutput: true, TopK: vkc.DefaultTopK})
	if err != nil {
		t.Fatal(err)
	}
	if compiled.dir == "" {
		if compiled.dir, err = os.MkdirTemp("", "vkc-server-test"); err != nil {
			t.Fatal(err)
		}
		compiled.paths = map[string]string{}
	}
	path := filepath.Join(compiled.dir, strings.TrimSuffix(name, ".yaml")+".plan")
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	compiled.paths[name] = path
	return path
}

// newServer starts a server on loopback with the chat plan loaded; it is closed with the test.
func newServer(t *testing.T, cfg server.Config) (*httptest.Server, *server.Server, *engine.Model) {
	t.Helper()
	return newServerOn(t, planPath(t), cfg)
}

func newServerOn(t *testing.T, plan string, cfg server.Config) (*httptest.Server, *server.Server, *engine.Model) {
	t.Helper()
	m, err := engine.Load(plan, engine.Options{PrefillChunk: 8})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := server.New(cfg)
	s.Ready(m, "chat-tiny")
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		m.Close()
	})
	return hs, s, m
}

var conversation = []engine.Message{
	{Role: "system", Content: "Be brief."},
	{Role: "user", Content: "What is a KV cache?"},
}

// reference is what the engine itself answers the conversation greedily with n tokens.
func reference(t *testing.T, m *engine.Model, n int) *engine.Generation {
	t.Helper()
	g, err := m.NewSession().Chat(context.Background(), conversation, engine.GenerateOptions{MaxTokens: n}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The official OpenAI Go SDK against the server: a plain and a streamed chat completion
// (greedy) give the engine's own answer to the conversation, with usage and finish_reason.
func TestOpenAISDKChat(t *testing.T) {
	hs, _, m := newServer(t, server.Config{APIKey: "sekret"})
	want := reference(t, m, 12)
	client := openai.NewClient(option.WithBaseURL(hs.URL+"/v1"), option.WithAPIKey("sekret"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model: "chat-tiny",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.DeveloperMessage(conversation[0].Content),
			openai.UserMessage(conversation[1].Content),
		},
		MaxTokens:   openai.Int(12),
		Temperature: openai.Float(0),
	}
	ctx := context.Background()
	c, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 1 || c.Choices[0].Message.Content != want.Text || string(c.Choices[0].Message.Role) != "assistant" {
		t.Fatalf("chat completion %+v, want the text %q", c.Choices, want.Text)
	}
	wantFinish := "length"
	if want.Stopped != engine.StopMaxTokens {
		wantFinish = "stop"
	}
	if c.Choices[0].FinishReason != wantFinish || c.Usage.PromptTokens != int64(want.PromptTokens) ||
		c.Usage.CompletionTokens != int64(len(want.Tokens)) || c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens ||
		c.Model != "chat-tiny" || c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-") {
		t.Errorf("completion %s, finish %q, usage %+v; want finish %q, %d prompt and %d completion tokens",
			c.ID, c.Choices[0].FinishReason, c.Usage, wantFinish, want.PromptTokens, len(want.Tokens))
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	var text strings.Builder
	chunks, finish := 0, ""
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		chunks++
		if len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
			if ch.Choices[0].FinishReason != "" {
				finish = ch.Choices[0].FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != want.Text || finish != wantFinish || chunks < 3 {
		t.Errorf("stream: %d chunks, text %q finish %q; want %q, %q", chunks, text.String(), finish, want.Text, wantFinish)
	}
	if acc.Usage.CompletionTokens != int64(len(want.Tokens)) || acc.Usage.PromptTokens != int64(want.PromptTokens) {
		t.Errorf("stream usage %+v, want %d prompt and %d completion tokens", acc.Usage, want.PromptTokens, len(want.Tokens))
	}
	// The conversation was the same: its prompt came from the cache but its last token.
	if acc.Usage.PromptTokensDetails.CachedTokens != int64(want.PromptTokens-1) {
		t.Errorf("cached tokens %d, want %d", acc.Usage.PromptTokensDetails.CachedTokens, want.PromptTokens-1)
	}

	// A wrong key: the SDK's error carries OpenAI's error shape.
	bad := openai.NewClient(option.WithBaseURL(hs.URL+"/v1"), option.WithAPIKey("wrong"), option.WithMaxRetries(0))
	_, err = bad.Chat.Completions.New(ctx, params)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 401 || ae.Code != "invalid_api_key" || ae.Type != "authentication_error" {
		t.Errorf("wrong key: %v", err)
	}
	// Too many tokens asked for.
	params.MaxTokens = openai.Int(1000)
	_, err = client.Chat.Completions.New(ctx, params)
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "max_tokens" {
		t.Errorf("max_tokens 1000: %v", err)
	}
}

// The completions endpoint: the prompt as text with the tokenizer's special tokens, the
// engine's answer; plain and streamed.
func TestCompletions(t *testing.T) {
	hs, _, m := newServer(t, server.Config{})
	g, err := m.Generate(context.Background(), "Once upon a time", engine.GenerateOptions{MaxTokens: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Object  string
		Choices []struct {
			Text         string
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	code := post(t, hs.URL+"/v1/completions", `{"model":"x","prompt":"Once upon a time","max_tokens":8,"temperature":0}`, &resp)
	if code != 200 || resp.Object != "text_completion" || len(resp.Choices) != 1 || resp.Choices[0].Text != g.Text || resp.Usage.CompletionTokens != len(g.Tokens) {
		t.Errorf("completion %d %+v, want %q", code, resp, g.Text)
	}
	events := streamEvents(t, hs.URL+"/v1/completions", `{"prompt":["Once upon a time"],"max_tokens":8,"temperature":0,"stream":true}`)
	var text strings.Builder
	for _, e := range events[:len(events)-1] {
		var c struct{ Choices []struct{ Text string } }
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %q: %v", e, err)
		}
		text.WriteString(c.Choices[0].Text)
	}
	if text.String() != g.Text || events[len(events)-1] != "[DONE]" {
		t.Errorf("streamed %q (last event %q), want %q", text.String(), events[len(events)-1], g.Text)
	}
}

// post sends body and decodes the JSON answer into v; it returns the status.
func post(t *testing.T, url, body string, v any) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %q: %v", url, b, err)
		}
	}
	return resp.StatusCode
}

// streamEvents posts body and returns the data of every server-sent event.
func streamEvents(t *testing.T, url, body string) []string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s %q", resp.StatusCode, ct, b)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		} else if sc.Text() != "" {
			t.Errorf("stream line %q is not an event's data or the blank line after it", sc.Text())
		}
	}
	return events
}

// Each bad request gets its status and OpenAI's error shape, naming what is wrong.
func TestErrors(t *testing.T) {
	hs, _, _ := newServer(t, server.Config{MaxBodyBytes: 4096, MaxTokens: 16})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		method, path, body string
		code               int
		typ, param, says   string
	}{
		{"POST", "/v1/chat/completions", `{`, 400, "invalid_request_error", "", "not a JSON object"},
		{"POST", "/v1/chat/completions", `{"messages":"hi"}`, 400, "invalid_request_error", "messages", "messages"},
		{"POST", "/v1/chat/completions", `{"messages":[]}`, 400, "invalid_request_error", "messages", "at least one"},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"tool","content":"x"}]}`, 400, "invalid_request_error", "messages[0].role", "tool"},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "invalid_request_error", "messages[0].content[0]", "image_url"},
		{"POST", "/v1/chat/completions", `{` + msgs + `,"max_tokens":17}`, 400, "invalid_request_error", "max_tokens", "limit of 16"},
		{"POST", "/v1/chat/completions", `{` + msgs + `,"max_tokens":0}`, 400, "invalid_request_error", "max_tokens", "at least 1"},
		{"POST", "/v1/chat/completions", `{` + msgs + `,"n":2}`, 400, "invalid_request_error", "n", "one choice"},
		{"POST", "/v1/chat/completions", `{` + msgs + `,"temperature":-1}`, 400, "invalid_request_error", "", "temperature"},
		{"POST", "/v1/chat/completions", `{` + msgs + `,"top_p":1.5}`, 400, "invalid_request_error", "", "top-p"},
		{"POST", "/v1/chat/completions", `{` + msgs + `,"stop":["a","b","c","d","e"]}`, 400, "invalid_request_error", "stop", "at most 4"},
		{"POST", "/v1/chat/completions", `{` + msgs + `,"seed":"x"}`, 400, "invalid_request_error", "", ""},
		{"POST", "/v1/chat/completions", `{` + msgs + `,"logprobs":true}`, 400, "invalid_request_error", "logprobs", "not supported"},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 300) + `"}]}`, 400, "invalid_request_error", "messages", "128 positions"},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "invalid_request_error", "", "4096 bytes"},
		{"POST", "/v1/completions", `{"prompt":""}`, 400, "invalid_request_error", "prompt", "empty"},
		{"POST", "/v1/completions", `{"prompt":[1,2]}`, 400, "invalid_request_error", "prompt", "string"},
		{"GET", "/v1/chat/completions", ``, 405, "invalid_request_error", "", "takes POST"},
		{"DELETE", "/v1/models", ``, 405, "invalid_request_error", "", "takes GET"},
		{"GET", "/v2/anything", ``, 404, "not_found_error", "", "no endpoint"},
	} {
		req, _ := http.NewRequest(c.method, hs.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct {
				Message string
				Type    string
				Param   *string
				Code    *string
			}
		}
		if err := json.Unmarshal(b, &e); err != nil {
			t.Errorf("%s %s %s: %d %q is not JSON", c.method, c.path, c.body, resp.StatusCode, b)
			continue
		}
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if resp.StatusCode != c.code || e.Error.Type != c.typ || param != c.param || !strings.Contains(e.Error.Message, c.says) {
			t.Errorf("%s %s %.60s: %d %s param %q %q; want %d %s param %q, saying %q", c.method, c.path, c.body,
				resp.StatusCode, e.Error.Type, param, e.Error.Message, c.code, c.typ, c.param, c.says)
		}
	}
}

// Before Ready and after Drain the generation endpoints and /health answer 503; the key guards
// /v1 but not /health and /metrics.
func TestReadiness(t *testing.T) {
	s := server.New(server.Config{APIKey: "k", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	status := func(method, path string, auth bool) int {
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
		if auth {
			req.Header.Set("Authorization", "Bearer k")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b, c, d := status("GET", "/health", false), status("POST", "/v1/chat/completions", true), status("POST", "/v1/chat/completions", false), status("GET", "/metrics", false); a != 503 || b != 503 || c != 401 || d != 200 {
		t.Errorf("loading: health %d, chat %d, chat without the key %d, metrics %d; want 503, 503, 401, 200", a, b, c, d)
	}
	m, err := engine.Load(planPath(t), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s.Ready(m, "chat-tiny")
	if a, b := status("GET", "/health", false), status("POST", "/v1/chat/completions", true); a != 200 || b != 200 {
		t.Errorf("ready: health %d, chat %d", a, b)
	}
	s.Drain()
	if a, b := status("GET", "/health", false), status("POST", "/v1/chat/completions", true); a != 503 || b != 503 {
		t.Errorf("draining: health %d, chat %d", a, b)
	}
}

// A request past the timeout gets 504; a client that goes away mid-stream stops its generation
// (the model is free again long before max_tokens would have run); a full queue gets 429.
func TestTimeoutCancelQueue(t *testing.T) {
	hs, _, m := newServer(t, server.Config{Timeout: time.Millisecond, MaxQueue: 1})
	var e struct{ Error struct{ Type string } }
	if code := post(t, hs.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, &e); code != 504 || e.Error.Type != "timeout_error" {
		t.Errorf("timeout: %d %+v", code, e)
	}

	hs2, _, m2 := newServer(t, server.Config{MaxQueue: 1})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", hs2.URL+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":120,"stream":true,"temperature":0,"stop":["\u0000never"]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the role chunk
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	// The generation notices at its next token; the model is free when a generation gets it.
	start := time.Now()
	g, err := m2.GenerateIDs(context.Background(), []int32{1, 2, 3}, engine.GenerateOptions{MaxTokens: 1}, nil)
	if err != nil || len(g.Tokens) != 1 {
		t.Fatal(g, err)
	}
	if wait := time.Since(start); wait > 20*time.Second {
		t.Errorf("the model was busy %v after the client went away", wait)
	}

	// Hold the model: one request waits for it, and the next one is refused at once.
	hold, release := make(chan struct{}), make(chan struct{})
	go m2.GenerateIDs(context.Background(), []int32{1, 2}, engine.GenerateOptions{MaxTokens: 50}, func(int32) error {
		select {
		case hold <- struct{}{}:
		default:
		}
		<-release
		return engine.ErrStop
	})
	<-hold
	done := make(chan int)
	go func() {
		done <- post(t, hs2.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, nil)
	}()
	for m2.Activity().Waiting < 1 {
		time.Sleep(time.Millisecond)
	}
	if code := post(t, hs2.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, &e); code != 429 {
		t.Errorf("a full queue: %d %+v", code, e)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Errorf("the waiting request: %d", code)
	}
	_ = m
}

// /metrics read by the Prometheus project's own parser: the families, their types, the
// requests counted by endpoint and code, the tokens, and the histograms' counts.
func TestMetrics(t *testing.T) {
	hs, _, _ := newServer(t, server.Config{})
	for range 2 {
		if code := post(t, hs.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0}`, nil); code != 200 {
			t.Fatal(code)
		}
	}
	post(t, hs.URL+"/v1/chat/completions", `{`, nil)
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", ct)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	value := func(name string, labels map[string]string) float64 {
		f := fams[name]
		if f == nil {
			t.Fatalf("no family %s in\n%s", name, b)
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
		t.Fatalf("%s has no series %v", name, labels)
		return 0
	}
	for name, want := range map[string]float64{
		"vkc_generated_tokens_total":      8,
		"vkc_time_to_first_token_seconds": 2,
		"vkc_request_duration_seconds":    2,
		"vkc_kv_slots":                    1,
		"vkc_requests_in_flight":          0,
		"vkc_queue_length":                0,
	} {
		if got := value(name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := value("vkc_requests_total", map[string]string{"endpoint": "chat", "code": "200"}); got != 2 {
		t.Errorf("chat 200s: %v", got)
	}
	if got := value("vkc_requests_total", map[string]string{"endpoint": "chat", "code": "400"}); got != 1 {
		t.Errorf("chat 400s: %v", got)
	}
	if got := value("vkc_inter_token_seconds", nil); got < 1 {
		t.Errorf("inter-token observations: %v", got)
	}
	if pt := value("vkc_prompt_tokens_total", nil); pt < 2 || value("vkc_prompt_tokens_reused_total", nil) != pt/2-1 {
		t.Errorf("prompt tokens %v, reused %v (the second request repeats the first)", pt, value("vkc_prompt_tokens_reused_total", nil))
	}
}

// curl, as a user tries the server from a shell: a plain completion and a stream.
func TestCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is not installed: scripts/setup.sh installs it (Debian: apt-get install curl)")
	}
	hs, _, m := newServer(t, server.Config{APIKey: "k"})
	want := reference(t, m, 6)
	body, _ := json.Marshal(map[string]any{"messages": conversation, "max_tokens": 6, "temperature": 0})
	out, err := exec.Command(curl, "-sS", "--fail-with-body", hs.URL+"/v1/chat/completions", "-H", "Authorization: Bearer k",
		"-H", "Content-Type: application/json", "-d", string(body)).CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	var c struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal(out, &c); err != nil || len(c.Choices) != 1 || c.Choices[0].Message.Content != want.Text {
		t.Errorf("curl: %s (%v), want %q", out, err, want.Text)
	}
	body, _ = json.Marshal(map[string]any{"messages": conversation, "max_tokens": 6, "temperature": 0, "stream": true})
	out, err = exec.Command(curl, "-sSN", "--fail-with-body", hs.URL+"/v1/chat/completions", "-H", "Authorization: Bearer k", "-d", string(body)).CombinedOutput()
	if err != nil {
		t.Fatalf("curl stream: %v\n%s", err, out)
	}
	if s := string(out); !strings.HasPrefix(s, "data: {") || !strings.HasSuffix(s, "data: [DONE]\n\n") || strings.Count(s, "chat.completion.chunk") < 3 {
		t.Errorf("curl stream:\n%s", out)
	}
	out, _ = exec.Command(curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", hs.URL+"/v1/models").CombinedOutput()
	if string(out) != "401" {
		t.Errorf("curl without the key: %s", out)
	}
	_ = fmt.Sprint
}

// Concurrent requests on a plan with slots are batched (the metrics count decode steps that
// advanced several sequences) and each answers what the same request answers alone.
func TestBatchedRequests(t *testing.T) {
	hs, _, m := newServerOn(t, compiledPlan(t, "parallel.yaml"), server.Config{})
	if a := m.Activity(); a.Slots != 4 {
		t.Fatalf("parallel.yaml's plan: %+v, want 4 slots", a)
	}
	body := func(i int) string {
		return fmt.Sprintf(`{"messages":[{"role":"user","content":"Question %d: %s"}],"max_tokens":12,"temperature":0}`, i, strings.Repeat("why ", i))
	}
	type answer struct {
		Choices []struct{ Message struct{ Content string } }
		Usage   struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	const n = 6
	alone := make([]answer, n)
	for i := range n {
		if code := post(t, hs.URL+"/v1/chat/completions", body(i), &alone[i]); code != 200 {
			t.Fatal(code)
		}
	}
	before := m.Activity()
	got := make([]answer, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = post(t, hs.URL+"/v1/chat/completions", body(i), &got[i])
		}()
	}
	wg.Wait()
	for i := range n {
		if codes[i] != 200 || len(got[i].Choices) != 1 || got[i].Choices[0].Message.Content != alone[i].Choices[0].Message.Content {
			t.Errorf("request %d: %d %+v, alone %+v", i, codes[i], got[i], alone[i])
		}
	}
	after := m.Activity()
	if steps, rows := after.DecodeSteps-before.DecodeSteps, after.DecodeRows-before.DecodeRows; steps == 0 || float64(rows)/float64(steps) < 1.5 {
		t.Errorf("%d decode steps advanced %d sequences: the requests were not batched", steps, rows)
	}
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "vkc_kv_slots 4\n") {
		t.Errorf("metrics:\n%s", b)
	}
}
