package vkc

// End-to-end tests: every example compiles for the device (lavapipe in CI), loads, runs, and
// matches the reference interpreter; the Hugging Face oracles match through compiled plans;
// compiling is deterministic. Every op of every example has a kernel template now, so a compile
// failure is a test failure (a missing template names the op and the node that need it).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

// oracleTol is testdata/hf/README.md's tolerance: max abs error ≤ 1e-4 relative to the row's
// largest magnitude. Compiled-versus-interpreter comparisons use the same bound.
const oracleTol = 1e-4

// ciExamples are the examples CI compiles and runs on lavapipe.
var ciExamples = []string{"mlp", "tinyllama", "whisper-tiny-encoder", "qwen3-tiny", "llama-tied", "resnet-tiny"}

var (
	e2eOnce sync.Once
	e2eDev  *runtime.Device
	e2eErr  error
)

// device opens the default device once for the package's tests; without Vulkan the test is
// skipped, saying so.
func device(t *testing.T) *runtime.Device {
	t.Helper()
	e2eOnce.Do(func() { e2eDev, e2eErr = runtime.Open(runtime.Options{}) })
	if e2eErr != nil {
		t.Skipf("no Vulkan device (the end-to-end tests need one; lavapipe is enough): %v", e2eErr)
	}
	return e2eDev
}

func targetOf(d *runtime.Device) *Target {
	return &Target{Caps: tune.CapsOf(&d.Info), Device: d.DeviceFingerprint()}
}

// compileExample compiles the example for the options' target; any error fails the test (a
// missing kernel template with the op and node that need it).
func compileExample(t *testing.T, m *ir.Model, opts Options) (*plan.Plan, *Report) {
	t.Helper()
	p, rep, err := Compile(context.Background(), m, opts)
	if errors.Is(err, lower.ErrNoTemplate) {
		t.Fatalf("%s does not compile: no kernel template for %s", m.Name, blocker(err))
	}
	if err != nil {
		t.Fatalf("compile %s: %v", m.Name, err)
	}
	return p, rep
}

// blocker names the op and node of a NoTemplateError briefly.
func blocker(err error) string {
	var nt *lower.NoTemplateError
	if errors.As(err, &nt) {
		return fmt.Sprintf("op %s (function %s, node %s)", nt.Op, nt.Function, nt.Node)
	}
	return err.Error()
}

