package vkc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	rdebug "runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
	"github.com/vkc-project/vkc/tokenizer"
)

// Version is the compiler's version; plans record it (with the VCS revision when the binary has
// one) in plan.Plan.CompilerVersion.
const Version = "0.1.0-dev"

// NoTokenizer as Options.Tokenizer compiles a plan without a tokenizer, even when the model
// names one.
const NoTokenizer = "none"

// WeightsMode says where a compiled plan keeps the model's weights.
type WeightsMode int

const (
	// WeightsInline copies the weights into the plan: one self-contained file.
	WeightsInline WeightsMode = iota
	// WeightsExternal makes the plan reference the model's safetensors file by path, size and
	// SHA-256 (the file must be a safetensors file whose tensors the plan can use verbatim).
	WeightsExternal
)

// ParseWeightsMode parses "inline" or "external".
func ParseWeightsMode(s string) (WeightsMode, error) {
	switch s {
	case "inline", "":
		return WeightsInline, nil
	case "external":
		return WeightsExternal, nil
	}
	return 0, fmt.Errorf("weights %q: want inline or external", s)
}

func (w WeightsMode) String() string {
	if w == WeightsExternal {
		return "external"
	}
	return "inline"
}

// Target is a device described without opening it: the capabilities kernels are built for and
// the fingerprint the plan records. It makes a compile device-free (tests, cross-compiling for a
// machine one has the `vkc devices` output of).
type Target struct {
	Caps   kernels.Caps
	Device plan.Fingerprint
}

// LavapipeTarget is Mesa's lavapipe as Debian 12 ships it (the fingerprint `vkc devices` prints
// there), for device-free compiles in tests.
var LavapipeTarget = Target{
	Caps: kernels.Lavapipe,
	Device: plan.Fingerprint{VendorID: 0x10005, DeviceID: 0, DriverVersion: 1,
		PipelineCacheUUID: [16]byte{'v', 'a', 'l', '-', '%', 's'},
		DeviceName:        "llvmpipe (device-free target)"},
}

// Progress is one progress report of Compile.
type Progress struct {
	Phase       string // "parse", "optimize", "lower", ...
	Done, Total int    // units of work done in the phase so far, of Total (0: unknown)
	What        string // the unit just finished, e.g. a kernel's label
}

