package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vkc-project/vkc/server/loadgen"
)

// fakeServer streams 5 pieces per request: the first after 30 ms, then one every 10 ms, and the
// usage; every request whose user message names a number divisible by 7 fails with 503.
func fakeServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var concurrent, peak atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := concurrent.Add(1)
		defer concurrent.Add(-1)
		for {
			p := peak.Load()
			if c <= p || peak.CompareAndSwap(p, c) {
				break
			}
		}
		var q struct {
			Messages []struct{ Content string }
			Stream   bool
		}
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil || !q.Stream || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "bad request", 400)
			return
		}
		var n int
		fmt.Sscanf(q.Messages[0].Content, "Request %d", &n)
		if n%7 == 6 {
			http.Error(w, `{"error":{"message":"busy"}}`, 503)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		time.Sleep(30 * time.Millisecond)
		for i := range 5 {
			if i > 0 {
				time.Sleep(10 * time.Millisecond)
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"w%d \"}}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"completion_tokens\":5}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(hs.Close)
	return hs, &peak
}

// The measurements against a server whose timing is known: the tokens are the usage's, TTFT at
// least the first piece's 30 ms, inter-token latency at least its 10 ms, the failed requests
// counted as lost, the concurrency as asked; the table names every level.
func TestRun(t *testing.T) {
	hs, peak := fakeServer(t)
	rs, err := loadgen.Run(context.Background(), loadgen.Config{URL: hs.URL, Streams: []int{1, 4}, Requests: 14, MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results", len(rs))
	}
	for _, r := range rs {
		// Requests 6 and 13 of the first level, 20 and 27 of the second, fail.
		if r.Requests != 14 || r.Lost != 2 || r.Tokens != 12*5 {
			t.Errorf("streams %d: %d requests, %d lost, %d tokens; want 14, 2, 60", r.Streams, r.Requests, r.Lost, r.Tokens)
		}
		if r.TTFTp50 < 30*time.Millisecond || r.ITLp50 < 10*time.Millisecond || r.ITLp99 < r.ITLp50 || r.TTFTp99 < r.TTFTp50 {
			t.Errorf("streams %d: TTFT %v/%v, ITL %v/%v", r.Streams, r.TTFTp50, r.TTFTp99, r.ITLp50, r.ITLp99)
		}
		if want := float64(r.Tokens) / r.Elapsed.Seconds(); r.Throughput != want {
			t.Errorf("throughput %v, want %v", r.Throughput, want)
		}
	}
	if p := peak.Load(); p != 4 {
		t.Errorf("peak concurrency %d, want 4", p)
	}
	if rs[1].Elapsed > rs[0].Elapsed {
		t.Errorf("4 streams took %v, 1 stream %v", rs[1].Elapsed, rs[0].Elapsed)
	}
	var b bytes.Buffer
	loadgen.WriteTable(&b, rs)
	if s := b.String(); !strings.Contains(s, "| 1 | 14 | 2 | 60 |") || !strings.Contains(s, "| 4 | 14 | 2 | 60 |") || !strings.Contains(s, "HTTP 503") {
		t.Errorf("table:\n%s", s)
	}
}

// Only loopback addresses are loaded.
func TestCheckLoopback(t *testing.T) {
	for url, ok := range map[string]bool{
		"http://127.0.0.1:8080": true, "http://127.3.4.5": true, "http://[::1]:80": true, "http://localhost:9": true,
		"http://10.0.0.1:8080": false, "http://192.168.1.2": false, "http://8.8.8.8": false, "http://example.invalid": false,
		"ftp://127.0.0.1": false,
	} {
		if err := loadgen.CheckLoopback(url); (err == nil) != ok {
			t.Errorf("%s: %v", url, err)
		}
	}
	if _, err := loadgen.Run(context.Background(), loadgen.Config{URL: "http://10.1.2.3"}); err == nil {
		t.Error("Run sent to 10.1.2.3")
	}
}
