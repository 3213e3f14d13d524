// Package loadgen measures an OpenAI-compatible server under load: at each number of concurrent
// streams, a bounded number of streamed chat completions (and at most a bounded time), reporting
// throughput (generated tokens per second), time to first token and inter-token latency (p50,
// p99) and the requests lost. It only sends to loopback addresses: a load test never leaves the
// machine it runs on.
//
//	rs, err := loadgen.Run(ctx, loadgen.Config{URL: "http://127.0.0.1:8080", Streams: []int{1, 4, 16, 64}, Requests: 64})
//	loadgen.WriteTable(os.Stdout, rs)
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// Config says what load to send.
type Config struct {
	// URL is the server's base URL (http://127.0.0.1:8080); its host must be a loopback address.
	URL    string
	APIKey string
	// Streams are the concurrency levels, measured one after the other (default 1, 4, 16, 64).
	Streams []int
	// Requests is the number of requests sent at each level (default 4 per stream, at least 8);
	// Duration bounds a level's time (default 5 minutes): requests not started by then are not
	// sent (and not lost).
	Requests int
	Duration time.Duration
	// MaxTokens is each request's max_tokens (default 64); Temperature its temperature
	// (default 0, greedy).
	MaxTokens   int
	Temperature float64
	// Prompt gives request i's user message (default: a short question numbered i, so that
	// requests differ).
	Prompt func(i int) string
	// Timeout bounds one request (default 5 minutes).
	Timeout time.Duration
	// Client sends the requests (default: a client with enough idle connections per host).
	Client *http.Client
}

// Result is one concurrency level's measurement.
type Result struct {
	Streams  int
	Requests int // sent
	Lost     int // failed: an HTTP error, a broken stream, no [DONE], or no usage
	Tokens   int // completion tokens of the requests that succeeded (their usage)
	Elapsed  time.Duration
	// Throughput is Tokens / Elapsed, generated tokens per second over the level.
	Throughput float64
	// TTFT is from sending a request to its first piece of text; ITL between consecutive pieces
	// of one request's text; both over the requests that succeeded.
	TTFTp50, TTFTp99, ITLp50, ITLp99 time.Duration
	// Errors are up to 5 of the failures, for the report.
	Errors []string
}

// CheckLoopback returns an error unless rawURL's host is a loopback address (127.0.0.0/8, ::1,
// or localhost resolving only to those).
func CheckLoopback(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%s: want an http:// URL", rawURL)
	}
	host := u.Hostname()
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		if host != "localhost" {
			return fmt.Errorf("%s: the load generator sends only to loopback addresses (127.0.0.1, ::1, localhost), not %q", rawURL, host)
		}
		addrs, err := net.LookupIP(host)
		if err != nil {
			return err
		}
		ips = addrs
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("%s: %s is not a loopback address; the load generator sends only to this machine", rawURL, ip)
		}
	}
	return nil
}

// Run measures each level of cfg.Streams in turn.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if err := CheckLoopback(cfg.URL); err != nil {
		return nil, err
	}
	if len(cfg.Streams) == 0 {
		cfg.Streams = []int{1, 4, 16, 64}
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Minute
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 64
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.Prompt == nil {
		cfg.Prompt = func(i int) string {
			return fmt.Sprintf("Request %d: in a few words, why is the sky blue?", i)
		}
	}
	if cfg.Client == nil {
		maxS := 0
		for _, s := range cfg.Streams {
			maxS = max(maxS, s)
		}
		cfg.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxS, MaxConnsPerHost: maxS,
			DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}}
	}
	var out []Result
	next := 0
	for _, s := range cfg.Streams {
		if s < 1 {
			return out, fmt.Errorf("streams %d: want at least 1", s)
		}
		n := cfg.Requests
		if n <= 0 {
			n = max(4*s, 8)
		}
		r := level(ctx, cfg, s, n, next)
		next += r.Requests
		out = append(out, r)
		if err := ctx.Err(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// sample is one request's measurement.
type sample struct {
	ok     bool
	err    string
	tokens int
	ttft   time.Duration
	gaps   []time.Duration
}

func level(ctx context.Context, cfg Config, streams, n, first int) Result {
	lctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var mu sync.Mutex
	var samples []sample
	jobs := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				s := one(lctx, cfg, first+i)
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range n {
		select {
		case jobs <- i:
		case <-lctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	r := Result{Streams: streams, Requests: len(samples), Elapsed: elapsed}
	var ttft, itl []time.Duration
	for _, s := range samples {
		if !s.ok {
			r.Lost++
			if len(r.Errors) < 5 {
				r.Errors = append(r.Errors, s.err)
			}
			continue
		}
		r.Tokens += s.tokens
		ttft = append(ttft, s.ttft)
		itl = append(itl, s.gaps...)
	}
	if elapsed > 0 {
		r.Throughput = float64(r.Tokens) / elapsed.Seconds()
	}
	r.TTFTp50, r.TTFTp99 = percentile(ttft, 50), percentile(ttft, 99)
	r.ITLp50, r.ITLp99 = percentile(itl, 50), percentile(itl, 99)
	return r
}

// percentile is the nearest-rank p-th percentile (0 for no values).
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// one sends request i as a streamed chat completion and measures it.
func one(ctx context.Context, cfg Config, i int) sample {
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{
		"model":          "vkc",
		"messages":       []map[string]string{{"role": "user", "content": cfg.Prompt(i)}},
		"max_tokens":     cfg.MaxTokens,
		"temperature":    cfg.Temperature,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	})
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, strings.TrimSuffix(cfg.URL, "/")+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return sample{err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	if cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	sent := time.Now()
	resp, err := cfg.Client.Do(req)
	if err != nil {
		return sample{err: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return sample{err: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))}
	}
	s := sample{}
	var last time.Time
	done, usage := false, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct {
				Delta struct{ Content string }
			}
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			}
			Error *struct{ Message string }
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return sample{err: fmt.Sprintf("a stream event is not JSON: %v", err)}
		}
		if ch.Error != nil {
			return sample{err: "the stream reported: " + ch.Error.Message}
		}
		if ch.Usage != nil {
			s.tokens, usage = ch.Usage.CompletionTokens, true
		}
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			now := time.Now()
			if last.IsZero() {
				s.ttft = now.Sub(sent)
			} else {
				s.gaps = append(s.gaps, now.Sub(last))
			}
			last = now
		}
	}
	if err := sc.Err(); err != nil {
		return sample{err: err.Error()}
	}
	if !done || !usage {
		return sample{err: errors.New("the stream ended without its usage and [DONE]").Error()}
	}
	if last.IsZero() {
		s.ttft = time.Since(sent) // no text at all (an immediate end token)
	}
	s.ok = true
	return s
}

// WriteTable writes the results as a Markdown table.
func WriteTable(w io.Writer, rs []Result) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }
	fmt.Fprintln(w, "| streams | requests | lost | tokens | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %d | %d | %d | %d | %.1f | %s | %s | %s | %s |\n", r.Streams, r.Requests, r.Lost, r.Tokens, r.Throughput,
			ms(r.TTFTp50), ms(r.TTFTp99), ms(r.ITLp50), ms(r.ITLp99))
	}
	for _, r := range rs {
		for _, e := range r.Errors {
			fmt.Fprintf(w, "streams %d: lost: %s\n", r.Streams, e)
		}
	}
}
