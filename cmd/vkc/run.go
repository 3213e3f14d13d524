package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
	"github.com/vkc-project/vkc/tokenizer"
)

func init() {
	register(&command{
		name:    "run",
		usage:   "PLAN|MODEL [-f NAME] --input name=FILE... [-o out.safetensors|out.npy|DIR]  |  PLAN|MODEL --prompt TEXT|--prompt-file FILE [--chat] [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--stop STR]...  |  PLAN|MODEL --prompt-ids 1,2,3 --steps N   (MODEL: a model.yaml, .gguf, .onnx or Hugging Face folder, compiled once and kept in the plan cache)",
		short:   "run a function of a compiled plan (or of a model, compiled on first use) on inputs, generate text from a prompt (streamed as it is produced), or generate tokens greedily from token ids",
		example: "vkc run model.gguf --prompt 'Once upon a time' --max-tokens 64 --seed 1",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			fn := fs.String("f", "", "the function to run")
			var inputs multiFlag
			fs.Var(&inputs, "input", "NAME=VALUE: an input as a .npy file, FILE.safetensors[:TENSOR] (default tensor: NAME), an ONNX TensorProto FILE.pb, or numbers (\"3\", \"1,2,3\"); repeatable")
			out := fs.String("o", "", "write the outputs to a .safetensors file, a .npy file (one output) or a folder of .npy files (default: print a summary)")
			prompt := fs.String("prompt-ids", "", "comma-separated prompt token ids: greedy generation through the plan's prefill and decode functions")
			steps := fs.Int("steps", 16, "with --prompt-ids: tokens to generate")
			text := fs.String("prompt", "", "generate text after this prompt, through the plan's tokenizer (or --tokenizer), streaming it to standard output")
			promptFile := fs.String("prompt-file", "", "--prompt's text from this file (- : standard input)")
			recompile := fs.Bool("recompile", false, "with a MODEL: compile it even when the plan cache has its plan")
			planCache := fs.String("plan-cache", "", "with a MODEL: the plan cache folder (default: vkc/plans in the user cache directory; it keeps the 4 plans used last)")
			dims := dimFlags(fs)
			tokPath := fs.String("tokenizer", "", "with --prompt: the tokenizer (tokenizer.json, a folder holding one, or a .gguf vocabulary) instead of the plan's")
			chat := fs.Bool("chat", false, "with --prompt: wrap the prompt in the model's chat template (ChatML, Llama 3 or Llama 2 [INST])")
			system := fs.String("system", "", "with --chat: the system message (default: the template's, if any)")
			maxTokens := fs.Int("max-tokens", 256, "with --prompt: the most tokens to generate (0: until an end token or a full context)")
			temp := fs.Float64("temperature", 0.8, "with --prompt: sampling temperature; 0 is greedy (the device's argmax)")
			topK := fs.Int("top-k", 40, "with --prompt: sample among the K most likely tokens (ranked on the device when K is at most the plan's --top-k); 0: every token (the whole logits row is read back each step)")
			topP := fs.Float64("top-p", 0.95, "with --prompt: nucleus sampling: the smallest set of tokens whose probability reaches P (1: off)")
			minP := fs.Float64("min-p", 0.05, "with --prompt: drop tokens less likely than P times the most likely (0: off)")
			penalty := fs.Float64("repeat-penalty", 1, "with --prompt: divide the logits of tokens already in the sequence by R (1: off)")
			seed := fs.Uint64("seed", 0, "with --prompt: the sampling seed (default: a random one, printed on standard error); the same seed, plan and device give the same text")
			var stops multiFlag
			fs.Var(&stops, "stop", "with --prompt: stop when this text is generated (repeatable; the text before it is printed)")
			device := fs.String("device", "", "the device, by index or name substring (default: $VKC_DEVICE, else the best)")
			foreign := fs.Bool("allow-foreign", false, "run a plan compiled for another device")
			force := fs.Bool("force", false, "replace an -o file that is not a safetensors or .npy file")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one plan file or model, got %d arguments", len(args))
				}
				lo := engine.Options{Device: *device, AllowForeign: *foreign, LoadProgress: weightsProgress(fs.Output())}
				set := map[string]bool{}
				fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
				// A model (not a plan) is compiled, or found in the plan cache, once the
				// command line is known to be good.
				target := runTarget{path: args[0], device: *device, recompile: *recompile, cacheDir: *planCache, dims: dims, stderr: fs.Output()}
				if err := target.check(set); err != nil {
					return err
				}
				textOnly := []string{"tokenizer", "chat", "system", "max-tokens", "temperature", "top-k", "top-p", "min-p", "repeat-penalty", "seed", "stop"}
				if set["prompt"] && set["prompt-file"] {
					return usagef("--prompt and --prompt-file exclude each other")
				}
				if *penalty == 0 && set["repeat-penalty"] {
					// The API's zero value means no penalty; on the command line 1 says that.
					return usagef("--repeat-penalty 0: want a positive factor (1: off)")
				}
				if *chat && !set["prompt"] && !set["prompt-file"] && *prompt == "" && *fn == "" && len(inputs) == 0 {
					return target.chat(stdout, fs.Output(), set, lo, *tokPath, chatFlags{system: *system, maxTokens: *maxTokens, stops: stops,
						sampling: engine.Sampling{Temperature: *temp, TopK: *topK, TopP: *topP, MinP: *minP, RepeatPenalty: *penalty, Seed: *seed}})
				}
				if set["prompt"] || set["prompt-file"] {
					if *prompt != "" || *fn != "" || len(inputs) > 0 || *out != "" || set["steps"] {
						return usagef("--prompt generates text; it takes no --prompt-ids, --steps, -f, --input or -o")
					}
					if *system != "" && !*chat {
						return usagef("--system goes with --chat")
					}
					if *maxTokens < 0 {
						return usagef("--max-tokens %d: want 0 (no limit) or more", *maxTokens)
					}
					sp := engine.Sampling{Temperature: *temp, TopK: *topK, TopP: *topP, MinP: *minP, RepeatPenalty: *penalty, Seed: *seed}
					if err := sp.Check(); err != nil {
						return usagef("%v", err)
					}
					if !set["seed"] {
						sp.Seed = rand.Uint64()
					}
					if set["prompt-file"] {
						var err error
						if *text, err = readPromptFile(*promptFile); err != nil {
							return err
						}
					}
					if *text == "" {
						return usagef("the prompt is empty (--prompt or --prompt-file gives the text to continue)")
					}
					o := engine.GenerateOptions{MaxTokens: *maxTokens, Sampling: sp, Stop: stops, Chat: *chat, System: *system}
					path, err := target.plan()
					if err != nil {
						return err
					}
					return textCmd(stdout, fs.Output(), path, lo, *text, *tokPath, o, !set["seed"])
				}
				for _, f := range textOnly {
					if set[f] {
						return usagef("--%s goes with --prompt TEXT", f)
					}
				}
				if *prompt != "" {
					if *fn != "" || len(inputs) > 0 || *out != "" {
						return usagef("--prompt-ids generates through prefill and decode; it takes no -f, --input or -o")
					}
					ids, err := parseIDs(*prompt)
					if err != nil {
						return usagef("--prompt-ids: %v", err)
					}
					if *steps < 1 {
						return usagef("--steps %d: want at least 1", *steps)
					}
					path, err := target.plan()
					if err != nil {
						return err
					}
					return generateCmd(stdout, path, lo, ids, *steps)
				}
				path, err := target.plan()
				if err != nil {
					return err
				}
				return runCmd(stdout, path, lo, *fn, inputs, *out, *force)
			}
		},
	})
}