// parseImported writes an importer's model.yaml into dir (where it wrote the model's weights
// files, YAMLDir) and parses it, as `vkc import` then `vkc compile` would.
func parseImported(t *testing.T, dir string, yaml []byte) *ir.Model {
	t.Helper()
	yml := filepath.Join(dir, "model.yaml")
	if err := os.WriteFile(yml, yaml, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ir.ParseModel(yml)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func parseExample(t *testing.T, name string) *ir.Model {
	t.Helper()
	m, err := ir.ParseModel(filepath.Join("examples", name, "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// roundTrip writes the plan to a file and loads it back through LoadPlan and the runtime, as a
// user of the CLI or the API would.
func roundTrip(t *testing.T, d *runtime.Device, p *plan.Plan) *runtime.Executable {
	t.Helper()
	return roundTripWith(t, d, p, runtime.LoadOptions{})
}

// roundTripWith is roundTrip with load options (their PlanPath is the file's).
func roundTripWith(t *testing.T, d *runtime.Device, p *plan.Plan, o runtime.LoadOptions) *runtime.Executable {
	t.Helper()
	path := filepath.Join(t.TempDir(), p.Model+".plan")
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	q, err := engine.LoadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	o.PlanPath = path
	exe, err := d.Load(q, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exe.Close() })
	return exe
}

// rowError is the largest |got-want| of each row (last axis) divided by the row's largest
// |want|, maximised over rows.
func rowError(got, want *ir.Tensor) (float64, error) {
	if got.NumElements() != want.NumElements() {
		return 0, fmt.Errorf("got %s, want %s", got.Type, want.Type)
	}
	cols := 1
	if r := want.Type.Shape.Rank(); r > 0 {
		cols = want.Type.Shape[r-1]
	}
	g, w := got.Float64s(), want.Float64s()
	worst := 0.0
	for r := 0; r < len(w)/max(cols, 1); r++ {
		scale, diff := 0.0, 0.0
		for c := 0; c < cols; c++ {
			scale = math.Max(scale, math.Abs(w[r*cols+c]))
			d := math.Abs(g[r*cols+c] - w[r*cols+c])
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			diff = math.Max(diff, d)
		}
		worst = math.Max(worst, diff/math.Max(scale, 1e-30))
	}
	return worst, nil
}

// compare checks one output against the interpreter's: floats by rowError, integers exactly.
func compare(t *testing.T, what string, got, want *ir.Tensor) float64 {
	t.Helper()
	if want.Type.DType.IsFloat() {
		e, err := rowError(got, want)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return math.Inf(1)
		}
		if e > oracleTol {
			t.Errorf("%s: row-relative error %.3g > %g", what, e, oracleTol)
		}
		return e
	}
	g, w := got.Float64s(), want.Float64s()
	for i := range w {
		if g[i] != w[i] {
			t.Errorf("%s: element %d is %v, want %v", what, i, g[i], w[i])
			break
		}
	}
	return 0
}

// exampleInputs makes inputs for f: a scalar i32 input is the position pos (every example's
// scalar input is a position), other integers are token ids in [0, 10) (valid for every
// example's vocabulary), floats uniform in [-1, 1].
func exampleInputs(f *ir.Function, pos int, rng *rand.Rand) map[string]*ir.Tensor {
	in := map[string]*ir.Tensor{}
	for _, n := range f.Inputs {
		typ := n.Type()
		x := ir.NewTensor(typ)
		for i := 0; i < x.NumElements(); i++ {
			switch {
			case typ.DType.IsInt() && typ.Shape.Rank() == 0:
				x.SetFloat64(i, float64(pos))
			case typ.DType.IsInt():
				x.SetFloat64(i, float64(rng.IntN(10)))
			default:
				x.SetFloat64(i, 2*rng.Float64()-1)
			}
		}
		in[n.Name] = x
	}
	return in
}

// seqLen is how many positions a run of f advances: the length of its i32 vector input (the
// tokens), 0 for functions without one.
func seqLen(f *ir.Function) int {
	for _, n := range f.Inputs {
		if t := n.Type(); t.DType == ir.I32 && t.Shape.Rank() == 1 {
			return t.Shape[0]
		}
	}
	return 0
}

// TestExamplesMatchInterpreter compiles every CI example for the device and runs its functions
// in model order, then the last function twice more (for a language model: prefill, then three
// decode steps, the KV cache carried on the device and in the interpreter alike), comparing every
// output and, at the end, every state tensor with the interpreter.
func TestExamplesMatchInterpreter(t *testing.T) {
	d := device(t)
	for _, name := range ciExamples {
		t.Run(name, func(t *testing.T) { matchInterpreter(t, d, name, parseExample(t, name)) })
	}
}

// matchInterpreter is TestExamplesMatchInterpreter's check of one model.
func matchInterpreter(t *testing.T, d *runtime.Device, name string, m *ir.Model) *plan.Plan {
	t.Helper()
	p, _ := compileExample(t, m, Options{Target: targetOf(d)})
	exe := roundTrip(t, d, p)
	s := interp.NewSession(m)
	rng := rand.New(rand.NewPCG(7, uint64(len(name))))
	order := append([]*ir.Function(nil), m.Functions...)
	order = append(order, m.Functions[len(m.Functions)-1], m.Functions[len(m.Functions)-1])
	pos := 0
	worst := 0.0
	for step, f := range order {
		in := exampleInputs(f, pos, rng)
		want, err := s.Run(f.Name, in)
		if err != nil {
			t.Fatalf("interpreter %s: %v", f.Name, err)
		}
		got := runFunction(t, exe, p, f.Name, in)
		for _, o := range f.Outputs {
			worst = math.Max(worst, compare(t, fmt.Sprintf("run %d (%s at position %d): %s", step, f.Name, pos, o.Name), got[o.Name], want[o.Name]))
		}
		pos += seqLen(f)
	}
	for _, st := range p.State {
		b, err := exe.ReadState(st.Name)
		if err != nil {
			t.Fatal(err)
		}
		typ, _ := ValueType(&plan.Value{Name: st.Name, DType: st.DType, Shape: st.Shape})
		worst = math.Max(worst, compare(t, "state "+st.Name, &ir.Tensor{Type: typ, Data: b}, s.State(st.Name)))
	}
	t.Logf("%s: %d runs, %d state tensors, max row-relative error %.3g", name, len(order), len(p.State), worst)
	return p
}

// TestTinyLlamaOracle runs the HF tinyllama prompt through the compiled prefill, the 8 fed tokens
// through the compiled decode (the KV cache carried on the device), and greedy generation
// through Generate with the argmax on the device (ArgmaxOutput); logits must match HF within the
// tolerance and the tokens exactly.
func TestTinyLlamaOracle(t *testing.T) {
	d := device(t)
	m := parseExample(t, "tinyllama")
	t0 := time.Now()
	p, _ := compileExample(t, m, Options{Target: targetOf(d), ArgmaxOutput: true})
	compileTime := time.Since(t0)
	exe := roundTrip(t, d, p)
	gold, err := safetensors.ReadAll("testdata/hf/tinyllama/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := engine.Int32s(gold["input_ids"].Data)
	prefill, decode := p.Function("prefill"), p.Function("decode")
	res, err := exe.Run(ctx, "prefill", map[string][]byte{"tokens": engine.Int32Bytes(ids...), "pos": engine.Int32Bytes(0)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Outputs(prefill, res)
	if err != nil {
		t.Fatal(err)
	}
	e := compare(t, "prefill logits", out["logits"], gold["prefill_logits"])
	t.Logf("prefill logits: max row-relative error %.3g", e)
	// The device's argmax of every row is the argmax of the logits it returned.
	next, lg := engine.Int32s(out[NextTokenOutput].Data), engine.Float32s(out["logits"].Data)
	for r := range next {
		if w := engine.Argmax(lg[r*256 : (r+1)*256]); int(next[r]) != w {
			t.Errorf("prefill row %d: next_token %d, argmax of the logits %d", r, next[r], w)
		}
	}

	fed := engine.Int32s(gold["decode_tokens"].Data)
	wantDecode := gold["decode_logits"]
	vocab := wantDecode.Type.Shape[1]
	worst := 0.0
	for step, tok := range fed {
		res, err := exe.Run(ctx, "decode", map[string][]byte{"tokens": engine.Int32Bytes(tok), "pos": engine.Int32Bytes(int32(16 + step))})
		if err != nil {
			t.Fatalf("decode step %d: %v", step, err)
		}
		out, err := Outputs(decode, res)
		if err != nil {
			t.Fatal(err)
		}
		row := &ir.Tensor{Type: ir.T(ir.F32, 1, vocab), Data: wantDecode.Data[4*vocab*step : 4*vocab*(step+1)]}
		worst = math.Max(worst, compare(t, fmt.Sprintf("decode step %d logits", step), out["logits"], row))
	}
	t.Logf("decode logits (8 steps, cache carried): max row-relative error %.3g", worst)

	if err := exe.ResetState(); err != nil {
		t.Fatal(err)
	}
	g, err := engine.GenerateIDs(ctx, exe, ids, engine.GenerateOptions{MaxTokens: 9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Int32s(gold["greedy_tokens"].Data)
	if fmt.Sprint(g.Tokens) != fmt.Sprint(want) {
		t.Errorf("greedy tokens %v, HF %v", g.Tokens, want)
	}
	if g.HostArgmax {
		t.Error("Generate took the argmax on the host although the plan has next_token")
	}
	t.Logf("%s: compile %v, prompt (16 tokens) %v, decode %v per token (median of %d)",
		d.Info.Name, compileTime.Round(time.Millisecond), g.Prompt.Round(time.Microsecond), g.PerToken().Round(time.Microsecond), len(g.Steps))
}

// runFunction runs function fn of plan p, loaded as exe, on in and returns its outputs.
func runFunction(t *testing.T, exe *runtime.Executable, p *plan.Plan, fn string, in map[string]*ir.Tensor) map[string]*ir.Tensor {
	t.Helper()
	pf := p.Function(fn)
	bin, err := Inputs(pf, in)
	if err != nil {
		t.Fatal(err)
	}
	res, err := exe.Run(context.Background(), fn, bin)
	if err != nil {
		t.Fatalf("run %s: %v", fn, err)
	}
	got, err := Outputs(pf, res)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestWhisperOracle compares the compiled encoder's hidden state with HF's last_hidden_state.
func TestWhisperOracle(t *testing.T) {
	d := device(t)
	m := parseExample(t, "whisper-tiny-encoder")
	p, _ := compileExample(t, m, Options{Target: targetOf(d)})
	exe := roundTrip(t, d, p)
	gold, err := safetensors.ReadAll("testdata/hf/whisper-tiny-encoder/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	out := runFunction(t, exe, p, "encode", map[string]*ir.Tensor{"features": gold["input_features"]})
	e := compare(t, "last_hidden_state", out["hidden"], gold["last_hidden_state"])
	t.Logf("last_hidden_state: max row-relative error %.3g", e)
}

// TestCompileDeterministic compiles each example twice for the device-free lavapipe target:
// the encoded plans must be byte-identical.
func TestCompileDeterministic(t *testing.T) {
	for _, name := range ciExamples {
		t.Run(name, func(t *testing.T) {
			m := parseExample(t, name)
			var enc [2][]byte
			for i := range enc {
				p, _ := compileExample(t, m, Options{Target: &LavapipeTarget})
				var b bytes.Buffer
				if err := p.Encode(&b); err != nil {
					t.Fatal(err)
				}
				enc[i] = b.Bytes()
			}
			if !bytes.Equal(enc[0], enc[1]) {
				n := 0
				for n < len(enc[0]) && n < len(enc[1]) && enc[0][n] == enc[1][n] {
					n++
				}
				t.Errorf("two compiles differ: %d and %d bytes, first difference at byte %d", len(enc[0]), len(enc[1]), n)
			}
		})
	}
}

// TestExternalWeights compiles tinyllama with the weights left in its safetensors file: the plan
// is small, loads through LoadPlan (which checks the file's SHA-256), and gives the same
// logits as the inline plan.
func TestExternalWeights(t *testing.T) {
	d := device(t)
	m := parseExample(t, "tinyllama")
	inline, _ := compileExample(t, m, Options{Target: targetOf(d), Functions: []string{"decode"}})
	ext, _ := compileExample(t, m, Options{Target: targetOf(d), Functions: []string{"decode"}, Weights: WeightsExternal})
	if ext.Weights.Source == nil || len(ext.Weights.Data) != 0 {
		t.Fatalf("external plan has source %v and %d inline weight bytes", ext.Weights.Source, len(ext.Weights.Data))
	}
	in := map[string][]byte{"tokens": engine.Int32Bytes(42), "pos": engine.Int32Bytes(0)}
	var logits [2][]byte
	for i, p := range []*plan.Plan{inline, ext} {
		res, err := roundTrip(t, d, p).Run(context.Background(), "decode", in)
		if err != nil {
			t.Fatal(err)
		}
		logits[i] = res["logits"]
	}
	if !bytes.Equal(logits[0], logits[1]) {
		t.Error("inline and external weights give different logits")
	}
}

// TestSmolLM2CompilesDeviceFree compiles the benchmark model (135 M parameters) for the
// device-free lavapipe target without running it: running it is too slow for lavapipe in CI, it
// is run on the GPU machine (vkc compile examples/smollm2-135m/model.yaml, then vkc bench).
func TestSmolLM2CompilesDeviceFree(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: smollm2-135m's 135 M random weights take seconds to make and lower")
	}
	m := parseExample(t, "smollm2-135m")
	p, rep := compileExample(t, m, Options{Target: &LavapipeTarget})
	lm, err := engine.CausalLM(p)
	if err != nil {
		t.Fatal(err)
	}
	if lm.Prefill == nil || lm.Prefill.Seq != 512 || lm.Prefill.MinSeq != 1 || lm.Decode.Vocab != 49152 {
		t.Errorf("prefill %+v, decode vocab %d: want a prefill of 1 to 512 tokens and a 49152-token vocabulary", lm.Prefill, lm.Decode.Vocab)
	}
	if vs := p.Function("prefill").Variants; len(vs) != 3 {
		t.Errorf("prefill has %d variants, want 3 (1, 8, 64)", len(vs))
	}
	if lm.Context != 2048 {
		t.Errorf("context length %d, want 2048", lm.Context)
	}
	for _, f := range rep.Lower.Functions {
		t.Logf("%s: %d dispatches, %d barriers, arena %d of %d intermediate bytes", f.Name, f.Dispatches, f.Barriers, f.ArenaBytes, f.Intermediates)
	}
	t.Logf("compile %v (%s); weights %d MiB", rep.Total.Round(time.Millisecond), phases(rep), rep.Lower.Weights>>20)
	// The dependent steps of a layer (issue 14): the plan's barriers, as vkc inspect counts
	// them, for every function (the prefill's variants too). Before the column parts (QKV with
	// rope and cache writes, gate/up with SwiGLU, no slice copies) decode had 7 levels per layer
	// on lavapipe (275 dispatches, 213 barriers; 8 and 243 with the H200's split attention) and
	// the prefill of 128 tokens 9 (424, 272).
	const layers = 30
	for _, f := range rep.Lower.Functions {
		perLayer := 8
		if strings.HasPrefix(f.Name, "decode") {
			perLayer = 6
		}
		// The embedding before the layers and the output norm, logits and argmax after them
		// take up to five levels of their own.
		if limit := perLayer*layers + 5; f.Barriers > limit {
			t.Errorf("%s: %d barriers for %d layers, more than %d (%d levels per layer)", f.Name, f.Barriers, layers, limit, perLayer)
		}
		t.Logf("%s: %d dispatches, %d barriers (%.2f per layer)", f.Name, f.Dispatches, f.Barriers, float64(f.Barriers)/layers)
	}
	// The plan itself says the same (what vkc inspect reads).
	for _, pf := range p.Functions {
		n := 0
		for _, d := range pf.Dispatches {
			if d.BarrierBefore {
				n++
			}
		}
		for _, f := range rep.Lower.Functions {
			if f.Name == pf.Name && f.Barriers != n {
				t.Errorf("%s: the report counts %d barriers, the plan has %d", f.Name, f.Barriers, n)
			}
		}
	}
}

func phases(r *Report) string {
	var s []string
	for _, p := range r.Phases {
		s = append(s, fmt.Sprintf("%s %v", p.Name, p.Time.Round(time.Millisecond)))
	}
	return strings.Join(s, ", ")
}

// h200Target is the H200 as `vkc devices` describes it (kernels.H200, docs/bench), for device-free
// compiles that show what lowering chooses there.
var h200Target = Target{Caps: kernels.H200, Device: plan.Fingerprint{VendorID: 0x10de, DeviceID: 0x2335, DriverVersion: 0x9127c100,
	DeviceName: "NVIDIA H200 (device-free target)"}}

// templateCounts counts a plan's dispatches by template (the first word of a module's key), over
// all its functions.
func templateCounts(p *plan.Plan) map[string]int {
	n := map[string]int{}
	for _, f := range p.Functions {
		for _, d := range f.Dispatches {
			n[strings.Fields(p.Modules[d.Module].Key)[0]]++
		}
	}
	return n
}

// TestSmolLM2PrefillOnCoopMatrices compiles SmolLM2-135M's prefill statically for the H200 target:
// every matmul of its 128 rows and every attention must run on the cooperative-matrix templates
// (lowering's static choice; the tuner measures them too), and the same compile for lavapipe must
// use none of them.
func TestSmolLM2PrefillOnCoopMatrices(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: smollm2-135m's 135 M random weights take seconds to make and lower")
	}
	m := parseExample(t, "smollm2-135m")
	ph, _ := compileExample(t, m, Options{Target: &h200Target, Functions: []string{"prefill"}})
	n := templateCounts(ph)
	t.Logf("H200 prefill templates: %v", n)
	if n["matmul_coop"] < 4*30 || n["attention_coop"] != 30 || n["matmul_tiled"] != 0 || n["attention_flash"] != 0 {
		t.Errorf("H200 prefill: %v; want every layer's four matmuls and its attention on cooperative matrices", n)
	}
	pl, _ := compileExample(t, m, Options{Target: &LavapipeTarget, Functions: []string{"prefill"}})
	for name, k := range templateCounts(pl) {
		if strings.Contains(name, "coop") {
			t.Errorf("lavapipe prefill uses %s %d times", name, k)
		}
	}
}

// h100Target is the H100 of the GPU machine as `vkc devices` lists it
// (docs/bench/h100-2026-12-06/s12call1-devices.txt): kernels.H200's capabilities with
// VK_NV_cooperative_matrix2's workgroup-scope f16 shapes (granules of 16 over 32 and 64
// invocations, 32×16 over 128, 32×32 over 256), so that matmul_cm2 serves products.
var h100Target = func() Target {
	caps := kernels.H200
	caps.IntegerDot = true
	caps.Coop2 = &kernels.Coop2Caps{MaxWorkgroupSize: 256, MaxDimension: 1024, ReservedShared: 8192}
	for _, s := range []struct{ m, n, inv int }{{16, 16, 32}, {16, 16, 64}, {32, 16, 128}, {32, 32, 256}} {
		for _, acc := range []codegen.Type{codegen.F16, codegen.F32} {
			caps.Coop2.Shapes = append(caps.Coop2.Shapes, kernels.Coop2Shape{MGran: s.m, NGran: s.n, KGran: 16,
				A: codegen.F16, B: codegen.F16, C: acc, Result: acc, Invocations: s.inv})
		}
	}
	return Target{Caps: caps, Device: plan.Fingerprint{VendorID: 0x10de, DeviceID: 0x2330, DriverVersion: 0x9127c100,
		DeviceName: "NVIDIA H100 80GB HBM3 (device-free target)"}}
}()

// TestSmolLM2StaticExtractionH100: SmolLM2-135M's static prefill for the H100 runs its products on
// matmul_cm2. Extraction priced by rules.DefaultCost fused rmsnorm into every product
// (rmsnorm_linear, which lowering gives matmul_coop); on the H100 that plan took 1.14 times the
// graph as written at 512 rows, whose products run on matmul_cm2 (session 24,
// docs/tuning.md "The static extraction"). Only the first layer's QKV product, with no residual
// sum before its norm, may stay fused. Decode keeps its merged, norm-fused products: four
// matrix–vector products a layer (QKV, output, gate/up, down) and the LM head, as before.
func TestSmolLM2StaticExtractionH100(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: smollm2-135m's 135 M random weights take seconds to make and lower")
	}
	m := parseExample(t, "smollm2-135m")
	pp, _ := compileExample(t, m, Options{Target: &h100Target, Functions: []string{"prefill"}, NoLengthVariants: true})
	n := templateCounts(pp)
	t.Logf("H100 prefill templates: %v", n)
	if n["matmul_coop"] > 1 || n["matmul_cm2"] < 4*30 || n["attention_coop"] != 30 {
		t.Errorf("H100 prefill: %v; want every product on matmul_cm2 but at most the first layer's QKV", n)
	}
	pd, _ := compileExample(t, m, Options{Target: &h100Target, Functions: []string{"decode"}, NoLengthVariants: true})
	n = templateCounts(pd)
	t.Logf("H100 decode templates: %v", n)
	if n["matmul_vec"] != 4*30+1 {
		t.Errorf("H100 decode: %d matrix–vector products, want %d (merged QKV and gate/up, the LM head)", n["matmul_vec"], 4*30+1)
	}
}

// TestSmolLM2DecodeStepsH200: SmolLM2-135M's decode compiled statically for the H200 target
// takes split-key attention (the lavapipe compile takes the flash kernel), whose last workgroup
// combines the key ranges: no combining step, so the layer keeps the 5 dependent steps of the
// lavapipe plan (the H200's tuned plans of docs/bench had 8, with 305 dispatches and 243
// barriers).
func TestSmolLM2DecodeStepsH200(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: smollm2-135m's 135 M random weights take seconds to make and lower")
	}
	m := parseExample(t, "smollm2-135m")
	p, rep := compileExample(t, m, Options{Target: &h200Target, Functions: []string{"decode"}})
	split := 0
	for _, d := range p.Functions[0].Dispatches {
		if strings.HasPrefix(p.Modules[d.Module].Key, "attention_split") {
			split++
		}
	}
	f := rep.Lower.Functions[0]
	t.Logf("H200 decode: %d dispatches, %d barriers, %d split-attention dispatches", f.Dispatches, f.Barriers, split)
	if split != 30 {
		t.Errorf("%d split-attention dispatches, want one per layer (30)", split)
	}
	if limit := 6*30 + 5; f.Barriers > limit {
		t.Errorf("%d barriers, more than %d (6 levels per layer)", f.Barriers, limit)
	}
}
