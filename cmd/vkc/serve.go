package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/server"
)

func init() {
	register(&command{
		name:    "serve",
		usage:   "plan.bin|model.yaml|model.gguf|HF-DIR [--host 127.0.0.1] [--port 8080] [--parallel N] [--kv f16|f32|q8_0|q4_0] [--act f32|f16] [--api-key KEY] [--alias NAME] [--max-tokens N] [--timeout D] [--max-body BYTES] [--max-queue N] [--shutdown-timeout D] [--log-format text|json] [--device D] [--plan-cache DIR]",
		short:   "serve a model over OpenAI's HTTP API (chat completions and completions, plain and streamed; /health, /metrics)",
		example: "vkc serve model.plan --port 8080",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			host := fs.String("host", "127.0.0.1", "the address to listen on (0.0.0.0: every interface)")
			port := fs.Int("port", 8080, "the TCP port to listen on (0: any free port, printed in the log)")
			apiKey := fs.String("api-key", "", "require this bearer token on /v1 requests (Authorization: Bearer KEY; default: $VKC_API_KEY, else none)")
			alias := fs.String("alias", "", "the model's id in /v1/models and the responses (default: the plan's model name)")
			maxTokens := fs.Int("max-tokens", 0, "the most tokens one request may generate (default: the plan's context)")
			timeout := fs.Duration("timeout", 10*time.Minute, "the longest a request may take")
			maxBody := fs.Int64("max-body", 1<<20, "the largest request body, in bytes")
			maxQueue := fs.Int("max-queue", 256, "the most requests waiting for the model; more get 429 at once")
			grace := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGTERM or SIGINT: how long requests in flight may take to finish before they are cancelled")
			logFormat := fs.String("log-format", "text", "the log's format on standard error: text or json")
			verbose := fs.Bool("v", false, "log /health and /metrics requests too")
			device := fs.String("device", "", "the device, by index or name substring (default: $VKC_DEVICE, else the best)")
			foreign := fs.Bool("allow-foreign", false, "run a plan compiled for another device")
			parallel := fs.Int("parallel", 4, "a GGUF file or Hugging Face folder is compiled with KV caches for N sequences, batched together as requests come (a plan or model.yaml has its own: see docs/serving.md); 1: one at a time")
			planCache := fs.String("plan-cache", "", "where a model's plan is kept once compiled (default: the user cache folder's vkc/plans)")
			prec := precisionFlags(fs)
			chunk := fs.Int("chunk", 0, "with slots: the most prompt tokens one step runs between the running requests' decode steps (default 64)")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one plan or model, got %d arguments", len(args))
				}
				if *port < 0 || *port > 65535 {
					return usagef("--port %d: want 0 to 65535", *port)
				}
				if *maxTokens < 0 || *timeout <= 0 || *maxBody <= 0 || *maxQueue <= 0 || *grace < 0 || *parallel < 1 || *chunk < 0 {
					return usagef("--max-tokens, --timeout, --max-body, --max-queue, --shutdown-timeout, --parallel and --chunk want positive values")
				}
				if *prec != (importer.Precision{}) && !importer.IsHFDir(args[0]) && !importer.IsGGUFPath(args[0]) {
					return usagef("--act and --kv go with a GGUF file or Hugging Face folder; %s has its own precision (a plan's was chosen when it was compiled)", args[0])
				}
				if err := prec.Check(); err != nil {
					return usagef("%v", err)
				}
				set := map[string]bool{}
				fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
				slots := *parallel
				if !set["parallel"] {
					slots = -1 // the default: batched for what the importer writes
				}
				lvl := slog.LevelInfo
				if *verbose {
					lvl = slog.LevelDebug
				}
				var h slog.Handler
				switch *logFormat {
				case "text":
					h = slog.NewTextHandler(fs.Output(), &slog.HandlerOptions{Level: lvl})
				case "json":
					h = slog.NewJSONHandler(fs.Output(), &slog.HandlerOptions{Level: lvl})
				default:
					return usagef("--log-format %q: want text or json", *logFormat)
				}
				key := *apiKey
				if key == "" {
					key = os.Getenv("VKC_API_KEY")
				}
				cfg := server.Config{APIKey: key, MaxBodyBytes: *maxBody, MaxTokens: *maxTokens, Timeout: *timeout,
					MaxQueue: *maxQueue, Logger: slog.New(h)}
				addr := net.JoinHostPort(*host, strconv.Itoa(*port))
				return serveCmd(args[0], addr, *alias, engine.Options{Device: *device, AllowForeign: *foreign, PrefillChunk: *chunk}, cfg, *grace, slots, *prec, *planCache, fs.Output())
			}
		},
	})
}