// parseIDs reads comma-separated token ids; an empty element ("1,,2", "1,2,") is an error, not a
// silently shorter prompt.
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for i, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("id %d of %s is empty", i+1, quote(s))
		}
		v, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("id %d: %s is not a token id (an integer of 32 bits)", i+1, quote(p))
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

func runCmd(w io.Writer, path string, lo engine.Options, fn string, inputs []string, out string, force bool) error {
	// The plan is read (and the input names checked) before a device is opened, so a wrong
	// call fails fast with the plan's signature in the message.
	p, err := plan.ReadFile(path)
	if err != nil {
		return err
	}
	if fn == "" {
		if len(p.Functions) != 1 {
			names := make([]string, len(p.Functions))
			for i, f := range p.Functions {
				names[i] = f.Name
			}
			return usagef("-f NAME (the function to run; the plan has %s), --prompt TEXT or --prompt-ids is required", strings.Join(names, ", "))
		}
		fn = p.Functions[0].Name
	}
	f, err := engine.FindFunction(p, fn)
	if err != nil {
		return usagef("%v", err)
	}
	in, err := readPlanInputs(f, inputs, nil)
	if err != nil {
		return err
	}
	l, err := engine.Load(path, lo)
	if err != nil {
		return err
	}
	defer l.Close()
	ctx, stop := interruptible()
	defer stop()
	if err := preparePipelines(ctx, w, l, []runtime.FunctionLength{{Name: fn}}); err != nil {
		return err
	}
	t0 := time.Now()
	res, err := l.Run(ctx, fn, in)
	if err != nil {
		return err
	}
	wall := time.Since(t0)
	outs, err := vkc.Outputs(f, res)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s on %s: %v wall\n", fn, l.Device.Info.Name, wall.Round(time.Microsecond))
	if out != "" {
		files := append([]string{path, p.ResolveSource(path)}, inputFiles(inputs)...)
		o := &outputs{ctx: ctx, inputs: files, force: force}
		defer o.abort()
		if err := o.tensors(out, f.Name, outs); err != nil {
			return err
		}
		if err := o.commit(); err != nil {
			return err
		}
		fmt.Fprintf(w, "wrote %s\n", out)
		return nil
	}
	for _, o := range f.Outputs {
		fmt.Fprintf(w, "%s = %s\n", o.Name, describe(outs[o.Name]))
	}
	return nil
}

