package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/safefile"
	"github.com/vkc-project/vkc/plan"
)

func init() {
	register(&command{
		name:    "compile",
		usage:   "model.yaml|model.gguf|model.onnx|HF-DIR [--dim NAME=VALUE] -o plan.bin [--device D] [-f fn,...] [--weights inline|external] [--tune|--no-tune] [--budget D] [--tune-db F] [--int8 off|auto|on] [--dot chosen.dot] [--dump-kernels DIR] [--tokenizer FILE|none [--tokenizer-ref]] [--top-k K] [--parallel N]",
		short:   "compile a model into a plan for one Vulkan device (written atomically: never a partial file)",
		example: "vkc compile examples/tinyllama/model.yaml -o tinyllama.plan",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			dims := dimFlags(fs)
			prec := precisionFlags(fs)
			out := fs.String("o", "", "the plan file to write (required)")
			device := fs.String("device", "", "the device to compile for, by index or name substring (default: $VKC_DEVICE, else the best)")
			fns := fs.String("f", "", "comma-separated functions to compile (default: all)")
			weights := fs.String("weights", "inline", "inline: weights in the plan; external: the plan references the model's safetensors file")
			tok := fs.String("tokenizer", "", "record this tokenizer in the plan: a tokenizer.json (with the tokenizer_config.json beside it), a folder holding one, or a .gguf file's vocabulary; none: no tokenizer (default: the model's own, from its model.yaml tokenizer key, GGUF vocabulary or checkpoint folder)")
			tokRef := fs.Bool("tokenizer-ref", false, "record the tokenizer file by path and SHA-256 instead of its bytes")
			dotFile := fs.String("dot", "", "also write the chosen kernels of every function as a Graphviz DOT graph to this file")
			dump := fs.String("dump-kernels", "", "also write every SPIR-V module (and its disassembly when spirv-dis is installed) to this folder")
			tuneFlag := fs.Bool("tune", false, "measure: tune kernels on the device, extract under measured costs, time whole-program candidates and keep the fastest valid one (the default on a GPU)")
			noTune := fs.Bool("no-tune", false, "the static path: roofline estimates and default configurations, no measurement (the default on a CPU device such as lavapipe)")
			budget := fs.Duration("budget", vkc.DefaultBudget, "when measuring: bound all tuning and measuring (0: no limit); what was measured by then decides, and a warm compile takes a fraction of it")
			tuneDB := fs.String("tune-db", "", "when measuring: the tuning database (default: in the user cache directory)")
			cands := fs.Int("candidates", 4, "when measuring: diverse extractions measured per function")
			noOpt := fs.Bool("no-optimize", false, "lower the functions as written (no e-graph rewriting)")
			variants := fs.String("length-variants", "", "capacities a function with a run-time length is also compiled for, comma-separated (default 1,8,64; none: the maximum only); a run uses the smallest that holds its length")
			length := fs.Int("length", 0, "compile the functions with a run-time length (dims: {seq: 1..N}) at this fixed length instead: the baseline a run-time-length plan is measured against")
			int8 := fs.String("int8", "off", "8-bit activations for products with block-quantized weights, by integer dot products where the device has them (as llama.cpp's q8_1): off (exact f32 arithmetic), auto (with --tune: measured against the float kernels), on (wherever they apply); they move logits by about 3e-2 to 5e-2 row-relative")
			argmax := fs.Bool("argmax", true, "add next_token = argmax(logits) to language-model functions (greedy generation then runs the argmax on the device)")
			topK := fs.Int("top-k", vkc.DefaultTopK, "add top_ids and top_logits, the K largest logits of each row ranked on the device, to language-model functions (sampling then reads back K candidates per step; 0: none)")
			parallel := fs.Int("parallel", 0, "a GGUF file or Hugging Face folder: KV caches for N sequences and a batched step function, for vkc serve's continuous batching (docs/serving.md)")
			quiet := fs.Bool("q", false, "no progress or report on standard error")
			force := fs.Bool("force", false, "replace -o, --dot and --tune-db files that are not a plan, a DOT graph or a tuning database")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one model.yaml, got %d arguments", len(args))
				}
				if *out == "" {
					return usagef("-o plan.bin is required")
				}
				wm, err := vkc.ParseWeightsMode(*weights)
				if err != nil {
					return usagef("%v", err)
				}
				if *tuneFlag && *noTune {
					return usagef("--tune and --no-tune exclude each other")
				}
				set := map[string]bool{}
				fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
				if *noTune && (set["budget"] || set["tune-db"] || set["candidates"]) {
					return usagef("--budget, --tune-db and --candidates go with measuring, not --no-tune")
				}
				if *budget < 0 {
					return usagef("--budget %v: want a positive duration (or 0: no limit)", *budget)
				}
				// Measured by default on a GPU, static on a CPU device; asking for a budget or a
				// database asks for measurement.
				measure, why := *tuneFlag || set["budget"] || set["tune-db"] || set["candidates"], ""
				if !measure && !*noTune {
					if measure, why, err = vkc.MeasureByDefault(*device); err != nil {
						return err
					}
				}
				opts := vkc.Options{Device: *device, Weights: wm, Tune: measure, Budget: *budget,
					TuneDB: *tuneDB, ForceTuneDB: *force, Candidates: *cands, NoOptimize: *noOpt, ArgmaxOutput: *argmax, TopK: *topK, Length: *length}
				if *topK < 0 {
					return usagef("--top-k %d: want the candidates to rank (0: none)", *topK)
				}
				if *length < 0 {
					return usagef("--length %d: want a positive length", *length)
				}
				switch *variants {
				case "":
				case "none":
					opts.NoLengthVariants = true
				default:
					for _, s := range strings.Split(*variants, ",") {
						c, err := strconv.Atoi(strings.TrimSpace(s))
						if err != nil || c < 1 {
							return usagef("--length-variants %q: want positive capacities like 1,8,64, or none", *variants)
						}
						opts.LengthVariants = append(opts.LengthVariants, c)
					}
				}
				if opts.Int8, err = vkc.ParseInt8Mode(*int8); err != nil {
					return usagef("--%v", err)
				}
				if os.Getenv("VKC_TUNE_TRACE") != "" {
					opts.TuneTrace = tuneTrace()
				}
				if *fns != "" {
					opts.Functions = strings.Split(*fns, ",")
				}
				if *tokRef && *tok == vkc.NoTokenizer {
					return usagef("--tokenizer-ref records a tokenizer; --tokenizer none records none")
				}
				opts.Tokenizer, opts.TokenizerRef = *tok, *tokRef
				stderr := fs.Output()
				if *quiet {
					stderr = io.Discard
				}
				if why != "" {
					fmt.Fprintf(stderr, "%s\n", why)
				}
				if *parallel < 0 {
					return usagef("--parallel %d: want the sequences the plan serves at once", *parallel)
				}
				return compileCmd(args[0], *out, *dotFile, *dump, *force, opts, stderr, dims, *parallel, *prec)
			}
		},
	})
}

