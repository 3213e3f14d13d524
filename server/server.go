// Package server is vkc's OpenAI-compatible HTTP front end: it serves a plan loaded by package
// engine over the chat completions, completions and models endpoints of OpenAI's API (plain and
// streamed as server-sent events), with a health check for load balancers and Prometheus
// metrics. It sits on engine only (a test keeps it so): the engine batches, schedules and
// reuses cached prompt prefixes; the server translates HTTP, enforces limits and reports.
//
//	s := server.New(server.Config{Logger: slog.Default()})
//	go http.ListenAndServe("127.0.0.1:8080", s.Handler())
//	m, err := engine.Load("model.plan", engine.Options{})
//	s.Ready(m, "model") // /health answers 200 from now on
//
// Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
// GET /metrics. docs/serving.md describes them, the limits and the metrics.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vkc-project/vkc/engine"
)

// Config configures a Server. The zero value serves without a key, with the default limits.
type Config struct {
	// APIKey, when set, is the bearer token every /v1 request must carry (Authorization:
	// Bearer KEY); /health and /metrics need none.
	APIKey string
	// MaxBodyBytes bounds a request body (default 1 MiB); a larger one gets 413.
	MaxBodyBytes int64
	// MaxTokens bounds a request's max_tokens (default: the plan's context); a request asking for
	// more gets 400, one asking for none gets this many (or until the context is full).
	MaxTokens int
	// Timeout bounds a request's generation (default 10 minutes); past it the generation stops
	// and the request fails (504), or a stream ends with an error event.
	Timeout time.Duration
	// MaxQueue bounds the requests waiting for the model (default 256); past it a request gets
	// 429 at once, so that a load balancer can send it elsewhere.
	MaxQueue int
	// Logger receives a line per request and the server's events (default: slog.Default()).
	Logger *slog.Logger
}

// Server serves one model. Its handler answers 503 until Ready is called, and again after
// Drain.
type Server struct {
	cfg      Config
	log      *slog.Logger
	model    atomic.Pointer[loaded]
	draining atomic.Bool
	met      *metrics
	inFlight atomic.Int64
}

type loaded struct {
	m       *engine.Model
	name    string
	created int64
	context int // positions of the KV cache (0: unbounded)
}

// New returns a server that has no model yet.
func New(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, met: newMetrics()}
	s.registerMetrics()
	return s
}

// Ready makes the server answer with model m, listed as name by /v1/models.
func (s *Server) Ready(m *engine.Model, name string) {
	l := &loaded{m: m, name: name, created: time.Now().Unix(), context: engine.ContextLength(m.Plan())}
	s.model.Store(l)
	s.log.Info("model ready", "model", name, "plan", m.Path, "device", m.Device.Info.Name, "context", l.context, "slots", m.Activity().Slots)
}

// Drain makes /health answer 503 and new generation requests get 503, for a graceful
// shutdown: a load balancer stops sending requests while those in flight finish.
func (s *Server) Drain() { s.draining.Store(true) }

// InFlight is the number of generation requests being answered.
func (s *Server) InFlight() int { return int(s.inFlight.Load()) }

