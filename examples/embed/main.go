// Command embed is a Go program that runs a compiled vkc plan through package engine, the
// runtime-only embedding API (it links none of the compiler): it loads the plan onto the best
// Vulkan device and runs a greedy decode loop, first step by step with Model.Call (to show the
// calls), then with Model.Generate.
//
//	go run ./cmd/vkc compile examples/tinyllama/model.yaml -o tinyllama.plan
//	go run ./examples/embed -plan tinyllama.plan -prompt 37,235,140,72 -steps 8
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vkc-project/vkc/engine"
)

func main() {
	planPath := flag.String("plan", "tinyllama.plan", "a plan compiled from a causal language model with prefill and decode functions")
	prompt := flag.String("prompt", "37,235,140,72", "comma-separated prompt token ids")
	steps := flag.Int("steps", 8, "tokens to generate")
	flag.Parse()
	if err := run(*planPath, *prompt, *steps); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(planPath, promptArg string, steps int) error {
	var prompt []int32
	for _, s := range strings.Split(promptArg, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return fmt.Errorf("prompt: %q is not a token id", s)
		}
		prompt = append(prompt, int32(v))
	}
	if steps < 1 {
		return fmt.Errorf("-steps %d: want at least 1", steps)
	}
	ctx := context.Background()

	// Load = read the plan file, open the device it was compiled for, create the pipelines,
	// upload the weights, zero the KV caches, record every function once.
	m, err := engine.Load(planPath, engine.Options{})
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Printf("%s on %s\n", m.Plan().Model, m.Device.Info.Name)

	// 1. By hand: every prompt token through decode (one token at position pos), then feed back
	// the argmax of the logits. Call takes Go values and checks them against the signature.
	var next int32
	var tokens []int32
	t0 := time.Now()
	runs := len(prompt) + steps - 1
	for pos := 0; pos < runs; pos++ {
		tok := next
		if pos < len(prompt) {
			tok = prompt[pos]
		}
		res, err := m.Call(ctx, "decode", map[string]any{"tokens": []int32{tok}, "pos": pos})
		if err != nil {
			return err
		}
		logits, err := res.Float32s("logits") // [1, vocab]; f16 logits are widened
		if err != nil {
			return err
		}
		next = int32(engine.Argmax(logits))
		if pos >= len(prompt)-1 {
			tokens = append(tokens, next)
		}
	}
	fmt.Printf("by hand:  %v (%v per run)\n", tokens, (time.Since(t0) / time.Duration(runs)).Round(time.Microsecond))

	// 2. The same with Generate, which uses prefill for full chunks of the prompt and the plan's
	// argmax output when it has one. A new sequence starts at position 0, so the caches need no
	// reset.
	g, err := m.GenerateIDs(ctx, prompt, engine.GenerateOptions{MaxTokens: steps}, nil)
	if err != nil {
		return err
	}
	fmt.Printf("Generate: %v (prompt %v, %v per token)\n", g.Tokens, g.Prompt.Round(time.Microsecond), g.PerToken().Round(time.Microsecond))
	if !slices.Equal(g.Tokens, tokens) {
		return fmt.Errorf("the two loops disagree: %v by hand, %v from Generate", tokens, g.Tokens)
	}
	return nil
}
