package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/ir/safetensors"
)

var slotsPlan struct {
	once sync.Once
	path string
	err  error
}

// slotsModel loads tinyllama (the Hugging Face oracle's checkpoint) imported with 4 slots: one
// batched step function of up to 16 rows over caches of 4 sequences. The plan is compiled once per test run.
func slotsModel(t *testing.T, chunk int) *engine.Model {
	t.Helper()
	if _, err := os.Stat("tinyllama.plan"); err != nil {
		t.Skip("needs a Vulkan device (lavapipe is enough)")
	}
	slotsPlan.once.Do(func() {
		// Rows up to 16: the batch function at 16 rows and its variant at 4 (the slots), two
		// programs for lavapipe to compile.
		h, err := importer.ImportHF(src("testdata/hf/tinyllama"), importer.HFOptions{Slots: 4, Prefill: 16})
		if err != nil {
			slotsPlan.err = err
			return
		}
		p, _, err := vkc.Compile(context.Background(), h.Model, vkc.Options{ArgmaxOutput: true, TopK: 16})
		if err != nil {
			slotsPlan.err = err
			return
		}
		slotsPlan.path, _ = filepath.Abs("tinyllama-slots.plan")
		slotsPlan.err = p.WriteFile(slotsPlan.path)
	})
	if slotsPlan.err != nil {
		t.Fatal(slotsPlan.err)
	}
	m, err := engine.Load(slotsPlan.path, engine.Options{PrefillChunk: chunk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if a := m.Activity(); a.Slots != 4 {
		t.Fatalf("the plan's activity %+v: want 4 slots", a)
	}
	return m
}

// Continuous batching: the Hugging Face oracle's greedy tokens come out of the batched plan
// alone and with seven other generations at once (more than its 4 slots, so some wait); every
// generation gives the tokens it gives alone, and decode steps did advance several sequences
// together. Prompts are cut into chunks of 5 tokens, so prompts and decode steps take turns.
func TestSchedulerBatchedEqualsAlone(t *testing.T) {
	m := slotsModel(t, 5)
	ctx := context.Background()
	gold, err := safetensors.ReadAll(src("testdata/hf/tinyllama/golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	golden := engine.Int32s(gold["input_ids"].Data)
	ps := append([][]int32{golden}, prompts(7)...)
	opts := engine.GenerateOptions{MaxTokens: 9}
	alone := make([]string, len(ps))
	for i, p := range ps {
		g, err := m.GenerateIDs(ctx, p, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = fmt.Sprint(g.Tokens)
		if i == 0 && g.Chunks != 4 {
			t.Errorf("a 16-token prompt in chunks of 5: %d chunks", g.Chunks)
		}
	}
	if want := fmt.Sprint(engine.Int32s(gold["greedy_tokens"].Data)); alone[0] != want {
		t.Errorf("alone: %s, the oracle's greedy tokens %s", alone[0], want)
	}
	before := m.Activity()
	got := make([]string, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := m.GenerateIDs(ctx, p, opts, nil)
			if err != nil {
				got[i] = err.Error()
				return
			}
			got[i] = fmt.Sprint(g.Tokens)
		}()
	}
	wg.Wait()
	for i := range ps {
		if got[i] != alone[i] {
			t.Errorf("generation %d: batched %s, alone %s", i, got[i], alone[i])
		}
	}
	after := m.Activity()
	steps, rows := after.DecodeSteps-before.DecodeSteps, after.DecodeRows-before.DecodeRows
	if steps == 0 || float64(rows)/float64(steps) < 1.5 {
		t.Errorf("%d decode steps advanced %d sequences: no batching", steps, rows)
	}
	t.Logf("8 generations: %d decode steps, %.2f sequences each", steps, float64(rows)/float64(steps))
}

// Sessions on a plan with slots: a second turn continues in its slot (only the new tokens run)
// with the tokens of a fresh generation; a cancelled generation ends promptly and frees its
// slot; an emit function's ErrStop ends a generation with the tokens emitted so far.
func TestSchedulerSessions(t *testing.T) {
	m := slotsModel(t, 0)
	ctx := context.Background()
	opts := engine.GenerateOptions{MaxTokens: 6}
	s := m.NewSession()
	p1 := prompts(4)[3]
	g1, err := s.GenerateIDs(ctx, p1, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Another session runs in between; the first keeps its slot.
	if _, err := m.NewSession().GenerateIDs(ctx, prompts(2)[1], opts, nil); err != nil {
		t.Fatal(err)
	}
	p2 := append(append(append([]int32(nil), p1...), g1.Tokens...), 4, 5, 6)
	g2, err := s.GenerateIDs(ctx, p2, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := m.GenerateIDs(ctx, p2, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Reused != len(p1)+len(g1.Tokens)-1 || fmt.Sprint(g2.Tokens) != fmt.Sprint(fresh.Tokens) || fresh.Reused != 0 {
		t.Errorf("second turn: reused %d of %d, tokens %v; fresh %v (reused %d)", g2.Reused, len(p2), g2.Tokens, fresh.Tokens, fresh.Reused)
	}

	cctx, cancel := context.WithCancel(ctx)
	n := 0
	start := time.Now()
	g, err := m.GenerateIDs(cctx, prompts(1)[0], engine.GenerateOptions{MaxTokens: 100}, func(int32) error {
		n++
		if n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || g == nil || len(g.Tokens) >= 100 {
		t.Errorf("cancelled: %v, %d tokens", err, len(g.Tokens))
	}
	t.Logf("cancelled after %v", time.Since(start))
	if a := m.Activity(); a.Busy != 0 || a.Waiting != 0 {
		t.Errorf("after the cancelled generation: %+v", a)
	}
	k := 0
	g, err = m.GenerateIDs(ctx, prompts(1)[0], engine.GenerateOptions{MaxTokens: 100}, func(int32) error {
		k++
		if k == 4 {
			return engine.ErrStop
		}
		return nil
	})
	if err != nil || g.Stopped != engine.StopCallback || len(g.Tokens) != 4 {
		t.Errorf("ErrStop at the 4th token: %v, stopped %q, %d tokens", err, g.Stopped, len(g.Tokens))
	}
	bad := errors.New("the consumer failed")
	_, err = m.GenerateIDs(ctx, prompts(1)[0], engine.GenerateOptions{MaxTokens: 100}, func(int32) error { return bad })
	if !errors.Is(err, bad) {
		t.Errorf("an emit error: %v", err)
	}
	for _, c := range []struct {
		prompt []int32
		want   string
	}{{nil, "empty prompt"}, {[]int32{1, 300}, "outside the vocabulary"}, {make([]int32, 129), "holds 128 positions"}} {
		if _, err := m.GenerateIDs(ctx, c.prompt, opts, nil); err == nil || !contains(err.Error(), c.want) {
			t.Errorf("prompt of %d tokens: %v, want %q", len(c.prompt), err, c.want)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