// Options configure Compile. The zero value compiles every function for the best device with
// inline weights.
type Options struct {
	// Device selects the device by index or name substring, as runtime.Options.Device ("" is
	// $VKC_DEVICE, else the best device). Ignored when Target is set.
	Device string
	// Target, when set, compiles for a described device without touching Vulkan.
	Target *Target
	// Functions names the functions to compile, in the order given; empty: all, in model order.
	Functions []string
	// Weights says where the plan keeps the weights.
	Weights WeightsMode
	// WeightsFile is the safetensors file an external-weights plan references; "" is the file the
	// model.yaml's `weights: {file: ...}` names. The plan records its absolute path.
	WeightsFile string
	// NoOptimize lowers the functions as written, without e-graph saturation and extraction
	// (static path only).
	NoOptimize bool
	// Tune measures instead of estimating (DESIGN.md, "Choosing the graph after tuning, not
	// before"): kernels are tuned on the device, the e-graph is extracted under measured costs,
	// and Candidates whole-program candidates per function are run, checked against the
	// interpreter and timed; the fastest valid one is lowered into the plan. It needs a device
	// (not Target). The zero value keeps the static path (roofline estimates, default
	// configurations) while measured tuning is new.
	Tune bool
	// Budget bounds all tuning and measuring of a Tune compile (0: no bound). When it is spent,
	// what was measured decides and the rest keeps the static choice.
	Budget time.Duration
	// TuneDB is the tuning database file ("" is the user cache directory's); completed searches
	// are reused by later compiles for the same device, driver and compiler.
	TuneDB string
	// ForceTuneDB lets a Tune compile replace a TuneDB file that is not a tuning database
	// (otherwise refused before tuning starts).
	ForceTuneDB bool
	// TuneTrace, when set, receives a line for every configuration the tuner is about to run
	// and one for its outcome, so a configuration that crashes a driver is named by the last
	// line written (vkc sets it from VKC_TUNE_TRACE).
	TuneTrace io.Writer
	// Candidates is the number of diverse extractions measured per function (0: 4).
	Candidates int
	// LengthVariants are the smaller capacities for which every function with a run-time length
	// is compiled too (plan.Function.Variants; a run at length n uses the smallest variant that
	// holds n): nil is DefaultLengthVariants (for a batched step of several sequences, its slot
	// count and 64: batchSlots); capacities outside a function's bounds, or not
	// below its maximum, are skipped. NoLengthVariants compiles the capacity alone.
	LengthVariants   []int
	NoLengthVariants bool
	// Length, when positive, compiles every function that has a run-time length (ir.Length) at
	// that fixed length instead (the function written with the dimension equal to Length, static
	// shapes): a plan compiled for exactly n, the baseline a run-time-length plan is measured
	// against. A length outside a function's bounds is an error.
	Length int
	// ArgmaxOutput adds an output next_token = argmax(logits, axis=-1) (i32[seq]) to every
	// causal-language-model function (tokens and position in, [seq, vocab] logits out), so greedy
	// generation takes the argmax on the device and reads back one token per step (Generate uses
	// it). vkc compile sets it unless --argmax=false.
	ArgmaxOutput bool
	// TopK, when positive, adds the outputs top_ids = argtopk(logits, k=TopK) (i32[seq, TopK];
	// TopK capped at the vocabulary) and top_logits, the logits they index, to the same
	// functions: sampling then ranks on the device and reads back TopK candidates per step
	// (engine.Sampling says when that is exact). vkc compile sets DefaultTopK unless --top-k 0.
	TopK int
	// Int8 lets matrix-vector products on block-quantized weights quantize their activations to
	// 8 bits per block of 32 (llama.cpp's q8_1) and multiply them in integer dot products, where
	// the device has them (kernels.Int8Mode: off, the default, keeps every product exact; auto
	// offers both kernels, a Tune compile measuring them; on takes the integer one wherever it
	// applies). Results then differ from exact arithmetic by about 3e-2 to 5e-2 row-relative,
	// as llama.cpp's do; a Tune compile checks candidates at tune.Int8FunctionTolerance.
	Int8 kernels.Int8Mode
	// Progress, when set, receives progress reports (from the calling goroutine).
	Progress func(Progress)
	// Tokenizer, when set, is a tokenizer the plan records (a tokenizer.json, a folder holding
	// one, or a GGUF file; see tokenizer.Record): inline, or with TokenizerRef by reference to
	// the file with its SHA-256. It is read and checked before anything is compiled. When it is
	// "", the model's own tokenizer (ir.Model.Tokenizer) is recorded; NoTokenizer records none.
	Tokenizer    string
	TokenizerRef bool

	// Tests replace the device clocks: timing times kernel configurations, planTimer whole
	// candidates, and tuneConfigs caps each template's search.
	timing      tune.TimingSource
	planTimer   tune.PlanTimer
	tuneConfigs int
	// start is when the compile began: Budget counts from it.
	start time.Time
}

// Phase is one stage of a compile and its wall time.
type Phase struct {
	Name string
	Time time.Duration
	Note string // what it did or why it was skipped
}

// Report says what Compile did.
type Report struct {
	Model     string
	Device    plan.Fingerprint
	DeviceFor string   // how the device was chosen: "device 0 (llvmpipe ...)", "target"
	Functions []string // compiled, in plan order
	Phases    []Phase
	// Optimized reports whether e-graph saturation and extraction ran; Tuned whether kernels
	// were chosen by measurement.
	Optimized, Tuned bool
	Lower            *lower.Report
	// Selections describe the measured selection of each function (Tune only).
	Selections []string
	Notes      []string
	Total      time.Duration

	selections []*tune.Selection
}

