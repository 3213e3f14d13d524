package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/vkc-project/vkc/engine"
)

// samplingRequest is what chat and completion requests share. Pointers tell a field the client
// left out from a zero.
type samplingRequest struct {
	Model               string          `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"` // llama-server's extension
	MinP                *float64        `json:"min_p"` // llama-server's extension
	RepeatPenalty       *float64        `json:"repeat_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	Seed                *json.Number    `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N        *int            `json:"n"`
	Logprobs json.RawMessage `json:"logprobs"`
	Tools    json.RawMessage `json:"tools"`
}

type chatRequest struct {
	samplingRequest
	Messages []chatMessage `json:"messages"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type completionRequest struct {
	samplingRequest
	Prompt json.RawMessage `json:"prompt"`
	Echo   bool            `json:"echo"`
	Suffix *string         `json:"suffix"`
}

// The defaults of the sampling fields a request leaves out: OpenAI's for temperature and top_p,
// llama-server's for its top_k and min_p.
const (
	defaultTemperature = 1.0
	defaultTopP        = 1.0
	defaultTopK        = 40
	defaultMinP        = 0.05
)

// decode reads the JSON body into v: malformed JSON, a wrong type or trailing data is a 400
// naming what is wrong; unknown fields are ignored, as OpenAI's API does.
func decode(r *http.Request, v any) error {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return err
		}
		return badRequest("", "reading the request body: %v", err)
	}
	dec := json.NewDecoder(&buf)
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badRequest(te.Field, "%s: want %s, got a JSON %s", te.Field, te.Type, te.Value)
		}
		return badRequest("", "the request body is not a JSON object of the request: %v", err)
	}
	if dec.More() {
		return badRequest("", "the request body has data after its JSON object")
	}
	return nil
}

// options turns the sampling fields into generation options, checking each against what the
// server does: maxTokens is the server's cap, context the plan's positions.
func (q *samplingRequest) options(maxTokens int) (engine.GenerateOptions, error) {
	var o engine.GenerateOptions
	if q.N != nil && *q.N != 1 {
		return o, badRequest("n", "n=%d: this server generates one choice per request", *q.N)
	}
	if len(q.Logprobs) > 0 && string(q.Logprobs) != "false" && string(q.Logprobs) != "null" {
		return o, badRequest("logprobs", "logprobs are not supported")
	}
	if len(q.Tools) > 0 && string(q.Tools) != "null" && string(q.Tools) != "[]" {
		return o, badRequest("tools", "tools are not supported")
	}
	for name, p := range map[string]*float64{"frequency_penalty": q.FrequencyPenalty, "presence_penalty": q.PresencePenalty} {
		if p != nil && *p != 0 {
			return o, badRequest(name, "%s is not supported (repeat_penalty is)", name)
		}
	}
	mt := q.MaxTokens
	if q.MaxCompletionTokens != nil {
		mt = q.MaxCompletionTokens
	}
	o.MaxTokens = maxTokens
	if mt != nil {
		switch {
		case *mt < 1:
			return o, badRequest("max_tokens", "max_tokens %d: want at least 1", *mt)
		case maxTokens > 0 && *mt > maxTokens:
			return o, badRequest("max_tokens", "max_tokens %d is more than this server's limit of %d", *mt, maxTokens)
		}
		o.MaxTokens = *mt
	}
	sp := engine.Sampling{Temperature: defaultTemperature, TopP: defaultTopP, TopK: defaultTopK, MinP: defaultMinP, RepeatPenalty: 1}
	if q.Temperature != nil {
		if *q.Temperature > 2 {
			return o, badRequest("temperature", "temperature %v: want 0 to 2", *q.Temperature)
		}
		sp.Temperature = *q.Temperature
	}
	if q.TopP != nil {
		sp.TopP = *q.TopP
	}
	if q.TopK != nil {
		sp.TopK = *q.TopK
	}
	if q.MinP != nil {
		sp.MinP = *q.MinP
	}
	if q.RepeatPenalty != nil {
		sp.RepeatPenalty = *q.RepeatPenalty
	}
	if err := sp.Check(); err != nil {
		return o, badRequest("", "%v", err)
	}
	if q.Seed != nil {
		v, err := q.Seed.Int64()
		if err != nil {
			return o, badRequest("seed", "seed %s: want an integer", q.Seed.String())
		}
		sp.Seed = uint64(v)
	} else {
		sp.Seed = rand.Uint64()
	}
	o.Sampling = sp
	stops, err := stopStrings(q.Stop)
	if err != nil {
		return o, err
	}
	o.Stop = stops
	return o, nil
}

// stopStrings reads stop: a string, a list of up to 4 strings, or null.
func stopStrings(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, badRequest("stop", "stop: an empty string")
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop", "stop: want a string or a list of strings")
	}
	if len(list) > 4 {
		return nil, badRequest("stop", "stop: %d strings; at most 4", len(list))
	}
	for _, s := range list {
		if s == "" {
			return nil, badRequest("stop", "stop: an empty string")
		}
	}
	return list, nil
}

// content reads a message's content: a string, or a list of text parts.
func content(i int, raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: want a string or a list of text parts", i)
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" {
			return "", badRequest(fmt.Sprintf("messages[%d].content[%d]", i, j), "messages[%d].content[%d] is a %q part; this server reads text only", i, j, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// finishReason is OpenAI's finish_reason for why a generation stopped.
func finishReason(g *engine.Generation) string {
	switch g.Stopped {
	case engine.StopMaxTokens, engine.StopContext:
		return "length"
	}
	return "stop"
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptTokensDetails says how many prompt tokens came from the KV cache (OpenAI's
	// cached_tokens).
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usageOf(g *engine.Generation) *usage {
	u := &usage{PromptTokens: g.PromptTokens, CompletionTokens: len(g.Tokens), TotalTokens: g.PromptTokens + len(g.Tokens)}
	u.PromptTokensDetails.CachedTokens = g.Reused
	return u
}

// run is one generation request in flight: it streams (or collects) the text, timing it for the
// metrics.
type run struct {
	s       *Server
	w       http.ResponseWriter
	ctx     context.Context
	start   time.Time
	pieces  int
	stream  bool
	chunk   func(text string) any // the stream's chunk for a piece of text
	wroteSE bool                  // the event stream has begun
}

// emit is the generation's text callback.
func (rn *run) emit(text string) error {
	if rn.pieces == 0 {
		rn.s.met.observe("vkc_time_to_first_token_seconds", time.Since(rn.start).Seconds())
	}
	rn.pieces++
	if !rn.stream {
		return nil
	}
	return rn.event(rn.chunk(text))
}

// begin starts the event stream.
func (rn *run) begin() {
	if rn.wroteSE {
		return
	}
	h := rn.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	rn.w.WriteHeader(http.StatusOK)
	rn.wroteSE = true
}

// event writes one server-sent event and flushes it; an error (the client went away) stops the
// generation.
func (rn *run) event(v any) error {
	rn.begin()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(rn.w, "data: %s\n\n", b); err != nil {
		return err
	}
	return http.NewResponseController(rn.w).Flush()
}

func (rn *run) done() {
	rn.begin()
	fmt.Fprint(rn.w, "data: [DONE]\n\n")
	http.NewResponseController(rn.w).Flush()
}

// failed turns a generation error into the request's answer: a timeout is 504, a client that
// went away is logged, a prompt too long for the plan is 400, anything else 500. A stream that
// has begun gets an error event instead.
func (rn *run) failed(err error) error {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case errors.Is(context.Cause(rn.ctx), errTimeout):
		ae = apiErr(http.StatusGatewayTimeout, "timeout_error", "", "%v", errTimeout)
	case rn.ctx.Err() != nil:
		ae = apiErr(499, "cancelled", "", "the request was cancelled: %v", context.Cause(rn.ctx))
	case strings.Contains(err.Error(), "cache holds") || strings.Contains(err.Error(), "outside the vocabulary"):
		ae = badRequest("messages", "%v", err)
		ae.code = "context_length_exceeded"
	default:
		ae = apiErr(http.StatusInternalServerError, "server_error", "", "%v", err)
	}
	if rn.wroteSE {
		info(rn.ctx).add("error", ae.message)
		rn.event(ae.body())
		rn.done()
		return nil
	}
	return ae
}

func (s *Server) record(ctx context.Context, g *engine.Generation) {
	for _, d := range g.Steps {
		s.met.observe("vkc_inter_token_seconds", d.Seconds())
	}
	s.met.add("vkc_prompt_tokens_total", float64(g.PromptTokens))
	s.met.add("vkc_prompt_tokens_reused_total", float64(g.Reused))
	s.met.add("vkc_generated_tokens_total", float64(len(g.Tokens)))
	info(ctx).add("prompt_tokens", g.PromptTokens, "reused", g.Reused, "tokens", len(g.Tokens), "stopped", g.Stopped)
}

func (s *Server) maxTokens(l *loaded) int {
	if s.cfg.MaxTokens > 0 {
		return s.cfg.MaxTokens
	}
	return l.context
}

// chat answers POST /v1/chat/completions.
func (s *Server) chat(w http.ResponseWriter, r *http.Request, l *loaded) error {
	var q chatRequest
	if err := decode(r, &q); err != nil {
		return err
	}
	if len(q.Messages) == 0 {
		return badRequest("messages", "messages: want at least one message")
	}
	msgs := make([]engine.Message, len(q.Messages))
	for i, m := range q.Messages {
		role := m.Role
		if role == "developer" {
			role = "system" // OpenAI's newer name for the system message
		}
		switch role {
		case "system", "user", "assistant":
		default:
			return badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role %q: want system, developer, user or assistant", i, m.Role)
		}
		c, err := content(i, m.Content)
		if err != nil {
			return err
		}
		msgs[i] = engine.Message{Role: role, Content: c}
	}
	opts, err := q.options(s.maxTokens(l))
	if err != nil {
		return err
	}
	id, created := newID("chatcmpl-"), time.Now().Unix()
	info(r.Context()).add("id", id)
	rn := &run{s: s, w: w, ctx: r.Context(), start: time.Now(), stream: q.Stream}
	rn.chunk = func(text string) any {
		return chatChunk(id, created, l.name, map[string]any{"content": text}, nil)
	}
	if q.Stream {
		// The role comes first, as OpenAI's stream sends it.
		if err := rn.event(chatChunk(id, created, l.name, map[string]any{"role": "assistant", "content": ""}, nil)); err != nil {
			return nil
		}
	}
	g, err := l.m.NewSession().Chat(r.Context(), msgs, opts, rn.emit)
	if err != nil {
		if g != nil {
			s.record(r.Context(), g)
		}
		return rn.failed(fmt.Errorf("%w", chatErr(err)))
	}
	s.record(r.Context(), g)
	fr := finishReason(g)
	if q.Stream {
		rn.event(chatChunk(id, created, l.name, map[string]any{}, &fr))
		if q.StreamOptions != nil && q.StreamOptions.IncludeUsage {
			rn.event(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": l.name, "choices": []any{}, "usage": usageOf(g)})
		}
		rn.done()
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": id, "object": "chat.completion", "created": created, "model": l.name,
		"choices": []any{map[string]any{
			"index": 0, "message": map[string]any{"role": "assistant", "content": g.Text},
			"logprobs": nil, "finish_reason": fr,
		}},
		"usage": usageOf(g),
	})
	return nil
}

// chatErr makes the engine's conversation errors 400s (they name what is wrong with the
// messages); other errors pass.
func chatErr(err error) error {
	msg := err.Error()
	if strings.HasPrefix(msg, "chat: ") && !strings.Contains(msg, "no tokenizer") {
		return badRequest("messages", "%s", strings.TrimPrefix(msg, "chat: "))
	}
	if strings.Contains(msg, "no chat template") || strings.Contains(msg, "not one vkc renders") {
		return badRequest("messages", "%s", msg)
	}
	return err
}

func chatChunk(id string, created int64, model string, delta map[string]any, finish *string) map[string]any {
	var fr any
	if finish != nil {
		fr = *finish
	}
	return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": fr}}}
}

// completions answers POST /v1/completions: the prompt as text, encoded with the tokenizer's
// special tokens (BOS), no chat template.
func (s *Server) completions(w http.ResponseWriter, r *http.Request, l *loaded) error {
	var q completionRequest
	if err := decode(r, &q); err != nil {
		return err
	}
	var prompt string
	if err := json.Unmarshal(q.Prompt, &prompt); err != nil {
		var list []string
		if err := json.Unmarshal(q.Prompt, &list); err != nil || len(list) != 1 {
			return badRequest("prompt", "prompt: want a string (or a list of one string)")
		}
		prompt = list[0]
	}
	if prompt == "" {
		return badRequest("prompt", "prompt: an empty prompt")
	}
	if q.Echo {
		return badRequest("echo", "echo is not supported")
	}
	if q.Suffix != nil && *q.Suffix != "" {
		return badRequest("suffix", "suffix is not supported")
	}
	opts, err := q.options(s.maxTokens(l))
	if err != nil {
		return err
	}
	id, created := newID("cmpl-"), time.Now().Unix()
	info(r.Context()).add("id", id)
	rn := &run{s: s, w: w, ctx: r.Context(), start: time.Now(), stream: q.Stream}
	chunk := func(text string, finish any) map[string]any {
		return map[string]any{"id": id, "object": "text_completion", "created": created, "model": l.name,
			"choices": []any{map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}}}
	}
	rn.chunk = func(text string) any { return chunk(text, nil) }
	g, err := l.m.NewSession().Generate(r.Context(), prompt, opts, rn.emit)
	if err != nil {
		if g != nil {
			s.record(r.Context(), g)
		}
		return rn.failed(err)
	}
	s.record(r.Context(), g)
	fr := finishReason(g)
	if q.Stream {
		rn.event(chunk("", fr))
		if q.StreamOptions != nil && q.StreamOptions.IncludeUsage {
			rn.event(map[string]any{"id": id, "object": "text_completion", "created": created, "model": l.name, "choices": []any{}, "usage": usageOf(g)})
		}
		rn.done()
		return nil
	}
	c := chunk(g.Text, fr)
	c["usage"] = usageOf(g)
	writeJSON(w, http.StatusOK, c)
	return nil
}