// readPlanInputs reads NAME=VALUE arguments for the plan function f, in f's layout. An input not
// given is an error, or when fill is set, fill's bytes.
func readPlanInputs(f *plan.Function, args []string, fill func(v *plan.Value) ([]byte, error)) (map[string][]byte, error) {
	in := map[string][]byte{}
	for _, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if !ok {
			return nil, usagef("--input %q: want NAME=VALUE", a)
		}
		var v *plan.Value
		for i := range f.Inputs {
			if f.Inputs[i].Name == name {
				v = &f.Inputs[i]
			}
		}
		if v == nil {
			return nil, usagef("function %s has no input %q (its inputs: %s)", f.Name, name, planSignature(f.Inputs))
		}
		if _, dup := in[name]; dup {
			return nil, usagef("input %s given twice", name)
		}
		want, err := vkc.ValueType(v)
		if err != nil {
			return nil, err
		}
		x, err := readInputRows(name, val, want, v.Bounded)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", name, err)
		}
		b, err := vkc.TensorBytes(v, x)
		if err != nil {
			return nil, err
		}
		in[name] = b
	}
	for i := range f.Inputs {
		v := &f.Inputs[i]
		if in[v.Name] != nil {
			continue
		}
		if fill == nil {
			return nil, usagef("missing --input %s (function %s takes %s)", v.Name, f.Name, planSignature(f.Inputs))
		}
		b, err := fill(v)
		if err != nil {
			return nil, err
		}
		in[v.Name] = b
	}
	return in, nil
}

func planSignature(vs []plan.Value) string {
	l := make([]string, len(vs))
	for i, v := range vs {
		l[i] = fmt.Sprintf("%s %s%v", v.Name, v.DType, v.Shape)
	}
	return strings.Join(l, ", ")
}

func generateCmd(w io.Writer, path string, lo engine.Options, prompt []int32, steps int) error {
	t0 := time.Now()
	l, err := engine.Load(path, lo)
	if err != nil {
		return err
	}
	defer l.Close()
	load := time.Since(t0)
	ctx, stop := interruptible()
	defer stop()
	fmt.Fprintf(w, "device: %s (plan loaded in %v)\n", l.Device.Info.Name, load.Round(time.Millisecond))
	if lm, err := engine.CausalLM(l.Plan()); err == nil {
		if err := preparePipelines(ctx, w, l, engine.GenerationFunctions(lm, len(prompt), steps)); err != nil {
			return err
		}
	}
	g, err := l.GenerateIDs(ctx, prompt, engine.GenerateOptions{MaxTokens: steps}, nil)
	if err != nil {
		return err
	}
	var via string
	switch {
	case g.Prefilled == len(prompt) && g.Chunks > 1:
		via = fmt.Sprintf("%s in %d runs (chunks of its capacity)", g.PrefillFn, g.Chunks)
	case g.Prefilled == len(prompt):
		via = g.PrefillFn
	case g.Prefilled > 0:
		via = fmt.Sprintf("%s (%d) and %s (%d, one at a time)", g.PrefillFn, g.Prefilled, g.DecodeFn, len(prompt)-g.Prefilled)
	default:
		via = g.DecodeFn + " one token at a time"
	}
	fmt.Fprintf(w, "prompt: %s through %s in %v\n", count(len(prompt), "token"), via, g.Prompt.Round(time.Microsecond))
	ids := make([]string, len(g.Tokens))
	for i, t := range g.Tokens {
		ids[i] = strconv.Itoa(int(t))
	}
	fmt.Fprintf(w, "greedy tokens: %s\n", strings.Join(ids, " "))
	if len(g.Tokens) < steps {
		why := g.Stopped
		if g.Stopped == engine.StopContext {
			why = fmt.Sprintf("the KV cache is full (%d positions)", engine.ContextLength(l.Plan()))
		}
		fmt.Fprintf(w, "stopped after %d of --steps %d tokens: %s\n", len(g.Tokens), steps, why)
	}
	where := "on the device"
	if g.HostArgmax {
		where = "on the host (the plan outputs logits only)"
	}
	if len(g.Steps) > 0 {
		lo, hi := g.Steps[0], g.Steps[0]
		for _, s := range g.Steps {
			lo, hi = min(lo, s), max(hi, s)
		}
		fmt.Fprintf(w, "decode: %v per token (median of %d steps, min %v, max %v; wall time, argmax %s)\n",
			g.PerToken().Round(time.Microsecond), len(g.Steps), lo.Round(time.Microsecond), hi.Round(time.Microsecond), where)
	}
	return nil
}