// WriteTo prints the report for people (what `vkc compile` prints on stderr).
func (r *Report) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "compiled %s for %s (%s): %s in %v\n", r.Model, r.Device.DeviceName, r.DeviceFor,
		strings.Join(r.Functions, ", "), r.Total.Round(time.Millisecond))
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "  %-9s %9v  %s\n", p.Name, p.Time.Round(10*time.Microsecond), p.Note)
	}
	if l := r.Lower; l != nil {
		fmt.Fprintf(&b, "  weights %s, state %s, arena %s, %d modules, %d constant subgraphs folded\n",
			size(l.Weights), size(l.State), size(l.Arena), l.Modules, l.Folded)
		for _, f := range l.Functions {
			fmt.Fprintf(&b, "  %-8s %4d dispatches, %4d barriers, arena %s of %s intermediates, estimated %v\n",
				f.Name, f.Dispatches, f.Barriers, size(f.ArenaBytes), size(f.Intermediates), f.Estimated)
		}
	}
	for _, s := range r.Selections {
		b.WriteString(s)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

func size(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// CompilerVersion is what plans record as their compiler: "vkc 0.1.0-dev", plus the VCS
// revision when the binary was built from a repository ("vkc 0.1.0-dev (abc1234+dirty)").
func CompilerVersion() string {
	v := "vkc " + Version
	if bi, ok := rdebug.ReadBuildInfo(); ok {
		var rev string
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if len(rev) > 7 {
			rev = rev[:7]
		}
		if rev != "" {
			if dirty {
				rev += "+dirty"
			}
			v += " (" + rev + ")"
		}
	}
	return v
}

// Compile compiles the model's functions into a plan for one device:
//
//  1. select the functions (Options.Functions, default all);
//  2. optimise them: e-graph saturation with the rule files and extraction (rules.Optimize),
//     unless Options.NoOptimize; if the optimised graph needs a kernel template that does not
//     exist yet, the functions are lowered as written and Report.Notes says why;
//  3. find the device: its capabilities and fingerprint (runtime.Devices, no device is created),
//     or Options.Target;
//  4. lower them (lower.Lower): kernel templates by the static choice, memory plan, dispatch
//     order and barriers.
//
// With Options.Tune, steps 2 and 4 are measured on the device instead. Both are one pipeline
// (pipeline.go) with different cost sources (cost.go).
//
// It writes nothing; the caller writes the plan with plan.WriteFile (atomic). m must have its
// weights loaded (ir.ParseModel does).
//
//	m, _ := ir.ParseModel("examples/tinyllama/model.yaml")
//	p, rep, err := vkc.Compile(ctx, m, vkc.Options{})
//	if err == nil { err = p.WriteFile("tinyllama.plan") }
func Compile(ctx context.Context, m *ir.Model, opts Options) (*plan.Plan, *Report, error) {
	start := time.Now()
	rep := &Report{Model: m.Name}
	progress := func(p Progress) {
		if opts.Progress != nil {
			opts.Progress(p)
		}
	}
	phase := func(name string, t0 time.Time, note string) {
		rep.Phases = append(rep.Phases, Phase{Name: name, Time: time.Since(t0), Note: note})
	}

	var tok *plan.Tokenizer
	switch {
	case opts.Tokenizer == NoTokenizer:
	case opts.Tokenizer == "" && m.Tokenizer == "" && opts.TokenizerRef:
		return nil, nil, fmt.Errorf("compile %s: a tokenizer reference was asked for, but the model names no tokenizer and none was given", m.Name)
	case opts.Tokenizer != "":
		t0 := time.Now()
		var err error
		if tok, err = tokenizer.Record(opts.Tokenizer, opts.TokenizerRef); err != nil {
			return nil, nil, fmt.Errorf("compile %s: tokenizer: %w", m.Name, err)
		}
		phase("tokenizer", t0, tok.String())
	case m.Tokenizer != "":
		// The model's own tokenizer (model.yaml's tokenizer key; a GGUF file's vocabulary, a
		// checkpoint folder's tokenizer.json). One that does not load does not stop the
		// compile: the plan then has none, and the report says why.
		t0 := time.Now()
		var err error
		if tok, err = tokenizer.Record(m.Tokenizer, opts.TokenizerRef); err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("the model's tokenizer %s is not recorded: %v", m.Tokenizer, err))
			tok = nil
		} else {
			phase("tokenizer", t0, tok.String()+" (the model's)")
		}
	}

	tokName := opts.Tokenizer
	if tokName == "" {
		tokName = m.Tokenizer
	}
	if err := checkTokenizerVocab(m, tok, tokName); err != nil {
		return nil, nil, fmt.Errorf("compile %s: %w", m.Name, err)
	}
	if n := tokenizerNote(m, tok, opts); n != "" {
		rep.Notes = append(rep.Notes, n)
	}

	t0 := time.Now()
	fns, err := selectFunctions(m, opts.Functions)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range fns {
		rep.Functions = append(rep.Functions, f.Name)
	}
	phase("select", t0, strings.Join(rep.Functions, ", "))
	if opts.Length > 0 {
		mm, ff, err := atLength(m, fns, opts.Length)
		if err != nil {
			return nil, nil, fmt.Errorf("compile %s: --length %d: %w", m.Name, opts.Length, err)
		}
		m, fns = mm, ff
		rep.Notes = append(rep.Notes, fmt.Sprintf("functions with a run-time length compiled at length %d", opts.Length))
	} else if !opts.NoLengthVariants {
		mm, ff, notes, err := withLengthVariants(m, fns, opts.LengthVariants)
		if err != nil {
			return nil, nil, fmt.Errorf("compile %s: %w", m.Name, err)
		}
		m, fns = mm, ff
		rep.Notes = append(rep.Notes, notes...)
	}
	if opts.TopK < 0 {
		return nil, nil, fmt.Errorf("compile %s: top-k %d is negative", m.Name, opts.TopK)
	}
	if opts.ArgmaxOutput || opts.TopK > 0 {
		var changed []string
		if fns, changed, err = addLMOutputs(m, fns, opts.ArgmaxOutput, opts.TopK); err != nil {
			return nil, nil, fmt.Errorf("compile %s: %w", m.Name, err)
		}
		if len(changed) > 0 {
			var what []string
			if opts.ArgmaxOutput {
				what = append(what, NextTokenOutput+" = argmax(logits)")
			}
			if opts.TopK > 0 {
				what = append(what, fmt.Sprintf("%s, %s = the %d largest logits", TopIDsOutput, TopLogitsOutput, opts.TopK))
			}
			rep.Notes = append(rep.Notes, fmt.Sprintf("added outputs %s to %s", strings.Join(what, " and "), strings.Join(changed, ", ")))
			// The model seen from here on has the extended functions, so whatever checks a
			// candidate against the interpreter by function name (measured selection) finds
			// the same outputs as the candidate.
			mm := *m
			mm.Functions = append([]*ir.Function(nil), m.Functions...)
			for _, f := range fns {
				for i, g := range mm.Functions {
					if g.Name == f.Name {
						mm.Functions[i] = f
					}
				}
			}
			m = &mm
		}
	}

	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	opts.start = start
	p, err := compilePipeline(ctx, m, fns, opts, rep, progress, phase)
	if err != nil {
		return nil, nil, fmt.Errorf("compile %s: %w", m.Name, err)
	}
	p.Tokenizer = tok
	p.Functions = foldVariants(p.Functions)
	if err := p.Validate(); err != nil {
		return nil, nil, fmt.Errorf("compile %s: lowering produced an %w", m.Name, err)
	}
	for _, n := range p.Record.Notes {
		// Weights no kernel reads in their block format were dequantized (lower/dequant.go):
		// the person compiling should know what the plan holds.
		if strings.HasPrefix(n, lower.DequantNotePrefix) {
			rep.Notes = append(rep.Notes, n)
		}
	}
	rep.Total = time.Since(start)
	return p, rep, nil
}