// compileCmd compiles the model and writes the plan and the --dot graph all or none: both are
// prepared as temporary files and renamed into place only when both are complete (and the
// kernels dumped), and nothing is written after an interrupt (SIGINT or SIGTERM).
func compileCmd(model, out, dotFile, dump string, force bool, opts vkc.Options, stderr io.Writer, dims dimFlag, slots int, prec importer.Precision) error {
	ctx, stop := interruptible()
	defer stop()
	fmt.Fprintf(stderr, "parse %s\n", model)
	m, err := loadModelSlots(model, false, dims, slots, prec)
	if err != nil {
		return err
	}
	// The outputs may not replace what the compile reads; check before the work, not after.
	inputs := []string{model, opts.TuneDB}
	if f, err := vkc.ModelWeightsFile(m); err == nil {
		inputs = append(inputs, f)
	}
	for _, o := range []struct {
		path string
		opts safefile.Options
	}{
		{out, (&plan.Plan{}).FileOptions(plan.WriteOptions{Inputs: inputs, Force: force})},
		{dotFile, safefile.Options{What: "DOT graph", Inputs: append(inputs, out), Force: force, Check: checkDOTFile}},
	} {
		if o.path != "" {
			if err := safefile.Check(o.path, o.opts); err != nil {
				return err
			}
		}
	}
	if dotFile != "" && sameFile(dotFile, out) {
		return usagef("--dot %s is the plan file -o %s", dotFile, out)
	}
	pr := newProgressPrinter(stderr)
	opts.Progress = pr.report
	p, rep, err := vkc.Compile(ctx, m, opts)
	pr.done()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w; nothing written", err)
	}
	srcs := []*plan.Source{p.Weights.Source}
	if p.Tokenizer != nil {
		srcs = append(srcs, p.Tokenizer.Ref)
	}
	for _, src := range srcs {
		if src == nil {
			continue
		}
		// Record the weight (or tokenizer) file relative to the plan's folder, so that the two
		// can be moved together (plan.ResolveSource and tokenizer.FromPlan resolve it against
		// the plan file's folder).
		if dir, err := filepath.Abs(filepath.Dir(out)); err == nil {
			if rel, err := filepath.Rel(dir, src.Path); err == nil {
				src.Path = rel
			}
		}
	}
	w := &outputs{ctx: ctx, inputs: inputs, force: force}
	defer w.abort()
	w.progress = func(n, weights uint64) {
		pr.report(vkc.Progress{Phase: "write", What: fmt.Sprintf("%s written (%s of weights)", byteSize(n), byteSize(weights))})
	}
	err = w.plan(out, p)
	pr.done()
	if err != nil {
		return err
	}
	if dotFile != "" {
		if err := w.dot(dotFile, planDOT(p)); err != nil {
			return err
		}
	}
	dumped := 0
	if dump != "" {
		if dumped, err = dumpKernels(p, dump); err != nil {
			return fmt.Errorf("--dump-kernels: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w; nothing written", err)
	}
	if err := w.commit(); err != nil {
		return err
	}
	rep.WriteTo(stderr)
	if st, _ := os.Stat(out); st != nil {
		fmt.Fprintf(stderr, "wrote %s (%s)\n", out, byteSize(uint64(st.Size())))
	}
	if dump != "" {
		fmt.Fprintf(stderr, "wrote %d kernels to %s\n", dumped, dump)
	}
	return nil
}