// serveCmd listens on addr at once (so /health answers 503 while the model loads), loads the
// plan (or compiles the model), serves until SIGTERM or SIGINT, then shuts down gracefully: the
// health check turns 503 and new requests are refused, those in flight get grace to finish and
// are cancelled after it, and the command returns nil (exit 0).
func serveCmd(path, addr, alias string, lo engine.Options, cfg server.Config, grace time.Duration, slots int, prec importer.Precision, planCache string, stderr io.Writer) error {
	log := cfg.Logger
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s := server.New(cfg)
	// Generations take their contexts from the requests', which end when base is cancelled:
	// after the grace period, every generation still running stops.
	base, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	hs := &http.Server{Handler: s.Handler(), BaseContext: func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String())

	type result struct {
		m    *engine.Model
		name string
		err  error
	}
	loadedc := make(chan result, 1)
	// Ready only when every pipeline exists: the driver's shader compiles happen before /health
	// says ok, not in the first requests.
	lo.Prepare = true
	lastShown := time.Time{}
	lo.PrepareProgress = func(done, total int) {
		if done == total || time.Since(lastShown) > 2*time.Second {
			lastShown = time.Now()
			log.Info("preparing pipelines", "done", done, "total", total)
		}
	}
	lastUp := time.Time{}
	lo.LoadProgress = func(done, total uint64) {
		if total >= progressStep && (done == total || time.Since(lastUp) > 2*time.Second) {
			lastUp = time.Now()
			log.Info("uploading weights", "done", byteSize(done), "total", byteSize(total))
		}
	}
	go func() {
		m, name, err := loadForServe(ctx, path, lo, slots, prec, planCache, stderr, log)
		loadedc <- result{m, name, err}
	}()
	var m *engine.Model
	select {
	case r := <-loadedc:
		if r.err != nil {
			hs.Close()
			return r.err
		}
		m = r.m
		if alias == "" {
			alias = r.name
		}
		s.Ready(m, alias)
	case err := <-served:
		return err
	case <-ctx.Done():
		log.Info("interrupted while loading")
		hs.Close()
		if r := <-loadedc; r.m != nil {
			r.m.Close()
		}
		return nil
	}
	defer m.Close()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop() // a second signal ends the process at once
	log.Info("shutting down", "in_flight", s.InFlight(), "grace", grace.String())
	s.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("requests still running after the grace period: cancelling them", "in_flight", s.InFlight())
		cancelAll()
		cctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		if err := hs.Shutdown(cctx); err != nil {
			hs.Close()
		}
	}
	log.Info("stopped")
	return nil
}

// defaultSlots is the sequences vkc serve batches when it compiles a GGUF file or Hugging Face
// folder without --parallel (llama-server's default too).
const defaultSlots = 4

// loadForServe loads a plan file, or compiles a model (model.yaml, GGUF, ONNX, a Hugging Face
// folder) for the device first, showing the compile's progress, and returns the model and its
// name.
//
// slots is --parallel: -1 when not given (a GGUF file or Hugging Face folder then gets
// defaultSlots), 1 for one sequence; a plan or model.yaml has its own, and a --parallel that
// disagrees with it is an error.
func loadForServe(ctx context.Context, path string, lo engine.Options, slots int, prec importer.Precision, planCache string, stderr io.Writer, log *slog.Logger) (*engine.Model, string, error) {
	imported := importer.IsHFDir(path) || importer.IsGGUFPath(path)
	if plan.CheckFile(path) == nil {
		log.Info("loading plan", "plan", path)
		m, err := engine.Load(path, lo)
		if err != nil {
			return nil, "", err
		}
		if have := m.Activity().Slots; slots > 0 && slots != have {
			m.Close()
			return nil, "", fmt.Errorf("--parallel %d: the plan %s was compiled for %d (vkc compile --parallel N compiles another)", slots, path, have)
		}
		return m, m.Plan().Model, nil
	}
	switch {
	case slots < 0 && imported:
		slots = defaultSlots
	case slots < 0:
		slots = 0
	case slots == 1:
		slots = 0 // one sequence: prefill and decode
	case !imported:
		return nil, "", fmt.Errorf("--parallel %d: %s is not a GGUF file or Hugging Face folder; its batched function (if any) says how many sequences it serves", slots, path)
	}
	measure, why, err := vkc.MeasureByDefault(lo.Device)
	if err != nil {
		return nil, "", err
	}
	pr := newProgressPrinter(stderr)
	res, err := vkc.CachedPlan(ctx, path, vkc.PlanCacheOptions{
		Compile: vkc.Options{Device: lo.Device, Tune: measure, Budget: vkc.DefaultBudget, ArgmaxOutput: true, TopK: vkc.DefaultTopK,
			Progress: pr.report},
		Slots:     slots,
		Precision: prec,
		Dir:       planCache,
		Compiling: func(planPath string) {
			log.Info("compiling", "model", path, "parallel", max(slots, 1), "how", why, "plan", planPath)
		},
	})
	pr.done()
	if err != nil {
		return nil, "", err
	}
	if res.Cached {
		log.Info("plan from the plan cache", "model", path, "plan", res.Path)
	}
	m, err := engine.Load(res.Path, lo)
	if err != nil {
		return nil, "", err
	}
	return m, strings.TrimSuffix(filepath.Base(filepath.Clean(path)), filepath.Ext(path)), nil
}