// externalWeightsPath is the absolute path of the weight file an external-weights plan
// references: Options.WeightsFile, else the model's. An absolute path stays valid wherever the
// plan is written (vkc compile makes it relative to the plan file, so the two can move together).
func externalWeightsPath(m *ir.Model, opts Options) (string, error) {
	f := opts.WeightsFile
	if f == "" {
		var err error
		if f, err = ModelWeightsFile(m); err != nil {
			return "", fmt.Errorf("external weights: %w", err)
		}
	}
	abs, err := filepath.Abs(f)
	if err != nil {
		return "", fmt.Errorf("external weights: %w", err)
	}
	return abs, nil
}

// ruleCounts turns rule applications by name into the plan's sorted record.
func ruleCounts(applied map[string]uint64) []plan.RuleCount {
	names := make([]string, 0, len(applied))
	for n := range applied {
		names = append(names, n)
	}
	sort.Strings(names)
	counts := make([]plan.RuleCount, len(names))
	for i, n := range names {
		counts[i] = plan.RuleCount{Name: n, Count: applied[n]}
	}
	return counts
}

// selectFunctions returns the named functions of m (all when names is empty), rejecting unknown
// and repeated names.
func selectFunctions(m *ir.Model, names []string) ([]*ir.Function, error) {
	if len(m.Functions) == 0 {
		return nil, fmt.Errorf("model %s has no functions", m.Name)
	}
	if len(names) == 0 {
		return append([]*ir.Function(nil), m.Functions...), nil
	}
	var have []string
	for _, f := range m.Functions {
		have = append(have, f.Name)
	}
	seen := map[string]bool{}
	var fns []*ir.Function
	for _, n := range names {
		f := m.Function(n)
		if f == nil {
			return nil, fmt.Errorf("model %s has no function %q; it has %s", m.Name, n, strings.Join(have, ", "))
		}
		if seen[n] {
			return nil, fmt.Errorf("function %q selected twice", n)
		}
		seen[n] = true
		fns = append(fns, f)
	}
	return fns, nil
}