// sameFile reports whether a and b name one existing file, or are the same path.
func sameFile(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// progressPrinter shows Compile's progress: one line per phase, and on a terminal a counter
// that rewrites itself during lowering.
type progressPrinter struct {
	w     io.Writer
	tty   bool
	phase string
	open  bool // a \r line is showing
}

func newProgressPrinter(w io.Writer) *progressPrinter {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progressPrinter{w: w, tty: tty}
}

func (pp *progressPrinter) report(p vkc.Progress) {
	if p.Phase != pp.phase {
		pp.done()
		pp.phase = p.Phase
		fmt.Fprintf(pp.w, "%s\n", p.Phase)
	}
	if pp.tty && (p.Total > 0 || p.What != "") {
		what := p.What
		if len(what) > 60 {
			what = what[:60] + "…"
		}
		count := fmt.Sprintf("%d/%d ", p.Done, p.Total)
		switch {
		case p.Phase == "write": // the plan's bytes, in What
			count = ""
		case p.Total == 0: // tuning: kernels done so far, total unknown
			count = fmt.Sprintf("%d kernels ", p.Done)
		}
		fmt.Fprintf(pp.w, "\r  %s%-62s", count, what)
		pp.open = true
	}
}

func (pp *progressPrinter) done() {
	if pp.open {
		fmt.Fprintln(pp.w)
		pp.open = false
	}
}

// planDOT draws every function of the plan as a cluster of its dispatches (the kernels the
// compiler chose, with the ops each fuses), with an edge from the dispatch that last wrote a byte
// range to each later dispatch that reads it.
func planDOT(p *plan.Plan) string {
	var b strings.Builder
	b.WriteString("digraph plan {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n")
	for fi, f := range p.Functions {
		fmt.Fprintf(&b, "  subgraph cluster_%d {\n    label=%q;\n", fi, f.Name)
		type write struct {
			d         int
			region    plan.Region
			off, size uint64
		}
		var writes []write
		for di, d := range f.Dispatches {
			label := strings.Join(d.Ops, "+")
			if label == "" {
				label = "?"
			}
			if d.Label != "" {
				label += "\n" + d.Label
			}
			if int(d.Module) < len(p.Modules) {
				label += "\n" + p.Modules[d.Module].Key
			}
			fmt.Fprintf(&b, "    f%d_d%d [label=%q];\n", fi, di, fmt.Sprintf("#%d %s", di, label))
			mod := (*plan.Module)(nil)
			if int(d.Module) < len(p.Modules) {
				mod = &p.Modules[d.Module]
			}
			access := func(binding uint32) plan.Access {
				if mod != nil {
					for _, bd := range mod.Bindings {
						if bd.Binding == binding {
							return bd.Access
						}
					}
				}
				return plan.ReadWrite
			}
			from := map[int]bool{}
			for _, bnd := range d.Bindings {
				if access(bnd.Binding)&plan.Read == 0 {
					continue
				}
				r := bnd.Buffer
				for i := len(writes) - 1; i >= 0; i-- {
					w := writes[i]
					if w.region == r.Region && w.off < r.Offset+r.Range && r.Offset < w.off+w.size {
						from[w.d] = true
						break
					}
				}
			}
			for src := 0; src < di; src++ {
				if from[src] {
					fmt.Fprintf(&b, "    f%d_d%d -> f%d_d%d;\n", fi, src, fi, di)
				}
			}
			for _, bnd := range d.Bindings {
				if access(bnd.Binding)&plan.Write != 0 {
					writes = append(writes, write{di, bnd.Buffer.Region, bnd.Buffer.Offset, bnd.Buffer.Range})
				}
			}
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.,=-]+`)

// dumpKernels writes each module as DIR/NNN-key.spv with a .txt describing its interface, and a
// .spvasm disassembly when spirv-dis is on the PATH. It returns the number of modules.
func dumpKernels(p *plan.Plan, dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	dis, _ := exec.LookPath("spirv-dis")
	for i, m := range p.Modules {
		name := unsafeName.ReplaceAllString(m.Key, "_")
		if len(name) > 80 {
			name = name[:80]
		}
		base := filepath.Join(dir, fmt.Sprintf("%03d-%s", i, name))
		words := make([]byte, 4*len(m.SPIRV))
		for j, w := range m.SPIRV {
			words[4*j], words[4*j+1], words[4*j+2], words[4*j+3] = byte(w), byte(w>>8), byte(w>>16), byte(w>>24)
		}
		if err := os.WriteFile(base+".spv", words, 0o644); err != nil {
			return i, err
		}
		var d strings.Builder
		fmt.Fprintf(&d, "key %s\nentry %s\nworkgroup %v\nconfig %v\npush constants %d bytes\n", m.Key, m.Entry, m.Workgroup, m.Config, m.PushConstantSize)
		for _, bd := range m.Bindings {
			fmt.Fprintf(&d, "binding %d %s\n", bd.Binding, bd.Access)
		}
		for _, sc := range m.SpecConstants {
			fmt.Fprintf(&d, "spec constant %d = %d\n", sc.ID, sc.Value)
		}
		if err := os.WriteFile(base+".txt", []byte(d.String()), 0o644); err != nil {
			return i, err
		}
		if dis != "" {
			asm, err := exec.Command(dis, base+".spv").Output()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				return i, err
			}
			if err == nil {
				if err := os.WriteFile(base+".spvasm", asm, 0o644); err != nil {
					return i, err
				}
			}
		}
	}
	return len(p.Modules), nil
}
