// Command embed is a Go program that uses vkc as a library: it loads a compiled plan onto the
// best Vulkan device and runs a greedy decode loop through the API, first step by step with
// Executable.Run (to show the calls), then with vkc.Generate.
//
//	go run ./cmd/vkc compile examples/tinyllama/model.yaml -o tinyllama.plan
//	go run ./examples/embed -plan tinyllama.plan -prompt 37,235,140,72 -steps 8
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vkc-project/vkc"
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
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("prompt: %q is not a token id", s)
		}
		prompt = append(prompt, int32(v))
	}
	ctx := context.Background()

	// Load = read the plan file, open the device it was compiled for, create the pipelines,
	// upload the weights, zero the KV caches, record every function once.
	l, err := vkc.Load(planPath, vkc.LoadOptions{})
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Printf("%s on %s\n", l.Plan().Model, l.Device.Info.Name)

	// 1. By hand: every prompt token through decode (one token at position pos), then feed back
	// the argmax of the logits. Inputs and outputs are byte slices in the plan's layout.
	decode, err := l.Function("decode")
	if err != nil {
		return err
	}
	vocab := int(decode.Outputs[0].Shape[1])
	var next int32
	var tokens []int32
	t0 := time.Now()
	for pos := 0; pos < len(prompt)+steps-1; pos++ {
		tok := next
		if pos < len(prompt) {
			tok = prompt[pos]
		}
		out, err := l.Run(ctx, "decode", map[string][]byte{
			"tokens": vkc.Int32Bytes(tok),
			"pos":    vkc.Int32Bytes(int32(pos)),
		})
		if err != nil {
			return err
		}
		logits := vkc.Float32s(out["logits"])
		next = int32(vkc.Argmax(logits[:vocab]))
		if pos >= len(prompt)-1 {
			tokens = append(tokens, next)
		}
	}
	fmt.Printf("by hand:  %v (%v per run)\n", tokens, (time.Since(t0) / time.Duration(len(prompt)+steps-1)).Round(time.Microsecond))

	// 2. The same with vkc.Generate, which uses prefill for full chunks of the prompt. A new
	// sequence starts at position 0, so the caches need no reset.
	g, err := vkc.Generate(ctx, l, prompt, steps)
	if err != nil {
		return err
	}
	fmt.Printf("Generate: %v (prompt %v, %v per token)\n", g.Tokens, g.Prompt.Round(time.Microsecond), g.PerToken().Round(time.Microsecond))
	if fmt.Sprint(g.Tokens) != fmt.Sprint(tokens) {
		return fmt.Errorf("the two loops disagree")
	}
	return nil
}