// findTarget returns the device to compile for and how it was chosen.
func findTarget(opts Options) (Target, string, error) {
	t, how, err := findDevice(opts)
	return withPolicy(t, opts), how, err
}

// withPolicy applies the compile's choices that templates see through Caps (Options.Int8).
func withPolicy(t Target, opts Options) Target {
	if opts.Int8 != kernels.Int8Off {
		t.Caps.Int8 = opts.Int8
	}
	return t
}

// findDeviceInfo returns the description of the device opts.Device selects (as runtime.Open
// would open it), without opening it; an unusable device is an error saying why.
func findDeviceInfo(device string) (runtime.DeviceInfo, error) {
	devs, chosen, err := runtime.Devices(runtime.Options{Device: device})
	if err != nil {
		return runtime.DeviceInfo{}, fmt.Errorf("find device: %w", err)
	}
	for i := range devs {
		d := &devs[i]
		if d.Index != chosen {
			continue
		}
		if !d.Usable {
			return runtime.DeviceInfo{}, fmt.Errorf("device %d (%s) cannot run vkc: %s", d.Index, d.Name, d.Reason)
		}
		return *d, nil
	}
	return runtime.DeviceInfo{}, errors.New("find device: the runtime chose no device")
}

func findDevice(opts Options) (Target, string, error) {
	if opts.Target != nil {
		return *opts.Target, "target given", nil
	}
	devs, chosen, err := runtime.Devices(runtime.Options{Device: opts.Device})
	if err != nil {
		return Target{}, "", fmt.Errorf("find device: %w", err)
	}
	for i := range devs {
		d := &devs[i]
		if d.Index != chosen {
			continue
		}
		if !d.Usable {
			return Target{}, "", fmt.Errorf("device %d (%s) cannot run vkc: %s", d.Index, d.Name, d.Reason)
		}
		how := fmt.Sprintf("device %d, the best of %d", d.Index, len(devs))
		if opts.Device != "" {
			how = fmt.Sprintf("device %d, selected by %q", d.Index, opts.Device)
		} else if s := os.Getenv("VKC_DEVICE"); s != "" {
			how = fmt.Sprintf("device %d, selected by VKC_DEVICE=%s", d.Index, s)
		}
		return Target{Caps: tune.CapsOf(d), Device: Fingerprint(d)}, how, nil
	}
	return Target{}, "", errors.New("find device: the runtime chose no device")
}