// textCmd generates text after a prompt, printing it to w as it is produced and a summary to
// info (standard error): tokens, speed, why it stopped, and what ran where.
func textCmd(w, info io.Writer, path string, lo engine.Options, prompt, tokPath string, opts engine.GenerateOptions, randomSeed bool) error {
	t0 := time.Now()
	m, err := engine.Load(path, lo)
	if err != nil {
		return err
	}
	defer m.Close()
	load := time.Since(t0)
	if tokPath != "" {
		if opts.Tokenizer, err = tokenizer.Load(tokPath); err != nil {
			return fmt.Errorf("--tokenizer: %w", err)
		}
	} else if _, err := m.Tokenizer(); err != nil {
		return fmt.Errorf("%w; give --tokenizer FILE", err)
	}
	ctx, stop := interruptible()
	defer stop()
	fmt.Fprintf(info, "device: %s (plan loaded in %v)\n", m.Device.Info.Name, load.Round(time.Millisecond))
	if lm, err := engine.CausalLM(m.Plan()); err == nil {
		n, err := m.PromptTokens(prompt, opts)
		if err != nil {
			return err
		}
		if err := preparePipelines(ctx, info, m, engine.GenerationFunctions(lm, n, opts.MaxTokens)); err != nil {
			return err
		}
	}
	g, err := m.Generate(ctx, prompt, opts, func(s string) error {
		_, err := io.WriteString(w, s)
		return err
	})
	if g != nil && !strings.HasSuffix(g.Text, "\n") {
		fmt.Fprintln(w)
	}
	if err != nil {
		if errors.Is(err, ctx.Err()) && ctx.Err() != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		return err
	}
	sp := opts.Sampling
	fmt.Fprintf(info, "prompt: %s in %v; generated %s, stopped: %s", count(g.PromptTokens, "token"), g.Prompt.Round(time.Microsecond), count(len(g.Tokens), "token"), g.Stopped)
	if len(g.Steps) > 0 {
		fmt.Fprintf(info, "; %v per token (median of %d steps)", g.PerToken().Round(time.Microsecond), len(g.Steps))
	}
	fmt.Fprintln(info)
	switch {
	case sp.Greedy() && g.RowSteps == 0 && g.Candidates == 0:
		fmt.Fprintf(info, "greedy: argmax on the device (one token read back per step)\n")
	case sp.Greedy():
		fmt.Fprintf(info, "greedy with a repeat penalty: chosen on the host from %d device-ranked candidates (%d steps read the whole logits row)\n", g.Candidates, g.RowSteps)
	default:
		where := fmt.Sprintf("top-%d ranked on the device, %d candidates read back per step", sp.TopK, g.Candidates)
		if g.Candidates == 0 {
			where = "the whole logits row read back every step (top-k 0, beyond the plan's candidates, or a plan without them)"
		} else if g.RowSteps > 0 {
			where += fmt.Sprintf(" (%d steps read the whole row: the penalty reached past them)", g.RowSteps)
		}
		seed := fmt.Sprint(sp.Seed)
		if randomSeed {
			seed += " (random; --seed " + seed + " repeats this run)"
		}
		fmt.Fprintf(info, "sampling: %s; temperature %v, top-p %v, min-p %v, repeat penalty %v, the draw on the host with seed %s\n",
			where, sp.Temperature, sp.TopP, sp.MinP, sp.RepeatPenalty, seed)
	}
	return nil
}

// count writes n and the noun, plural unless n is 1: "1 token", "8 tokens".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
