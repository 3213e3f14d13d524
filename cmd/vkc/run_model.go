package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/tokenizer"
)

// runTarget is what `vkc run` was given: a plan file, or a model (a model.yaml, a GGUF or ONNX
// file, a Hugging Face folder) that plan compiles, or finds in the plan cache, when the command
// line is known to be good.
type runTarget struct {
	path      string
	device    string
	recompile bool
	cacheDir  string
	dims      dimFlag
	stderr    io.Writer
}

// isModel reports whether the target is a model rather than a plan.
func (t *runTarget) isModel() bool {
	if vkc.IsPlanFile(t.path) {
		return false
	}
	if st, err := os.Stat(t.path); err == nil && st.IsDir() {
		return true
	}
	switch strings.ToLower(filepath.Ext(t.path)) {
	case ".yaml", ".yml", ".gguf", ".onnx":
		return true
	}
	return importer.IsGGUFPath(t.path)
}

// check refuses the flags that go with a model only when the target is a plan.
func (t *runTarget) check(set map[string]bool) error {
	if t.isModel() {
		if set["allow-foreign"] {
			return usagef("--allow-foreign runs a plan compiled elsewhere; %s is a model, compiled for this device", t.path)
		}
		return nil
	}
	for _, f := range []string{"recompile", "dim", "plan-cache"} {
		if set[f] {
			return usagef("--%s goes with a model (a model.yaml, .gguf, .onnx or Hugging Face folder); %s is a plan", f, t.path)
		}
	}
	return nil
}

// plan returns the plan file to run: the target itself, or the model's plan from the plan cache
// (compiled there first when it is not, with compile's defaults: measured on a GPU within the
// default budget, static on a CPU device).
func (t *runTarget) plan() (string, error) {
	if !t.isModel() {
		return t.path, nil
	}
	ctx, stop := interruptible()
	defer stop()
	measure, why, err := vkc.MeasureByDefault(t.device)
	if err != nil {
		return "", err
	}
	pr := newProgressPrinter(t.stderr)
	opts := vkc.PlanCacheOptions{
		Compile: vkc.Options{Device: t.device, Tune: measure, Budget: vkc.DefaultBudget, ArgmaxOutput: true, TopK: vkc.DefaultTopK,
			Progress: pr.report},
		Dims:      t.dims,
		Dir:       t.cacheDir,
		Recompile: t.recompile,
		Compiling: func(planPath string) {
			fmt.Fprintf(t.stderr, "compile %s (%s); the plan goes to the plan cache: %s\n", t.path, why, planPath)
		},
	}
	t0 := time.Now()
	res, err := vkc.CachedPlan(ctx, t.path, opts)
	pr.done()
	if err != nil {
		return "", err
	}
	if res.Cached {
		fmt.Fprintf(t.stderr, "plan: %s (cached; --recompile compiles again)\n", res.Path)
	} else {
		fmt.Fprintf(t.stderr, "compiled in %v\n", time.Since(t0).Round(time.Millisecond))
	}
	return res.Path, nil
}

// maxPromptBytes bounds a prompt read from a file or standard input.
const maxPromptBytes = 64 << 20

// readPromptFile reads --prompt-file: a file, or standard input for "-". The read stops at the
// first SIGINT or SIGTERM (a pipe nobody writes to would otherwise hold the command), and the
// text must be UTF-8.
func readPromptFile(path string) (string, error) {
	var r io.Reader
	name := path
	if path == "-" {
		r, name = os.Stdin, "standard input"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("--prompt-file: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return "", fmt.Errorf("--prompt-file %s is a directory", path)
		}
		r = f
	}
	ctx, stop := interruptible()
	defer stop()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, maxPromptBytes+1))
		done <- result{b, err}
	}()
	select {
	case <-ctx.Done():
		return "", fmt.Errorf("interrupted while reading the prompt from %s", name)
	case res := <-done:
		if res.err != nil {
			return "", fmt.Errorf("--prompt-file: reading %s: %w", name, res.err)
		}
		if len(res.b) > maxPromptBytes {
			return "", fmt.Errorf("--prompt-file: %s holds more than %d bytes", name, maxPromptBytes)
		}
		if !utf8.Valid(res.b) {
			return "", fmt.Errorf("--prompt-file: %s is not UTF-8 text", name)
		}
		return string(res.b), nil
	}
}

// chatFlags are the generation flags of `vkc run --chat` without a prompt.
type chatFlags struct {
	system    string
	maxTokens int
	stops     []string
	sampling  engine.Sampling
}

// ChatSession is what the interactive chat of `vkc run PLAN|MODEL --chat` (no --prompt) gets:
// the model loaded on its device with its pipelines ready, and the generation options of the
// command line (Chat is set; System, Stop, MaxTokens and Sampling as given; Tokenizer when
// --tokenizer named one).
type ChatSession struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Model          *engine.Model
	Options        engine.GenerateOptions
	RandomSeed     bool // no --seed was given: Options.Sampling.Seed is a random one
}

// interactiveChat runs the multi-turn chat loop; nil until the file that implements it sets it
// in its init. It returns when the conversation ends (end of input) or ctx does.
var interactiveChat func(ctx context.Context, s *ChatSession) error

// chat is `vkc run TARGET --chat` without a prompt: an interactive conversation.
func (t *runTarget) chat(stdout, stderr io.Writer, set map[string]bool, lo engine.Options, tokPath string, f chatFlags) error {
	if interactiveChat == nil {
		return usagef("--chat without --prompt (an interactive chat) is not available in this build; give --prompt TEXT or --prompt-file FILE")
	}
	if set["steps"] || set["o"] || set["input"] {
		return usagef("--chat is a conversation; it takes no --steps, --input or -o")
	}
	if f.maxTokens < 0 {
		return usagef("--max-tokens %d: want 0 (no limit) or more", f.maxTokens)
	}
	if err := f.sampling.Check(); err != nil {
		return usagef("%v", err)
	}
	if !set["seed"] {
		f.sampling.Seed = rand.Uint64()
	}
	path, err := t.plan()
	if err != nil {
		return err
	}
	m, err := engine.Load(path, lo)
	if err != nil {
		return err
	}
	defer m.Close()
	o := engine.GenerateOptions{MaxTokens: f.maxTokens, Sampling: f.sampling, Stop: f.stops, Chat: true, System: f.system}
	if tokPath != "" {
		if o.Tokenizer, err = tokenizer.Load(tokPath); err != nil {
			return fmt.Errorf("--tokenizer: %w", err)
		}
	} else if _, err := m.Tokenizer(); err != nil {
		return fmt.Errorf("%w; give --tokenizer FILE", err)
	}
	ctx, stop := interruptible()
	defer stop()
	if lm, err := engine.CausalLM(m.Plan()); err == nil {
		if err := preparePipelines(ctx, stderr, m, engine.GenerationFunctions(lm, 0, 0)); err != nil {
			return err
		}
	}
	err = interactiveChat(ctx, &ChatSession{Stdin: os.Stdin, Stdout: stdout, Stderr: stderr, Model: m, Options: o, RandomSeed: !set["seed"]})
	if err != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted: %w", err)
	}
	return err
}