// MeasureByDefault reports whether a compile for the device (selected as Options.Device
// selects it) should measure when the user did not say: yes on a GPU, where a tuned compile
// with DefaultBudget costs seconds and is warm after the first; no on a CPU implementation
// (lavapipe), where measuring takes minutes. It returns the reason for a report. vkc compile
// uses it when neither --tune nor --no-tune is given.
func MeasureByDefault(device string) (bool, string, error) {
	devs, chosen, err := runtime.Devices(runtime.Options{Device: device})
	if err != nil {
		return false, "", fmt.Errorf("find device: %w", err)
	}
	for i := range devs {
		d := &devs[i]
		if d.Index != chosen {
			continue
		}
		if d.Type == runtime.CPU {
			return false, fmt.Sprintf("%s is a CPU implementation: static by default (--tune measures)", d.Name), nil
		}
		return true, fmt.Sprintf("%s is a %s GPU: measured by default (--no-tune for the static path)", d.Name, d.Type), nil
	}
	return false, "", errors.New("find device: the runtime chose no device")
}

// DefaultBudget bounds a measured compile when the user gives no budget. A compile spends all of
// it on a model with more problems than it can search (SmolLM2 on the H200: a cold compile of
// 16.5 s), records what it cut short with the budget, and a warm compile of the same budget
// takes those choices as they stand (about a second); a larger --budget, or vkc tune,
// searches further.
const DefaultBudget = 15 * time.Second

// Fingerprint is the plan's form of a device's identity.
func Fingerprint(d *runtime.DeviceInfo) plan.Fingerprint {
	f := d.Fingerprint
	return plan.Fingerprint{VendorID: f.VendorID, DeviceID: f.DeviceID, DriverVersion: f.DriverVersion,
		PipelineCacheUUID: f.PipelineCacheUUID, DeviceName: d.Name}
}

// ModelWeightsFile returns the safetensors file the model.yaml's `weights: {file: ...}` names,
// resolved against the model's folder. ir.Model does not record it, so the model file is read
// again for that one key.
func ModelWeightsFile(m *ir.Model) (string, error) {
	if m.Source == "" {
		return "", errors.New("the model has no source file to find its weights file from")
	}
	if isGGUF, _ := ir.IsGGUF(m.Source); isGGUF {
		return m.Source, nil // imported from a GGUF file, which holds the weights
	}
	if st, err := os.Stat(m.Source); err == nil && st.IsDir() {
		return "", fmt.Errorf("%s is a Hugging Face folder imported in memory; write its model.yaml with vkc import (its weights file is named there) and compile that", m.Source)
	}
	src, err := os.ReadFile(m.Source)
	if err != nil {
		return "", err
	}
	var doc struct {
		Weights struct {
			File  string   `yaml:"file"`
			Files []string `yaml:"files"`
		} `yaml:"weights"`
	}
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return "", fmt.Errorf("%s: %w", m.Source, err)
	}
	if len(doc.Weights.Files) == 1 {
		doc.Weights.File = doc.Weights.Files[0]
	} else if len(doc.Weights.Files) > 1 {
		return "", fmt.Errorf("%s has its weights in %d files (a sharded checkpoint); external weights reference one safetensors file (compile with inline weights)", m.Source, len(doc.Weights.Files))
	}
	if doc.Weights.File == "" {
		return "", fmt.Errorf("%s has random weights (no weights file); external weights need a safetensors file", m.Source)
	}
	f := doc.Weights.File
	if !filepath.IsAbs(f) {
		f = filepath.Join(filepath.Dir(m.Source), f)
	}
	return f, nil
}

// atLength returns m and fns with every function that has a run-time length replaced by the
// function at length n (Options.Length); the model seen from there on has them, so the
// interpreter checks what is compiled.
func atLength(m *ir.Model, fns []*ir.Function, n int) (*ir.Model, []*ir.Function, error) {
	mm := *m
	mm.Functions = append([]*ir.Function(nil), m.Functions...)
	out := append([]*ir.Function(nil), fns...)
	for i, f := range out {
		if f.Length == nil {
			continue
		}
		g, err := f.At(n)
		if err != nil {
			return nil, nil, err
		}
		out[i] = g
		for j, h := range mm.Functions {
			if h == f {
				mm.Functions[j] = g
			}
		}
	}
	return &mm, out, nil
}