func (s *Server) registerMetrics() {
	m := s.met
	m.counter("vkc_requests_total", "HTTP requests answered, by endpoint and status code.", "endpoint", "code")
	m.counter("vkc_prompt_tokens_total", "Prompt tokens of the generation requests (after the chat template).")
	m.counter("vkc_prompt_tokens_reused_total", "Prompt tokens whose keys and values were in the KV cache already (prefix reuse).")
	m.counter("vkc_generated_tokens_total", "Tokens generated.")
	m.gauge("vkc_requests_in_flight", "Generation requests being answered.", func() float64 { return float64(s.inFlight.Load()) })
	m.gauge("vkc_queue_length", "Generations waiting for a KV slot.", func() float64 { return float64(s.activity().Waiting) })
	m.gauge("vkc_kv_slots", "Sequences the plan's KV cache holds (--parallel).", func() float64 { return float64(s.activity().Slots) })
	m.gauge("vkc_kv_slots_in_use", "KV slots generating now.", func() float64 { return float64(s.activity().Busy) })
	m.gauge("vkc_batch_occupancy", "Sequences advanced by the last batched step, over the slots.", func() float64 {
		a := s.activity()
		if a.Slots == 0 {
			return 0
		}
		return float64(a.LastBatch) / float64(a.Slots)
	})
	m.histogram("vkc_time_to_first_token_seconds", "From a request's arrival to its first piece of generated text.",
		0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
	m.histogram("vkc_inter_token_seconds", "Between consecutive generated tokens of a request.",
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
	m.histogram("vkc_request_duration_seconds", "Generation requests, arrival to the last byte.",
		0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
}

func (s *Server) activity() engine.Activity {
	if l := s.model.Load(); l != nil {
		return l.m.Activity()
	}
	return engine.Activity{}
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.generation("chat", http.MethodPost, s.chat))
	mux.HandleFunc("/v1/completions", s.generation("completions", http.MethodPost, s.completions))
	mux.HandleFunc("/v1/models", s.endpoint("models", http.MethodGet, true, s.models))
	mux.HandleFunc("/health", s.endpoint("health", http.MethodGet, false, s.health))
	mux.HandleFunc("/metrics", s.endpoint("metrics", http.MethodGet, false, s.metrics))
	mux.HandleFunc("/", s.endpoint("other", "", false, func(w http.ResponseWriter, r *http.Request) error {
		return apiErr(http.StatusNotFound, "not_found_error", "", "no endpoint %s %s (this server has POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, GET /metrics)", r.Method, r.URL.Path)
	}))
	return mux
}

// apiError is an error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	status  int
	typ     string
	param   string
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func apiErr(status int, typ, param, format string, args ...any) *apiError {
	return &apiError{status: status, typ: typ, param: param, message: fmt.Sprintf(format, args...)}
}

func badRequest(param, format string, args ...any) *apiError {
	return apiErr(http.StatusBadRequest, "invalid_request_error", param, format, args...)
}

func (e *apiError) body() map[string]any {
	var param, code any
	if e.param != "" {
		param = e.param
	}
	if e.code != "" {
		code = e.code
	}
	return map[string]any{"error": map[string]any{"message": e.message, "type": e.typ, "param": param, "code": code}}
}

// recorder remembers the status a handler wrote.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// reqInfo collects what a request's log line says beyond the HTTP part.
type reqInfo struct {
	mu    sync.Mutex
	attrs []any
}

func (ri *reqInfo) add(attrs ...any) {
	ri.mu.Lock()
	ri.attrs = append(ri.attrs, attrs...)
	ri.mu.Unlock()
}

type infoKey struct{}

func info(ctx context.Context) *reqInfo {
	if ri, ok := ctx.Value(infoKey{}).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{}
}

// endpoint wraps a handler: method check, API key (when auth), the request's log line and its
// count, and errors written in OpenAI's shape.
func (s *Server) endpoint(name, method string, auth bool, h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		ri := &reqInfo{}
		r = r.WithContext(context.WithValue(r.Context(), infoKey{}, ri))
		var err error
		switch {
		case method != "" && r.Method != method:
			rec.Header().Set("Allow", method)
			err = apiErr(http.StatusMethodNotAllowed, "invalid_request_error", "", "%s takes %s, not %s", r.URL.Path, method, r.Method)
		case auth && s.cfg.APIKey != "" && !s.authorized(r):
			err = &apiError{status: http.StatusUnauthorized, typ: "authentication_error", code: "invalid_api_key",
				message: "a valid API key is required: Authorization: Bearer KEY"}
		default:
			err = h(rec, r)
		}
		if err != nil {
			s.writeError(rec, r, err)
		}
		code := rec.status
		if !rec.wrote {
			code = http.StatusOK
		}
		s.met.add("vkc_requests_total", 1, name, fmt.Sprint(code))
		attrs := []any{"method", r.Method, "path", r.URL.Path, "status", code, "ms", float64(time.Since(start).Microseconds()) / 1000, "remote", r.RemoteAddr}
		ri.mu.Lock()
		attrs = append(attrs, ri.attrs...)
		ri.mu.Unlock()
		if err != nil {
			attrs = append(attrs, "error", err.Error())
		}
		lvl := slog.LevelInfo
		switch {
		case name == "health" || name == "metrics":
			lvl = slog.LevelDebug // polled; a 503 while loading is no error
		case code >= 500:
			lvl = slog.LevelError
		}
		s.log.Log(r.Context(), lvl, "request", attrs...)
	}
}

// authorized checks the bearer token in constant time.
func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return false
	}
	a, b := []byte(strings.TrimSpace(tok)), []byte(s.cfg.APIKey)
	if len(a) != len(b) {
		return false
	}
	var d byte
	for i := range a {
		d |= a[i] ^ b[i]
	}
	return d == 0
}

// writeError answers err: an apiError as it says, a body too large as 413, anything else as a
// server error. Nothing is written when the response has begun (a stream reports its errors
// itself).
func (s *Server) writeError(w *recorder, r *http.Request, err error) {
	if w.wrote {
		return
	}
	var ae *apiError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &mb):
		ae = apiErr(http.StatusRequestEntityTooLarge, "invalid_request_error", "", "the request body is larger than the server's limit of %d bytes", mb.Limit)
	default:
		ae = apiErr(http.StatusInternalServerError, "server_error", "", "%v", err)
	}
	if ae.status == http.StatusServiceUnavailable || ae.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, ae.status, ae.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// generation wraps a generation endpoint: the model must be ready and the server not draining,
// the queue not full; the request's context ends at the timeout or when the client goes away.
func (s *Server) generation(name, method string, h func(http.ResponseWriter, *http.Request, *loaded) error) http.HandlerFunc {
	return s.endpoint(name, method, true, func(w http.ResponseWriter, r *http.Request) error {
		l := s.model.Load()
		switch {
		case l == nil:
			return apiErr(http.StatusServiceUnavailable, "unavailable_error", "", "the model is loading")
		case s.draining.Load():
			return apiErr(http.StatusServiceUnavailable, "unavailable_error", "", "the server is shutting down")
		case l.m.Activity().Waiting >= s.cfg.MaxQueue:
			return apiErr(http.StatusTooManyRequests, "rate_limit_error", "", "%d requests are waiting for the model (the server's --max-queue)", s.cfg.MaxQueue)
		}
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		ctx, cancel := context.WithTimeoutCause(r.Context(), s.cfg.Timeout, errTimeout)
		defer cancel()
		start := time.Now()
		err := h(w, r.WithContext(ctx), l)
		if err == nil {
			s.met.observe("vkc_request_duration_seconds", time.Since(start).Seconds())
		}
		return err
	})
}

var errTimeout = errors.New("the request took longer than the server's --timeout")

// health answers 200 {"status":"ok"} once the model is ready (its pipelines created, weights
// uploaded), else 503 {"status":"loading"} or {"status":"shutting down"}.
func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	switch {
	case s.draining.Load():
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
	case s.model.Load() == nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading"})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
	return nil
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) error {
	data := []map[string]any{}
	if l := s.model.Load(); l != nil {
		data = append(data, map[string]any{"id": l.name, "object": "model", "created": l.created, "owned_by": "vkc"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	return nil
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	return s.met.write(w)
}

// newID is a request id: prefix and 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