// DefaultLengthVariants are the capacities a function with a run-time length is compiled for
// besides its maximum (Options.LengthVariants): a run of one token (a prompt's last chunk, a
// decode through the prefill), up to 8 and up to 64 tokens get kernels chosen for their sizes
// instead of the maximum's tiles, which on lavapipe run a one-token prefill of a 1..512 plan 10
// to 20 times slower than a plan compiled for one token (docs/design-runtime-length.md).
var DefaultLengthVariants = []int{1, 8, 64}

// batchSlots is the number of sequences a batched step of several sequences advances (a
// function that writes a cache with a slot dimension, cache_scatter), or 0. Such a function is
// compiled by default for its slot count (and 64) below its maximum instead of
// DefaultLengthVariants, so that a decode step runs the same kernels whether it advances one
// sequence or all of them: each row's result, and so a greedy generation's tokens, do not
// depend on how many other sequences share its steps (engine's scheduler keeps prefill chunks
// in runs of their own for the same reason).
func batchSlots(f *ir.Function) int {
	for _, n := range f.Nodes {
		if n.Op == ir.CacheScatter {
			return n.Args[0].Type().Shape[0]
		}
	}
	return 0
}

// variantSep joins a function's name and a variant's capacity in the functions compiled (the
// plan folds them back into plan.Function.Variants).
const variantSep = "@"

// withLengthVariants returns m and fns with, after each function with a run-time length, its
// variants for the capacities caps (nil: DefaultLengthVariants) within its bounds and below its
// maximum, named NAME@CAPACITY; the model has them too, so the interpreter checks them by name.
func withLengthVariants(m *ir.Model, fns []*ir.Function, caps []int) (*ir.Model, []*ir.Function, []string, error) {
	var out []*ir.Function
	var added []*ir.Function
	var notes []string
	for _, f := range fns {
		out = append(out, f)
		l := f.Length
		if l == nil {
			continue
		}
		fcaps := caps
		if fcaps == nil {
			fcaps = DefaultLengthVariants
			if s := batchSlots(f); s > 0 {
				fcaps = []int{s, 64}
			}
		}
		var made []string
		for _, c := range fcaps {
			if c < l.Min || c >= l.Max {
				continue
			}
			g, err := f.WithCapacity(c)
			if err != nil {
				return nil, nil, nil, err
			}
			g.Name = f.Name + variantSep + strconv.Itoa(c)
			out = append(out, g)
			added = append(added, g)
			made = append(made, strconv.Itoa(c))
		}
		if len(made) > 0 {
			notes = append(notes, fmt.Sprintf("%s (%s in %d..%d) also compiled for %s in %s", f.Name, l.Dim, l.Min, l.Max,
				l.Dim, strings.Join(made, ", ")))
		}
	}
	if len(added) == 0 {
		return m, fns, nil, nil
	}
	mm := *m
	mm.Functions = append(append([]*ir.Function(nil), m.Functions...), added...)
	return &mm, out, notes, nil
}

// foldVariants moves the plan functions NAME@CAPACITY into NAME's Variants, ranges split at the
// capacities: a variant of capacity c serves the lengths above the next smaller variant's
// capacity up to c.
func foldVariants(fs []plan.Function) []plan.Function {
	var out []plan.Function
	variants := map[string][]plan.Function{}
	for _, f := range fs {
		if name, _, ok := strings.Cut(f.Name, variantSep); ok && f.Length != nil {
			f.Name = name
			variants[name] = append(variants[name], f)
			continue
		}
		out = append(out, f)
	}
	for i := range out {
		vs := variants[out[i].Name]
		if len(vs) == 0 || out[i].Length == nil {
			continue
		}
		sort.Slice(vs, func(a, b int) bool { return vs[a].Length.Max < vs[b].Length.Max })
		lo := out[i].Length.Min
		for j := range vs {
			l := *vs[j].Length
			l.Min = lo
			vs[j].Length = &l
			lo = l.Max + 1
		}
		out[i].Variants = vs
	}
	return out
}
