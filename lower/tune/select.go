package tune

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

// Measured selection of whole programs. The e-graph gives k diverse candidate graphs of a
// function, cheapest first under the measured kernel costs (rules.OptimizeK with Tuner.OpCost);
// SelectFunction lowers each, runs it end to end on random inputs, checks its outputs against the
// interpreter's evaluation of the function as written, and times the valid ones with paired,
// alternating measurements. The fastest valid one wins, though the static extraction only loses
// on evidence (Replaces). The compile driver then lowers the
// winners of all functions together into the final plan and records Selection.Record in it.

// SelectCandidate is one equivalent version of a function.
type SelectCandidate struct {
	Fn *ir.Function
	// Label says what distinguishes it for reports ("extraction 2: add_rmsnorm×4, linear-qkv").
	Label string
	// Estimated is its cost under the extraction's cost model (0 if unknown).
	Estimated time.Duration
	// Key identifies its graph (rules.FunctionKey) for the tuning database's record of the
	// selection; "" never matches a record.
	Key string
	// Static marks the candidate the compile would take without measurement (the static
	// extraction): when no paired round could be measured it is kept, and another candidate
	// replaces it only on the evidence of the rounds (Replaces).
	Static bool
}

// PlanTimer times one function of a loaded plan; tests pass a fake clock.
type PlanTimer interface {
	TimePlan(ctx context.Context, exe *runtime.Executable, fn string, inputs map[string][]byte, candidate int) (time.Duration, error)
}

// RoundTiming is how SelectFunction times a candidate in one paired round: one submission of
// warm-up runs and repetitions, its median. A noisy submission is not measured again: the
// paired rounds are the repetition (their ratios' median decides), and a round costs the same
// on a quiet device and a loaded one. Executable.Measure runs the function once before the
// submission (to bind its inputs), so one warm-up run in it follows another: 7 runs a timing,
// against 10 with the 2 warm-ups and 7 repetitions until session 21.
var RoundTiming = runtime.MeasureOptions{Warmup: 1, Reps: 5, MaxRounds: 1}

// RepTime is the time a timing's repetitions are sized for after a candidate's first round: one
// whose last time t exceeds it takes ⌈Reps·RepTime/t⌉ of RoundTiming's Reps, at least 2. On the
// H100 the static extraction of SmolLM2's scoring function ran 22.3 ms at 512 rows where the
// graph as written ran 3.9 (session 21): its 7 runs a timing were a quarter of the round.
const RepTime = 5 * time.Millisecond

// roundReps is the repetitions of a candidate's timing after a round that took last (RepTime).
func roundReps(reps int, last time.Duration) int {
	if last <= 0 {
		return reps
	}
	n := int((time.Duration(reps)*RepTime + last - 1) / last)
	return max(min(n, reps), min(2, reps))
}

// ExecTiming times a plan function with runtime.Executable.Measure (GPU time of its dispatches,
// median of the repetitions of one submission).
type ExecTiming struct {
	Options runtime.MeasureOptions
}

// TimePlan implements PlanTimer.
func (t ExecTiming) TimePlan(ctx context.Context, exe *runtime.Executable, fn string, inputs map[string][]byte, _ int) (time.Duration, error) {
	m, err := exe.Measure(ctx, fn, inputs, t.Options)
	if err != nil {
		return 0, err
	}
	return m.Median, nil
}

// SelectOptions configure SelectFunction. The zero value is usable.
type SelectOptions struct {
	// Open opens the device when SelectFunction is given none (nil), the first time a selection
	// is measured: a compile whose selections are recorded opens no device.
	Open func() (*runtime.Device, error)
	// Rounds of alternating measurements (default 5): round r times the valid candidates in
	// order, round r+1 in reverse order, so drift (clocks, heat, caches) falls on all alike.
	Rounds int
	// Timer times a candidate (default ExecTiming with RoundTiming).
	Timer PlanTimer
	// Tolerance is the largest error allowed against the interpreter, relative to each row's
	// largest magnitude (default 1e-3: a whole function accumulates more rounding than a kernel).
	Tolerance float64
	// Seed fixes the random inputs.
	Seed int64
	// Load options for the candidate plans (external weights resolve against PlanPath).
	Load runtime.LoadOptions
	// Trace, when set, gets a line before and after each candidate is checked and each round is
	// timed (see Tuner.Trace).
	Trace io.Writer
	// References holds functions' reference evaluations started earlier (StartReference with
	// this Seed), so that the interpreter runs while kernels are tuned; a function without one
	// is evaluated when its selection starts.
	References map[*ir.Function]*Reference
	// DB and Key, when set, record each selection in the tuning database under Key(function)
	// (SelectionEntry) and reuse a complete record whose candidates are the same graphs: the
	// function's winner is then the recorded one, and nothing is lowered, run or timed.
	DB  *DB
	Key func(f *ir.Function) SelectionKey
	// Budget is the compile's budget (0: none): a selection its deadline cuts short is recorded
	// with it, and a recorded selection cut so under a budget at least as large is reused like a
	// complete one (SelectionEntry.Budget).
	Budget time.Duration

	// NewKernels, when set, counts the kernels of a plan that no pipeline exists for yet (a
	// check compiles them: on lavapipe 0.1 s to seconds each), and KernelCost is what one is
	// expected to cost before a check has measured it; a check is not started when the kernels
	// it would compile would outlast the budget.
	NewKernels func(p *plan.Plan) int
	KernelCost time.Duration
	// Prefetch, when set, creates the pipelines of a candidate's plan that none exists for in
	// the background (Tuner.PrefetchPlan): SelectFunctions lowers every function's candidates,
	// static extractions first, and prefetches them while it checks.
	Prefetch func(p *plan.Plan)
	// CompileCost, when set, predicts what compiling p's new kernels costs from the tuner's
	// first runs so far (Tuner.CompileCost): a check that would spend the time kept for the
	// rounds of the candidates already valid is predicted by it (checkCost).
	CompileCost func(p *plan.Plan) time.Duration
	// CompilePricing, when set, says how CompileCost priced p's new kernels, for the trace of
	// a candidate that waits for the rounds (Tuner.CompilePricing).
	CompilePricing func(p *plan.Plan) string
	// Guard, when set, bounds every check and timing by its hard deadline (DeviceGuard): work
	// the deadline leaves running is abandoned, and nothing more is checked or timed.
	Guard *DeviceGuard

	// outer bounds the checking (SelectFunctions: the whole selection's context; the rounds
	// of each function have a share of it); nil: SelectFunction's ctx. checks is the running
	// mean of a candidate check's wall time, runs that of the checks that compiled no kernel
	// (lowering, loading, the run and the comparison), perKernel of what a check that compiled
	// kernels took beyond runs' mean, per kernel; all shared by the functions of one selection.
	outer     context.Context
	tolScale  float64   // the tolerance's factor (0: 1); 2 against a device reference
	refs      *sync.Map // *ir.Tensor (a reference's output) → *refView, for compareOutputs
	checks    *meanTime
	runs      *meanTime
	perKernel *meanTime
	// lowered holds what the prefetch learned of each candidate it lowered (a candidate's
	// *ir.Function → loweredProgram), so that a check need not lower a candidate whose program
	// is an earlier valid candidate's; nil without a prefetch.
	lowered *sync.Map
}

// loweredProgram is what prefetchCandidates keeps of a lowered candidate: its program's key
// (programKey), its weights' size and the plan until a check has used it (its folded weights
// are the lowering's FoldCache's, shared with the other candidates: a plan holds its modules and
// steps).
type loweredProgram struct {
	key     string
	weights uint64
	plan    *plan.Plan
}

// loweredProgram returns what the prefetch kept of fn's lowering, if it got to fn.
func (o SelectOptions) loweredProgram(fn *ir.Function) (loweredProgram, bool) {
	if o.lowered == nil {
		return loweredProgram{}, false
	}
	v, ok := o.lowered.Load(fn)
	if !ok {
		return loweredProgram{}, false
	}
	return v.(loweredProgram), true
}

func (o SelectOptions) trace(format string, args ...any) {
	if o.Trace != nil {
		fmt.Fprintf(o.Trace, format+"\n", args...)
	}
}

// CheckLength is the run-time length at which a function with one (ir.Length) is checked
// against the interpreter, and the number of rows at which a kernel problem with run-time rows
// (kernels.Rows) is: at most the capacity. A check at the capacity costs what the float64
// interpreter costs there — SmolLM2's 512-row prefill took 10 s on two cores and 7.8 GB on the
// H200's machine, for five functions at once — while what a check catches (a wrong rewrite, a
// wrong configuration) shows at any length that crosses a tile edge: 37 rows cross the 32-row
// tiles with a remainder and fill no power-of-two tile. Times are measured at the capacity and at
// a short length (ShortAt).
const CheckLength = 37

// CheckAt returns the length f is checked at: CheckLength within f's bounds (0: f has no
// run-time length).
func CheckAt(f *ir.Function) int {
	if f.Length == nil {
		return 0
	}
	return max(min(CheckLength, f.Length.Max), f.Length.Min)
}

// checkedAt is f as it is checked: at CheckAt rows when it has a run-time length, else itself.
func checkedAt(f *ir.Function) (*ir.Function, error) {
	if n := CheckAt(f); n > 0 {
		return f.At(n)
	}
	return f, nil
}

// ShortLength is the longest of the short run-time lengths at which a function with one is
// timed beside its capacity (ShortAt): a prompt of 128 tokens, the held-out table's prefill
// (scripts/heldout-bench.sh, `vkc compare --length 128`). Timing only the capacity misled the
// selection on the H200: SmolLM2's prefill (capacity 512) switched graphs after its candidate
// won 4 of 4 rounds by 10% at 512 rows (14–16 ms), and lost 4.8% (0 of 40) held out at 128
// (3.5 ms): at a quarter of the rows the kernels fill a quarter of the workgroups, and what
// wins at the capacity need not win there.
const ShortLength = 128

// ShortAt returns the short length f is timed at beside its capacity: ShortLength, or a quarter
// of the capacity when that is shorter (a prefill of 64 rows is also timed at 16), within f's
// bounds; 0 when f has no run-time length or the short length would be the capacity itself.
// A quarter keeps the two lengths apart where the capacity is small, so that the rule holds
// for both regimes: the short one where a kernel's tiles are partly empty and fixed costs
// (launches, barriers) weigh most, the capacity where the work does.
func ShortAt(f *ir.Function) int {
	if f.Length == nil {
		return 0
	}
	n := max(min(ShortLength, f.Length.Max/4), f.Length.Min, 1)
	if n >= f.Length.Max {
		return 0
	}
	return n
}

// Reference is a function's random inputs (FunctionInputs) and the interpreter's outputs on
// them, evaluated in the background: the evaluation of a whole model in float64 takes a
// while and needs no device, so a compile starts it before tuning and selection waits for it
// only if it is not done. A function with a run-time length is evaluated at CheckAt (f.At),
// its inputs holding that many rows; so a variant f.WithCapacity(c) with c ≥ CheckLength has
// f's reference.
type Reference struct {
	seed   int64
	done   chan struct{}
	inputs map[string]*ir.Tensor
	want   map[string]*ir.Tensor
	err    error
	// unavailable, when set, says why no reference is evaluated (NoReference): the selection
	// checks the candidates against the static extraction run on the device instead.
	unavailable string
	// started, began and ended time it for the selection's trace: started, its evaluation
	// began (after the references before it: one runs at a time), it ended.
	started, began, ended time.Time
}

// NoReference is a reference that is not evaluated, for why: a selection that finds it checks
// the candidates against its function's static extraction run on the device (without a device,
// the static extraction stands unchecked, as the static path takes it).
func NoReference(why string) *Reference {
	r := &Reference{done: make(chan struct{}), unavailable: why}
	close(r.done)
	return r
}

// ReferenceFits returns nil when the interpreter can evaluate m's functions within the host
// memory limit, else why not: the interpreter holds every parameter it reads in float64, 8
// bytes an element, but for a block-quantized weight that every op reading it reads a row at a
// time from its blocks (interp.ReadsRaw: the products and the embedding). Before it did, the
// Llama-3.1-8B Q8_0 file's references held 64 GB (a tuned compile on a machine of 24 GiB was
// killed by the kernel for want of memory); they hold its float32 norms now.
func ReferenceFits(m *ir.Model) error {
	blocks := readAsBlocks(m)
	var need uint64
	for _, p := range m.Params {
		if blocks[p.Name] {
			continue
		}
		e, ok := p.Type.Shape.CheckedElements()
		if !ok {
			need = math.MaxUint64
			break
		}
		need += 8 * uint64(e)
	}
	return hostmem.Check(fmt.Sprintf("the interpreter's reference of %s holds its parameters in float64", m.Name), need)
}

// readAsBlocks returns the block-quantized parameters of m that every op reading them reads
// from the blocks, a row at a time (interp.ReadsRaw): the interpreter never converts them whole.
func readAsBlocks(m *ir.Model) map[string]bool {
	converted := map[string]bool{}
	for _, f := range m.Functions {
		for _, n := range f.Nodes {
			for i, a := range n.Args {
				if a.Node.Op == ir.Param && a.Node.Type().DType.Quantized() && !interp.ReadsRaw(n, i) {
					converted[a.Node.Name] = true
				}
			}
		}
	}
	blocks := map[string]bool{}
	for _, p := range m.Params {
		if p.Type.DType.Quantized() && !converted[p.Name] {
			blocks[p.Name] = true
		}
	}
	return blocks
}

// referenceRate is the interpreter's float64 work per second that ReferenceTime assumes: SmolLM2's
// prefill reference (37 rows, 10 GFLOP of products) took 3.2–3.6 s on the 16 cores of the H100
// and H200 machines while the compile tuned kernels beside it, 1.7 s on this project's 2-core
// CI machine (only the products run in parallel).
const referenceRate = 3e9

// referenceConvert is the time in seconds ReferenceTime assumes the interpreter takes to convert
// one parameter element to float64 on one processor (ir.Tensor.Float64s: 2.1 ns for Q8_0, 2.6
// for Q4_K on this project's CI machine). The conversion runs on every processor; ReferenceTime
// counts at most convertProcs of them (it writes 8 bytes an element: memory, not the cores,
// bounds it beyond a few). A quantized weight read from its blocks (readAsBlocks) costs
// referenceDequant an element instead, for every evaluation: its rows are dequantized as the
// product reads them, on every processor (the 1B Q8_0 file's one-row reference took 1.2 s on the
// CI machine's 2 cores, 0.83 s of it the products at referenceRate).
const (
	referenceConvert = 2.5e-9
	referenceDequant = 1e-9
	convertProcs     = 4
)

// ReferenceTime estimates how long the interpreter takes for f's reference: two operations per
// parameter element and row checked (every weight read once a row: the products; an embedding
// table counts as one too) at referenceRate, after converting every parameter to float64 (or
// dequantizing those read as blocks). The rows are CheckAt's for a function with a run-time
// length, else the leading dimension of its first output of two or more (a fixed prefill's
// logits [seq, vocab]: seq rows; a classifier's [batch, classes]: batch).
func ReferenceTime(m *ir.Model, f *ir.Function) time.Duration {
	rows := float64(max(CheckAt(f), 1))
	if f.Length == nil && len(f.Outputs) > 0 {
		if sh := f.Outputs[0].Value.Type().Shape; sh.Rank() >= 2 && sh[0] > 0 {
			rows = float64(sh[0])
		}
	}
	blocks := readAsBlocks(m)
	var elems, convert float64
	for _, p := range m.Params {
		e := float64(p.Type.Shape.NumElements())
		elems += e
		if blocks[p.Name] {
			convert += e * referenceDequant
		} else {
			convert += e * referenceConvert
		}
	}
	procs := float64(min(goruntime.GOMAXPROCS(0), convertProcs))
	return time.Duration((2*elems*rows/referenceRate + convert/procs) * float64(time.Second))
}

// references lets one reference evaluation run at a time: each uses every core already
// (the interpreter's loops are parallel), and each holds its model's weights in float64 while it
// runs (SmolLM2: about 1 GB), which five at once multiplied.
var references = make(chan struct{}, 1)

// StartReference starts evaluating f on random inputs drawn with seed, with the parameters'
// float64 values from cache (nil: none; a compile's references share one, interp.ParamCache).
func StartReference(m *ir.Model, f *ir.Function, seed int64, cache *interp.ParamCache) *Reference {
	return StartReferenceContext(context.Background(), m, f, seed, cache)
}

// StartReferenceContext is StartReference whose evaluation stops (or does not start) once ctx
// is done, the reference then holding ctx's error: a compile's references end with it instead of
// evaluating on for nobody.
func StartReferenceContext(ctx context.Context, m *ir.Model, f *ir.Function, seed int64, cache *interp.ParamCache) *Reference {
	r := &Reference{seed: seed, done: make(chan struct{}), started: time.Now()}
	go func() {
		defer close(r.done)
		select {
		case references <- struct{}{}:
		case <-ctx.Done():
			r.err = ctx.Err()
			return
		}
		defer func() { <-references }()
		r.began = time.Now()
		defer func() { r.ended = time.Now() }()
		var at *ir.Function
		if at, r.err = checkedAt(f); r.err != nil {
			return
		}
		r.inputs = FunctionInputs(at, rand.New(rand.NewSource(seed)))
		r.want, _, r.err = interp.RunCachedContext(ctx, m, f.Name, r.inputs, nil, cache)
	}()
	return r
}

// ready reports whether the evaluation has ended.
func (r *Reference) ready() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Wait returns the inputs and the reference outputs by output name.
func (r *Reference) Wait() (inputs, want map[string]*ir.Tensor, err error) {
	<-r.done
	return r.inputs, r.want, r.err
}

// SelectResult is what happened to one candidate.
type SelectResult struct {
	SelectCandidate
	Valid  bool
	Reason string // why it is invalid: a lowering error, a load or run error, a wrong output
	// Median is the median over the rounds of the candidate's time; Ratio is the median over the
	// rounds of its time divided by the winner's time in the same round (1 for the winner).
	// All three are at the function's capacity when it has a run-time length.
	Median time.Duration
	Ratio  float64
	Times  []time.Duration // per paired round
	// ShortMedian, ShortRatio and ShortTimes are the same at Selection.Short (when it is not 0).
	ShortMedian time.Duration
	ShortRatio  float64
	ShortTimes  []time.Duration
	// Weights is the weight bytes of the candidate's plan (0 when it did not lower). The plan
	// itself is not kept: a SmolLM2 compile's 25 candidate plans held 10 GB of weights.
	Weights uint64
	// Dropped says why the rounds stopped timing it after the first DropAfter (prune); "" when
	// they did not.
	Dropped string
}

// Selection is the outcome of SelectFunction.
type Selection struct {
	Function string
	Winner   int // index into Results; -1 when no candidate is valid
	Results  []SelectResult
	Rounds   int // rounds measured (fewer than asked when the context ended)
	// Short is the run-time length at which each round also timed every candidate, beside the
	// capacity (ShortAt; 0: the function has no run-time length, or one too short for two).
	// Dim names the length, Capacity is its capacity.
	Short    int
	Dim      string
	Capacity int
	// Recorded: the selection was taken from the tuning database (measured by an earlier
	// compile), nothing was measured now.
	Recorded bool
	// Why says how the winner was decided when not by its measured time alone.
	Why string
	// Against says what the candidates were checked against when not the interpreter's
	// reference ("": the interpreter).
	Against string

	asked    int  // rounds asked for
	deadline bool // the context's deadline ended the measuring
}

// Recorded returns the record SelectFunction would take ref's selection from (opts.DB under
// opts.Key, a compile of opts.Budget) for these candidates, measuring nothing, or nil: a compile
// then needs nothing of the candidates but the winner (their kernels are not listed or tuned).
func Recorded(opts SelectOptions, ref *ir.Function, cands []SelectCandidate) *SelectionEntry {
	if recorded(opts, ref, cands) == nil {
		return nil
	}
	e, _ := opts.DB.GetSelection(opts.Key(ref))
	return e
}

// recorded returns the selection the database holds for ref when it is complete and its
// candidates are exactly cands' graphs, rebuilt for cands (nil otherwise).
func recorded(opts SelectOptions, ref *ir.Function, cands []SelectCandidate) *Selection {
	if opts.DB == nil || opts.Key == nil {
		return nil
	}
	e, ok := opts.DB.GetSelection(opts.Key(ref))
	if !ok || !e.Reusable(opts.Budget) || len(e.Candidates) != len(cands) || e.Winner < 0 || e.Winner >= len(e.Candidates) {
		return nil
	}
	byGraph := map[string]int{}
	for i, r := range e.Candidates {
		byGraph[r.Graph] = i
	}
	sel := &Selection{Function: ref.Name, Winner: -1, Rounds: e.Rounds, Recorded: true, Why: e.Why, Short: e.Short, Dim: e.Dim, Capacity: e.Capacity}
	for _, c := range cands {
		i, ok := byGraph[c.Key]
		if c.Key == "" || !ok {
			return nil
		}
		r := e.Candidates[i]
		if i == e.Winner {
			sel.Winner = len(sel.Results)
		}
		sel.Results = append(sel.Results, SelectResult{SelectCandidate: c, Valid: r.Valid, Reason: r.Reason,
			Median: r.Median, Ratio: r.Ratio, Times: append([]time.Duration(nil), r.Times...),
			ShortMedian: r.ShortMedian, ShortRatio: r.ShortRatio, ShortTimes: append([]time.Duration(nil), r.ShortTimes...)})
	}
	if w := sel.Winner; w < 0 || !sel.Results[w].Valid && !strings.HasPrefix(sel.Results[w].Reason, notChecked) {
		return nil
	}
	return sel
}

// notChecked begins the reason of a candidate the budget left unchecked.
const notChecked = "not checked"

// record stores a measured selection in the database (see SelectOptions.DB). It is complete when
// every candidate was checked and every round asked for was measured.
func record(opts SelectOptions, ref *ir.Function, sel *Selection) {
	if opts.DB == nil || opts.Key == nil || sel.Recorded || sel.Winner < 0 {
		return
	}
	e := &SelectionEntry{SelectionKey: opts.Key(ref), Winner: sel.Winner, Rounds: sel.Rounds, Why: sel.Why,
		Short: sel.Short, Dim: sel.Dim, Capacity: sel.Capacity,
		Complete: sel.Rounds >= sel.asked, Updated: time.Now().UTC().Truncate(time.Second)}
	for _, r := range sel.Results {
		if strings.HasPrefix(r.Reason, "not checked") {
			e.Complete = false
		}
		rec := SelectionRecord{Graph: r.Key, Label: r.Label, Valid: r.Valid, Reason: r.Reason, Estimated: r.Estimated,
			Median: r.Median, Ratio: r.Ratio, Times: r.Times, ShortMedian: r.ShortMedian, ShortRatio: r.ShortRatio, ShortTimes: r.ShortTimes}
		rec.Weights = r.Weights
		e.Candidates = append(e.Candidates, rec)
	}
	// An incomplete selection was cut by the budget: at its deadline, or by a check or round
	// predicted not to fit it (a cancelled compile's is not kept for reuse). A compile of the
	// same budget takes it as it stands.
	cancelled := opts.outer != nil && errors.Is(opts.outer.Err(), context.Canceled)
	if !e.Complete && (sel.deadline || opts.Budget > 0 && !cancelled) {
		e.Budget = opts.Budget
	}
	opts.DB.PutSelection(e)
}

// SelectFunction lowers each candidate (equivalent versions of ref, a function of m) with lowerFn,
// loads it on d, runs it once on random inputs of the function's signature (integer inputs get
// valid values, see FunctionInputs; state starts at zero) and compares every output with the
// interpreter's evaluation of ref; it then times the valid candidates in paired, alternating
// rounds and picks the one with the lowest median ratio to the others (ties: the earlier
// candidate, the cheaper estimate), except that a valid static extraction (SelectCandidate.Static)
// is replaced only by a candidate with evidence (Replaces). An invalid candidate is recorded with the reason, never
// chosen; it is an error only when no candidate is valid. All candidates' plans are loaded at
// once, so the device must hold k copies of the weights.
//
// ctx bounds the measuring (map the compile's budget to it): once it has ended, the remaining
// candidates are checked only until one is valid (those left are recorded "not checked"), the
// rounds measured so far decide, and with none the first valid candidate wins. The caller stops a
// cancelled compile itself (ctx.Err()).
func SelectFunction(ctx context.Context, d *runtime.Device, m *ir.Model, ref *ir.Function, cands []SelectCandidate,
	lowerFn func(fns []*ir.Function) (*plan.Plan, error), opts SelectOptions) (*Selection, error) {
	s := newSelecting(d, m, ref, cands, lowerFn, opts)
	if s.done {
		return s.sel, nil
	}
	defer s.close()
	if err := s.check(ctx, 0); err != nil || s.done {
		s.record(ctx)
		return s.sel, err
	}
	var err error
	if len(s.valid) > 1 || len(s.waiting) == 0 {
		err = s.rounds(ctx, 0)
	}
	if err == nil {
		err = s.late(ctx)
	}
	s.record(ctx)
	if err != nil {
		return nil, err
	}
	return s.sel, nil
}

// selecting is one function's selection in progress: its candidates checked (check), then timed
// (rounds), then decided (record, which also stores it in the database). SelectFunctions checks
// the candidates of every function before it times any, so that the first function, which pays
// for compiling most kernels, does not spend the rounds of all.
type selecting struct {
	d       *runtime.Device
	m       *ir.Model
	ref     *ir.Function
	cands   []SelectCandidate
	lowerFn func(fns []*ir.Function) (*plan.Plan, error)
	opts    SelectOptions
	sel     *Selection
	// done: the selection is decided (recorded in the database, or left to the static
	// extraction unchecked); no more work.
	done    bool
	exes    []*runtime.Executable
	valid   []int
	timeIns map[string][]byte
	// shortIns are the inputs at sel.Short rows (nil: the candidates are timed at the
	// capacity only).
	shortIns map[string][]byte
	static   bool
	// waiting are the candidates whose checks would compile kernels new to the device, in the
	// order of their predicted cost: they are checked after the rounds of the candidates
	// checked (late). checkOne checks one (waits: with mayWait, it would compile new kernels
	// and was put in waiting); reserve is the time its checks keep for the rounds.
	waiting []int
	// predicted is each waiting candidate's predicted check (checkCost).
	predicted map[int]time.Duration
	checkOne  func(i int, mayWait bool) (waits bool)
	reserve   time.Duration
	lateCtx   context.Context // bounds the late checks (nil before)
	// round is the wall time of the last paired round and roundOf the candidates it timed;
	// timed: rounds ran (before the late checks).
	round   time.Duration
	roundOf int
	timed   bool
	// times are the paired rounds so far, times[length][candidate][round] (rounds adds to them;
	// nil: none yet).
	times [][][]time.Duration
	// restored: late put back the rounds from before its checks (too few rounds after them),
	// so times no longer match the selection and no more rounds are added to it.
	restored bool
	// dropped are the valid candidates no longer timed: clearly slower in every round so far
	// (prune). A dropped candidate's times are those of the first rounds.
	dropped map[int]bool
	// runs is the valid candidates' check runs added up: what SelectFunctions orders the
	// functions' first rounds by.
	runs time.Duration
}

func newSelecting(d *runtime.Device, m *ir.Model, ref *ir.Function, cands []SelectCandidate,
	lowerFn func(fns []*ir.Function) (*plan.Plan, error), opts SelectOptions) *selecting {
	if opts.Rounds <= 0 {
		opts.Rounds = 5
	}
	if opts.Timer == nil {
		opts.Timer = ExecTiming{Options: RoundTiming}
	}
	// The candidates' kernels are timed, not their outputs' writes to the host, the same for all
	// (runtime.LoadOptions.OutputsOnDevice): a round of SmolLM2's scoring function, whose logits
	// are 100 MB a run at 512 rows, took 0.68 s on the H100 in session 21.
	opts.Load.OutputsOnDevice = true
	if opts.refs == nil {
		opts.refs = &sync.Map{}
	}
	if opts.Tolerance <= 0 {
		opts.Tolerance = 1e-3
	}
	if opts.checks == nil {
		opts.checks, opts.runs, opts.perKernel = &meanTime{}, &meanTime{}, &meanTime{}
	}
	s := &selecting{d: d, m: m, ref: ref, cands: cands, lowerFn: lowerFn, opts: opts, sel: &Selection{Function: ref.Name, Winner: -1},
		exes: make([]*runtime.Executable, len(cands)), static: slices.ContainsFunc(cands, func(c SelectCandidate) bool { return c.Static })}
	if rec := recorded(opts, ref, cands); rec != nil {
		s.sel, s.done = rec, true
	}
	return s
}

// close closes the candidates' executables (after abandoned work on them, when there is any).
func (s *selecting) close() {
	closeAll := func() {
		for _, e := range s.exes {
			if e != nil {
				e.Close()
			}
		}
	}
	if s.opts.Guard.Abandoned() {
		go func() { s.opts.Guard.Wait(); closeAll() }() // a timing may still run on one
		return
	}
	closeAll()
}

// record stores the selection in the database (a recorded one is not stored again).
func (s *selecting) record(ctx context.Context) {
	if s.sel.Recorded {
		return
	}
	s.sel.deadline = s.sel.deadline || errors.Is(ctx.Err(), context.DeadlineExceeded)
	record(s.opts, s.ref, s.sel)
}

// check checks the candidates against the interpreter while ctx (the selection's) lasts, each
// predicted by the kernels it would compile: the static extraction while any time is left, the
// others only when reserve (the rounds' time) would be left after them.
func (s *selecting) check(ctx context.Context, reserve time.Duration) error {
	opts, sel, cands, ref := s.opts, s.sel, s.cands, s.ref
	outer := cmp.Or(opts.outer, ctx)
	var err error
	r := opts.References[ref]
	if r == nil || r.seed != opts.Seed && r.unavailable == "" {
		r = StartReference(s.m, ref, opts.Seed, nil)
	}
	// Without the interpreter's reference (the model's weights in float64 would not fit the
	// host, or its evaluation would outlast the budget), the candidates are checked against the
	// static extraction run on the device: what the static path would run, built of kernels the
	// tuner checked one by one against the interpreter. A candidate that disagrees with it is
	// rejected; without a device, the static extraction stands unchecked.
	onDevice := -1
	if r.unavailable != "" && !s.static {
		return fmt.Errorf("select %s: no reference to check the candidates against (%s), and no static extraction among them", ref.Name, r.unavailable)
	}
	if r.unavailable != "" {
		if s.d == nil && opts.Open == nil {
			s.sel, s.done = uncheckedStatic(sel, cands, r.unavailable, "no reference to check it against"), true
			return nil
		}
		onDevice = slices.IndexFunc(cands, func(c SelectCandidate) bool { return c.Static })
		sel.Against = fmt.Sprintf("the static extraction (candidate %d) run on the device, within twice the tolerance (no interpreter's reference: %s)", onDevice, r.unavailable)
		if r, err = deviceReference(ref, opts.Seed); err != nil {
			return fmt.Errorf("select %s: %w", ref.Name, err)
		}
		// Both sides carry the device's rounding, each within the tolerance of the exact result.
		opts.tolScale = 2
	}
	waited := time.Now()
	select {
	case <-r.done:
		if !r.began.IsZero() {
			opts.trace("select: %s: its reference waited %v for others, evaluated in %v, and was waited for %v", ref.Name,
				r.began.Sub(r.started).Round(time.Millisecond), r.ended.Sub(r.began).Round(time.Millisecond), time.Since(waited).Round(time.Millisecond))
		}
	case <-outer.Done():
		// The interpreter has not finished by the deadline: nothing can be checked, and the
		// static extraction (the static path's choice) stands. Without one, the selection
		// waits for the reference and checks until a candidate is valid.
		if s.static {
			s.sel, s.done = uncheckedStatic(sel, cands, "the interpreter's reference was not ready before the budget ran out", "the budget ran out"), true
			return nil
		}
	}
	inputs, want, err := r.Wait()
	if err != nil {
		return fmt.Errorf("select %s: reference: %w", ref.Name, err)
	}
	// want: nil until the static extraction has run (onDevice).
	if s.d == nil {
		if opts.Open == nil {
			return fmt.Errorf("select %s: no device", ref.Name)
		}
		if s.d, err = opts.Open(); err != nil {
			return fmt.Errorf("select %s: %w", ref.Name, err)
		}
	}
	ins := map[string][]byte{}
	for name, x := range inputs {
		ins[name] = deviceBytes(x)
	}
	// Candidates are timed at the capacity (what the function costs at its longest) and, for
	// a function with a run-time length, at a short length (ShortAt: what a prompt costs);
	// random inputs need no reference.
	s.timeIns = ins
	if ref.Length != nil {
		s.timeIns = map[string][]byte{}
		for name, x := range FunctionInputs(ref, rand.New(rand.NewSource(opts.Seed))) {
			s.timeIns[name] = deviceBytes(x)
		}
		s.sel.Dim, s.sel.Capacity = ref.Length.Dim, ref.Length.Max
		if n := ShortAt(ref); n > 0 {
			if at, err := ref.At(n); err == nil {
				s.shortIns = map[string][]byte{}
				for name, x := range FunctionInputs(at, rand.New(rand.NewSource(opts.Seed))) {
					s.shortIns[name] = deviceBytes(x)
				}
				s.sel.Short = n
			} else {
				opts.trace("select: %s is timed at its capacity only: %v", ref.Name, err)
			}
		}
	}
	// Once ctx has ended, candidates are checked only until one is valid, so that a spent
	// budget still yields a checked winner. A candidate that lowers to the program of an
	// earlier one (other graphs, the same kernels and dispatches) is that program: it is
	// neither run nor timed again.
	anyValid, static := false, s.static
	programs := map[string]int{}
	valids := 0
	// Checks go in the candidates' order, except that once one is valid, a candidate whose check
	// would compile kernels new to the device waits (s.waiting) until the candidates checked
	// have been timed (late): a check that only runs costs milliseconds, one new kernel up to
	// seconds, and no prediction knows what the driver's disk cache holds (Whisper's attention
	// with K transposed took 10 s on lavapipe, predicted 0.2 s, and spent the rounds of all).
	// Those waiting then go cheapest predicted first.
	results := make([]SelectResult, len(cands))
	predicted := map[int]time.Duration{}
	s.predicted = predicted
	s.reserve = reserve
	s.checkOne = func(i int, mayWait bool) (waits bool) {
		c := cands[i]
		r := SelectResult{SelectCandidate: c}
		switch {
		case ctx.Err() != nil && anyValid:
			r.Reason = notChecked + ": " + ctx.Err().Error()
		case !c.Static && anyValid && wouldOverrun(cmp.Or(s.lateCtx, ctx), checkCost(opts, 0, nil, false)+s.reserve):
			// (The least a check costs: one that compiles nothing new. Once lowered, the check
			// refuses what its new kernels would not fit. The mean of the checks so far refused
			// candidates nothing had priced: on a cold driver cache the static extractions'
			// checks compile every kernel of their functions, and their mean, 3.2 s for
			// tinyllama on lavapipe, exceeded the 2.6 s predicted for prefill@1's waiting
			// candidate plus the third of its share kept for the rounds.)
			r.Reason = notChecked + ": the time left is kept for timing the candidates checked"
		case opts.Guard.Abandoned():
			r.Reason = notChecked + ": the budget ran out while the device compiled another candidate's kernels"
		case want == nil && i != onDevice:
			r.Reason = notChecked + ": its reference, the static extraction, did not run on the device"
		case static && (outer.Err() != nil || wouldOverrun(outer, opts.checks.mean())):
			// A check (lowering, the driver compiling the pipelines not made yet, a run) is
			// not started past the budget: with none valid yet, the static extraction stands
			// unchecked, as the static path takes it.
			r.Reason = notChecked + ": the budget ran out"
		default:
			lowerFn := s.lowerFn
			lp, prefetched := opts.loweredProgram(c.Fn)
			if prefetched {
				if j, ok := programs[lp.key]; ok {
					// The prefetch lowered it already: the program of candidate j, which is
					// neither lowered, nor run, nor timed again (on the H100, 18 of SmolLM2's
					// checks lowered their candidates, 0.9 s of the selection's 8.5, only to
					// find an earlier one's program).
					r.Weights, r.Reason = lp.weights, sameProgram(j)
					opts.trace("select: checked %s candidate %d: %s (as the prefetch lowered it)", ref.Name, i, r.Reason)
					results[i] = r
					return false
				}
				if lp.plan != nil {
					// Not lowered again: on the H100 lowering took 30–100 ms of SmolLM2's
					// checks of 70–170 ms.
					lowerFn = func([]*ir.Function) (*plan.Plan, error) { return lp.plan, nil }
				}
			}
			opts.trace("select: check %s candidate %d (%s)", ref.Name, i, c.Label)
			var prog, pricing string
			t0 := time.Now()
			fresh := 0
			var ck checked
			finished := opts.Guard.Run(func() {
				ck = checkCandidate(context.WithoutCancel(ctx), s.d, s.m, ref, c.Fn, want, ins, lowerFn, opts,
					func(key string, p *plan.Plan) string {
						if j, ok := programs[key]; ok {
							return sameProgram(j)
						}
						if opts.NewKernels != nil {
							fresh = opts.NewKernels(p)
						}
						need := checkCost(opts, fresh, p, !c.Static && anyValid)
						if mayWait && !c.Static && anyValid && fresh > 0 {
							predicted[i] = need
							if opts.Trace != nil && opts.CompilePricing != nil {
								pricing = opts.CompilePricing(p)
							}
							return waitCheck
						}
						reserve := s.reserve
						// The kernels it would compile are not started past the budget
						// (the static extraction, or the first candidate checked without
						// one, is), nor, for another candidate, into the rounds' time.
						bound := outer
						if s.lateCtx != nil {
							bound = s.lateCtx // a late check: its function's share
						}
						if (static || anyValid) && wouldOverrun(bound, need) {
							return fmt.Sprintf("%s: the budget ran out (it would compile %d kernels)", notChecked, fresh)
						}
						if !c.Static && anyValid && wouldOverrun(bound, need+reserve) {
							return fmt.Sprintf("%s: it would compile %d kernels (predicted %v) into the time kept for timing the %d candidates valid (%v)",
								notChecked, fresh, need.Round(time.Millisecond), valids, reserve.Round(time.Millisecond))
						}
						return ""
					})
				if ck.exe != nil && opts.Guard.Abandoned() {
					ck.exe.Close() // checked past the deadline: nobody waits for it
				}
			})
			if finished && ck.reason == waitCheck {
				if pricing != "" {
					pricing = ": " + pricing
				}
				opts.trace("select: %s candidate %d waits for the rounds: it would compile %d kernels (predicted %v%s)", ref.Name, i, fresh, predicted[i].Round(time.Millisecond), pricing)
				r.Reason = fmt.Sprintf("%s: it would compile %d kernels (predicted %v), so it waited for the rounds of the candidates checked, and none was left for it",
					notChecked, fresh, predicted[i].Round(time.Millisecond))
				results[i] = r
				return true
			}
			if prefetched && lp.plan != nil {
				lp.plan = nil // checked: the selection needs only its key now
				opts.lowered.Store(c.Fn, lp)
			}
			if !finished {
				r.Reason = notChecked + ": the budget ran out while the device compiled its kernels"
				opts.trace("select: %s candidate %d abandoned at the budget's deadline", ref.Name, i)
				results[i] = r
				return false
			}
			s.exes[i], r.Weights, prog, r.Reason = ck.exe, ck.weights, ck.prog, ck.reason
			if r.Reason == "" {
				s.runs += ck.ran
				programs[prog] = i
				if i == onDevice {
					want = ck.outs // the reference of the others
				}
			}
			if !strings.HasPrefix(r.Reason, SameProgram) && !strings.HasPrefix(r.Reason, notChecked) {
				// A first upload of the weights is not what the next checks cost: they share
				// them (on the H100 the 8B's took 3.2 s of a 3.4 s check, and the checks' mean
				// then refused every other function's check).
				opts.addCheck(time.Since(t0)-ck.upload, fresh)
			}
			opts.trace("select: checked %s candidate %d: %s", ref.Name, i, cmp.Or(r.Reason, "valid"))
		}
		r.Valid = r.Reason == ""
		anyValid = anyValid || r.Valid
		if r.Valid {
			valids++
		}
		results[i] = r
		return false
	}
	if onDevice >= 0 {
		s.checkOne(onDevice, false)
	}
	for i := range cands {
		if i != onDevice && s.checkOne(i, true) {
			s.waiting = append(s.waiting, i)
		}
	}
	sort.SliceStable(s.waiting, func(a, b int) bool { return predicted[s.waiting[a]] < predicted[s.waiting[b]] })
	sel.Results = results // checkOne writes a late check's result here
	for i, r := range sel.Results {
		if r.Valid {
			s.valid = append(s.valid, i)
		}
	}
	if len(s.valid) == 0 {
		var why []string
		checked := false
		for i, r := range sel.Results {
			why = append(why, fmt.Sprintf("candidate %d: %s", i, r.Reason))
			checked = checked || !strings.HasPrefix(r.Reason, notChecked)
		}
		if !checked && static {
			s.sel, s.done = uncheckedStatic(sel, cands, "the budget ran out before a candidate was checked", "the budget ran out"), true
			return nil
		}
		return fmt.Errorf("select %s: no candidate is valid: %s", ref.Name, strings.Join(why, "; "))
	}
	return nil
}

// waitCheck is what a check's admission returns for a candidate that waits for the cheaper
// checks (never a candidate's reason).
const waitCheck = "\x00wait"

// addCheck records a check of dt that compiled fresh kernels new to the device: with none, as
// what a check costs beside its compiles (runs); else what it took beyond that, per kernel.
// Before any check that compiled nothing, a check's time is split evenly between its kernels
// and its run.
func (o SelectOptions) addCheck(dt time.Duration, fresh int) {
	o.checks.add(dt)
	if fresh == 0 {
		o.runs.add(dt)
		return
	}
	run := o.runs.mean()
	if o.runs.n == 0 {
		run = dt / time.Duration(fresh+1)
	}
	o.perKernel.add(max(dt-run, 0) / time.Duration(fresh))
}

// checkCost predicts a check that compiles fresh kernels new to the device (plan p): the mean
// of the checks that compiled nothing plus fresh times the mean a kernel added to the checks
// that compiled some (KernelCost for either before any was measured). When risky (another
// candidate is valid, so the check spends the rounds' time), it is at least the run plus
// CompileCost's prediction from the tuner's first runs of each kernel's op: a mean over the
// kernels of earlier checks, most of them small or in the driver's disk cache, put Whisper's
// attention with K transposed at 0.2 s, and it took 10 s on lavapipe.
//
// (Until 2026-12-06 a kernel cost as much as a whole check that compiled nothing, the run
// counted as one more kernel: on the H100 a check that ran 0.27 s and one that compiled 2
// kernels took 0.18 s, so SmolLM2's graph as written, 9 kernels, was predicted at 4.4 s and
// never checked within the default budget; its prefill had 1 paired round.)
func checkCost(opts SelectOptions, fresh int, p *plan.Plan, risky bool) time.Duration {
	per := opts.perKernel.mean()
	if opts.perKernel.n == 0 {
		per = opts.KernelCost
	}
	run := opts.runs.mean()
	if opts.runs.n == 0 {
		run = cmp.Or(opts.perKernel.mean(), opts.KernelCost)
	}
	need := run + time.Duration(fresh)*per
	if risky && fresh > 0 && opts.CompileCost != nil {
		need = max(need, run+opts.CompileCost(p))
	}
	return need
}

// rounds times the valid candidates in paired, alternating rounds while ctx lasts (a round is
// not started when the last one would not fit), up to opts.Rounds in all and at most limit more
// (0: no limit), then decides the winner from every round so far. A round of a function with a
// short length (sel.Short) times every candidate at it and at the capacity.
func (s *selecting) rounds(ctx context.Context, limit int) error {
	opts, sel, cands, valid := s.opts, s.sel, s.cands, s.valid
	s.timed = true
	// lengths[l] are the inputs of timed length l (0: the capacity, 1: sel.Short);
	// times[l][candidate][round].
	lengths := []map[string][]byte{s.timeIns}
	if s.shortIns != nil {
		lengths = append(lengths, s.shortIns)
	}
	if s.times == nil {
		s.times = make([][][]time.Duration, len(lengths))
		for l := range s.times {
			s.times[l] = make([][]time.Duration, len(cands))
		}
	}
	times := s.times
	// One valid candidate of several (the others invalid or unchecked) has nothing to be paired
	// with: one round gives its measured time.
	asked := opts.Rounds
	if len(valid) == 1 && len(cands) > 1 {
		asked = 1
	}
	var lastRound time.Duration // the last paired round's time, when this selection has one
	if sel.Rounds > 0 {
		lastRound = s.round
	}
	// ctx (the function's share) decides whether a round starts; once started it runs to its
	// end within the selection's time (tctx), since an interrupted round is dropped: on the
	// H100 SmolLM2's prefill (six candidates at two lengths, 0.31 s a round) had 0.24 s of its
	// share left after its checks, and its round was cut and thrown away in four compiles of
	// four (session 20).
	tctx := cmp.Or(opts.outer, ctx)
	for n := 0; sel.Rounds < asked && (limit == 0 || n < limit) && ctx.Err() == nil && !wouldOverrun(ctx, lastRound); n++ {
		round := sel.Rounds
		t0 := time.Now()
		order := s.contenders()
		if round%2 == 1 {
			for a, b := 0, len(order)-1; a < b; a, b = a+1, b-1 {
				order[a], order[b] = order[b], order[a]
			}
		}
		rows := make([]map[int]time.Duration, len(lengths))
		opts.trace("select: %s round %d", s.ref.Name, round)
		complete := true
	timing:
		for l, ins := range lengths {
			rows[l] = map[int]time.Duration{}
			for _, i := range order {
				var t time.Duration
				var err error
				timer := opts.Timer
				if et, ok := timer.(ExecTiming); ok && len(times[l][i]) > 0 {
					et.Options.Reps = roundReps(et.Options.Reps, times[l][i][len(times[l][i])-1])
					timer = et
				}
				if !opts.Guard.Run(func() { t, err = timer.TimePlan(tctx, s.exes[i], cands[i].Fn.Name, ins, i) }) {
					complete = false
					break timing // abandoned at the deadline: the round is not paired
				}
				if err != nil {
					if tctx.Err() != nil {
						complete = false
						break timing
					}
					return fmt.Errorf("select %s: time candidate %d: %w", s.ref.Name, i, err)
				}
				rows[l][i] = t
			}
		}
		if !complete {
			break // an interrupted round is not paired; drop it
		}
		for l, row := range rows {
			for i, t := range row {
				times[l][i] = append(times[l][i], t)
			}
		}
		sel.Rounds++
		lastRound = time.Since(t0)
		s.round, s.roundOf = lastRound, len(order)
		s.prune(len(lengths))
	}
	sel.deadline = errors.Is(ctx.Err(), context.DeadlineExceeded)
	for i := range sel.Results {
		sel.Results[i].Times = times[0][i]
		if len(lengths) > 1 {
			sel.Results[i].ShortTimes = times[1][i]
		}
	}
	sel.asked = opts.Rounds
	if sel.Rounds == 0 {
		// Nothing measured: the static choice stands (when valid), not a candidate that only
		// an extraction estimate put first.
		sel.Winner = valid[0]
		for _, i := range valid {
			if cands[i].Static {
				sel.Winner = i
				break
			}
		}
		sel.Results[sel.Winner].Ratio = 1
		sel.Why = "no paired round was measured before the budget ran out: the static choice stands"
		return nil
	}
	// Each candidate's paired figure: at each length, the median over rounds of its time over
	// the round's fastest time; its worst over the lengths. The lowest wins, and ratios are then
	// restated against the winner.
	// A dropped candidate (prune) is not among them: its ratios are restated over the rounds
	// that timed it.
	sel.Winner, sel.Why = -1, ""
	score := s.scores(len(lengths))
	for _, i := range valid {
		sel.Results[i].Median = medianD(times[0][i])
		if len(lengths) > 1 {
			sel.Results[i].ShortMedian = medianD(times[1][i])
		}
		if v, ok := score[i]; ok && (sel.Winner < 0 || v < score[sel.Winner]) {
			sel.Winner = i
		}
	}
	// The static extraction is the default: another candidate replaces it only on evidence at
	// every length timed (ReplacesAt); of those with evidence, the lowest paired figure wins.
	if base := s.staticProgram(); base >= 0 && sel.Winner != base {
		best := sel.Winner
		sel.Winner = base
		var at []LengthTimes
		for _, i := range valid {
			if i == base || s.dropped[i] {
				continue
			}
			at = at[:0]
			for l := range lengths {
				n := sel.Capacity
				if l == 1 {
					n = sel.Short
				}
				at = append(at, LengthTimes{Dim: sel.Dim, N: n, Cand: times[l][i], Base: times[l][base]})
			}
			ok, why := ReplacesAt(at)
			if ok && (sel.Winner == base || score[i] < score[sel.Winner]) {
				sel.Winner = i
				sel.Why = fmt.Sprintf("candidate %d replaced the static extraction: %s", i, why)
			}
			if i == best && sel.Winner == base {
				sel.Why = fmt.Sprintf("kept the static extraction over candidate %d: %s", i, why)
			}
		}
	}
	for _, i := range valid {
		for l := range lengths {
			rs := make([]float64, len(times[l][i]))
			for r := range rs {
				rs[r] = float64(times[l][i][r]) / float64(max(times[l][sel.Winner][r], 1))
			}
			if l == 0 {
				sel.Results[i].Ratio = medianF(rs)
			} else {
				sel.Results[i].ShortRatio = medianF(rs)
			}
		}
	}
	return nil
}

// DropAfter and DropRatio decide when a candidate is no longer timed: after DropAfter paired
// rounds in each of which, at every length, it took at least DropRatio times the round's fastest
// (or was within TwinRatio of a candidate as fast or faster: twin).
// A round of SmolLM2's scoring function (six candidates at two lengths) took 0.58 s on the
// H100, and the default budget gave it 1-2 rounds (session 20); a candidate that far behind
// does not win on the rounds left, and not timing it leaves them to those that may.
const (
	DropAfter = 2
	DropRatio = 1.25
)

// contenders are the valid candidates a round times: those not dropped.
func (s *selecting) contenders() []int {
	var c []int
	for _, i := range s.valid {
		if !s.dropped[i] {
			c = append(c, i)
		}
	}
	return c
}

// scores are the contenders' paired figures: at each length, the median over the rounds of the
// candidate's time over the round's fastest time; its worst over the lengths.
func (s *selecting) scores(lengths int) map[int]float64 {
	c := s.contenders()
	score := map[int]float64{}
	for _, i := range c {
		for l := range lengths {
			rs := make([]float64, s.sel.Rounds)
			for r := range rs {
				rs[r] = float64(s.times[l][i][r]) / float64(max(s.fastest(l, r), 1))
			}
			score[i] = max(score[i], medianF(rs))
		}
	}
	return score
}

// fastest is the least time of round r at length l among the candidates that round timed.
func (s *selecting) fastest(l, r int) time.Duration {
	f := time.Duration(-1)
	for _, t := range s.times[l] {
		if r < len(t) && (f < 0 || t[r] < f) {
			f = t[r]
		}
	}
	return f
}

// prune drops, after DropAfter rounds, each contender that took at least DropRatio times the
// fastest in every round at every length, unless it runs the static extraction's program (the
// baseline a replacement is judged against) or has the best paired figure; two contenders at
// least are kept.
func (s *selecting) prune(lengths int) {
	if s.sel.Rounds < DropAfter {
		return
	}
	c := s.contenders()
	score := s.scores(lengths)
	best := -1
	for _, i := range c {
		if best < 0 || score[i] < score[best] {
			best = i
		}
	}
	base := s.staticProgram()
	left := len(c)
	for _, i := range c {
		if left <= 2 || i == base || i == best {
			continue
		}
		slow := s.eachRound(lengths, func(l, r int) bool {
			return float64(s.times[l][i][r]) >= DropRatio*float64(s.fastest(l, r))
		})
		why := ""
		if slow {
			why = fmt.Sprintf("at least %.2f times the fastest in each", DropRatio)
		} else if j := s.twin(c, i, lengths, score); j >= 0 {
			why = fmt.Sprintf("within %.0f%% of candidate %d, as fast or faster, in each", 100*TwinRatio, j)
		}
		if why != "" {
			if s.dropped == nil {
				s.dropped = map[int]bool{}
			}
			s.dropped[i] = true
			s.sel.Results[i].Dropped = why
			left--
			s.opts.trace("select: %s: candidate %d dropped after %d rounds: %s", s.ref.Name, i, s.sel.Rounds, why)
		}
	}
}

// TwinRatio is how close two candidates' times must be, at every length in each of the first
// DropAfter rounds, for the slower to be dropped as the faster's twin (prune): the noise a
// candidate must beat to replace the static extraction (2·Noise, Replaces), so that the rounds
// could not tell the two apart, and keeping the faster loses at most that. On the H100 four of
// SmolLM2's six scoring candidates ran within 1.3% of each other (×0.718–0.727 of the static
// extraction), and the six made a round of 0.36 s that the default budget timed once in half
// the compiles (session 22).
const TwinRatio = 2 * Noise

// twin returns a contender (of c) other than i, not dropped, whose paired figure is as good as
// i's or better and whose time i's was within TwinRatio of at every length in each round so
// far; -1 when there is none.
func (s *selecting) twin(c []int, i, lengths int, score map[int]float64) int {
	for _, j := range c {
		if j == i || s.dropped[j] || score[j] > score[i] {
			continue
		}
		near := s.eachRound(lengths, func(l, r int) bool {
			return math.Abs(float64(s.times[l][i][r])/float64(max(s.times[l][j][r], 1))-1) <= TwinRatio
		})
		if near {
			return j
		}
	}
	return -1
}

// eachRound reports whether ok holds at every timed length l in each paired round r so far.
func (s *selecting) eachRound(lengths int, ok func(l, r int) bool) bool {
	for l := range lengths {
		for r := range s.sel.Rounds {
			if !ok(l, r) {
				return false
			}
		}
	}
	return true
}

// late checks the candidates that waited for the rounds (s.waiting, cheapest predicted first)
// while ctx lasts. No such check starts before the valid candidates, when there are two or
// more, have been timed: what it costs is not known (a kernel in the driver's disk cache takes
// milliseconds, one not there seconds), and the rounds measured stand whatever it takes. Each
// starts only when its predicted check leaves the time of EvidenceRounds paired rounds of the
// candidates valid and itself (at the last round's time per candidate). When any is valid,
// the valid candidates are timed again together, and those rounds decide when there are at
// least EvidenceRounds of them (or as many as before); else the rounds before stand and the
// late candidate stays untimed (the selection's Why says so).
func (s *selecting) late(ctx context.Context) error {
	if s.done {
		return nil
	}
	// last is the selection as the last rounds left it (nil: none ran).
	type measured struct {
		sel   Selection
		valid []int
	}
	var last *measured
	snapshot := func() {
		last = &measured{sel: *s.sel, valid: slices.Clone(s.valid)}
		last.sel.Results = slices.Clone(s.sel.Results)
	}
	retime := func() error {
		s.sel.Winner, s.sel.Rounds, s.sel.Why, s.times, s.dropped = -1, 0, "", nil, nil
		s.valid = s.valid[:0]
		for i, r := range s.sel.Results {
			s.sel.Results[i].Dropped = ""
			if r.Valid {
				s.valid = append(s.valid, i)
			}
		}
		return s.rounds(ctx, EvidenceRounds) // the rest with the time left (topUpRounds)
	}
	if s.timed {
		snapshot()
	}
	s.lateCtx = ctx
	// since: the candidates checked after the last rounds; checked: those of them valid.
	var since, checked []int
	reserve := func() {
		// Untimed (one candidate was valid): a third of the time left, as for the checks
		// before the rounds.
		s.reserve = 0
		if dl, ok := ctx.Deadline(); ok {
			s.reserve = time.Until(dl) / 3
		}
		if s.roundOf > 0 {
			s.reserve = s.evidenceTime(len(s.valid) + len(checked) + 1)
		}
	}
	for _, i := range s.waiting {
		if ctx.Err() != nil {
			break // each keeps the reason it waited with
		}
		reserve()
		// Before the valid candidates are timed, a candidate whose kernels were made while it
		// waited (by the prefetch, which lowered it too) is checked at once: its check costs
		// what a run does, and the rounds come after it. On the H100 SmolLM2's prefill@8 timed
		// three rounds of two candidates, then checked two more in 30 ms and timed three rounds
		// again (session 22). Without a prefetch (a CPU device) the kernels are not made
		// meanwhile, and asking would only lower the candidate twice.
		waits := true
		if last == nil && len(s.valid)+len(checked) > 1 {
			if waits = s.opts.lowered == nil || s.checkOne(i, true); waits {
				if err := retime(); err != nil {
					return err
				}
				snapshot()
				since, checked = since[:0], checked[:0]
				reserve()
			}
		}
		if waits {
			s.checkOne(i, false)
		}
		since = append(since, i)
		if s.sel.Results[i].Valid {
			checked = append(checked, i)
		}
	}
	if len(checked) == 0 && last != nil {
		return nil
	}
	if err := retime(); err != nil {
		return err
	}
	if last == nil || s.sel.Rounds >= min(EvidenceRounds, last.sel.Rounds) {
		return nil
	}
	// The rounds before stand; the candidates checked since stay valid and untimed.
	cur := s.sel.Results
	*s.sel, s.valid, s.restored = last.sel, last.valid, true
	s.sel.deadline = s.sel.deadline || errors.Is(ctx.Err(), context.DeadlineExceeded)
	for _, i := range since {
		r := cur[i]
		r.Times, r.ShortTimes, r.Median, r.ShortMedian, r.Ratio, r.ShortRatio = nil, nil, 0, 0, 0, 0
		s.sel.Results[i] = r
	}
	var late []string
	for _, i := range checked {
		late = append(late, fmt.Sprint(i))
	}
	s.sel.Why = strings.TrimPrefix(s.sel.Why+"; ", "; ") + fmt.Sprintf("candidate %s checked valid after the rounds, with too little time left to time it in %d paired rounds", strings.Join(late, ", "), EvidenceRounds)
	return nil
}

// lateNeed predicts the time late needs for the cheapest waiting check and the paired rounds
// after it: the check plus EvidenceRounds rounds of the candidates valid and itself at the last
// round's time per candidate, or, untimed, 1.6 times the check (late keeps a third of its time
// for the rounds then, and the time passes while it starts). Zero when nothing waits.
func (s *selecting) lateNeed() time.Duration {
	if len(s.waiting) == 0 {
		return 0
	}
	check := s.predicted[s.waiting[0]]
	if s.roundOf > 0 {
		return check + s.evidenceTime(len(s.valid)+1)
	}
	return check * 8 / 5
}

// evidenceTime is the time of EvidenceRounds paired rounds of n candidates at the last round's
// time per candidate (rounds ran: s.roundOf > 0).
func (s *selecting) evidenceTime(n int) time.Duration {
	return time.Duration(EvidenceRounds) * s.round / time.Duration(s.roundOf) * time.Duration(n)
}

// staticProgram returns the valid candidate that runs the static extraction's program (the
// static candidate itself, or the earlier one whose program it is), or -1.
func (s *selecting) staticProgram() int {
	for i, c := range s.cands {
		if !c.Static || i >= len(s.sel.Results) {
			continue
		}
		r := s.sel.Results[i]
		if r.Valid {
			return i
		}
		var j int
		if rest, ok := strings.CutPrefix(r.Reason, SameProgram); ok {
			if _, err := fmt.Sscanf(rest, "%d", &j); err == nil && j >= 0 && j < len(s.sel.Results) && s.sel.Results[j].Valid {
				return j
			}
		}
		return -1
	}
	return -1
}

// EvidenceRounds is the fewest paired rounds on which a candidate may replace the static
// extraction. On the H200, SmolLM2's prefill swapped its static extraction for the graph as
// written on one cold round (16.3 ms against 14.6 ms, four times the real 3.5 ms) and lost 9.6%
// on 40 held-out pairs (0 wins of 40): one round is no evidence.
const EvidenceRounds = 3

// Replaces reports whether a candidate timed cand[r] in paired round r (r < len(base)) replaces
// the static extraction, timed base[r] in the same round, and says why or why not. It does when
//   - at least EvidenceRounds paired rounds were measured,
//   - it was faster in all of them but at most one in five (3 of 3, 4 of 4, 4 of 5, 8 of 10), and
//   - its gain, one minus the median of its per-round ratios to the static extraction, exceeds
//     the rounds' own noise: twice the median absolute deviation of those ratios, and at least
//     twice Noise (2%).
func Replaces(cand, base []time.Duration) (bool, string) {
	n := min(len(cand), len(base))
	if n < EvidenceRounds {
		rounds := "rounds are"
		if n == 1 {
			rounds = "round is"
		}
		return false, fmt.Sprintf("%d paired %s no evidence (%d needed)", n, rounds, EvidenceRounds)
	}
	ratios := make([]float64, n)
	faster := 0
	for r := range n {
		ratios[r] = float64(cand[r]) / float64(max(base[r], 1))
		if cand[r] < base[r] {
			faster++
		}
	}
	need := n - n/5
	if faster < need {
		return false, fmt.Sprintf("faster in %d of %d paired rounds (%d needed)", faster, n, need)
	}
	med := medianF(ratios)
	dev := make([]float64, n)
	for r, x := range ratios {
		dev[r] = math.Abs(x - med)
	}
	noise := max(2*medianF(dev), 2*Noise)
	if gain := 1 - med; gain <= noise {
		return false, fmt.Sprintf("faster in %d of %d paired rounds by %.1f%%, within the rounds' noise (%.1f%%)", faster, n, 100*gain, 100*noise)
	}
	return true, fmt.Sprintf("faster in %d of %d paired rounds by %.1f%% (the rounds' noise: %.1f%%)", faster, n, 100*(1-med), 100*noise)
}

// LengthTimes are the paired rounds of a candidate (Cand) and the static extraction (Base) at
// one timed length: N rows of the run-time length Dim (N = 0: the function has none).
type LengthTimes struct {
	Dim        string
	N          int
	Cand, Base []time.Duration
}

// ReplacesAt reports whether a candidate replaces the static extraction when the rounds timed
// both at several lengths (a function with a run-time length: its capacity and ShortAt): only
// when it does by Replaces at every one of them, so that a graph that wins at the capacity
// and loses on a short prompt (or the reverse) never replaces the static one. It says why, length
// by length.
func ReplacesAt(at []LengthTimes) (bool, string) {
	if len(at) == 0 {
		return false, "no length was timed"
	}
	var whys []string
	for _, x := range at {
		ok, why := Replaces(x.Cand, x.Base)
		if x.N > 0 && len(at) > 1 {
			why = fmt.Sprintf("at %s=%d: %s", cmp.Or(x.Dim, "length"), x.N, why)
		}
		if !ok {
			return false, why
		}
		whys = append(whys, why)
	}
	return true, strings.Join(whys, "; ")
}

// uncheckedStatic makes sel's winner the static candidate (else the first) without a check: the
// budget left no time to check any. It is what the static path would run; the plan's kernels
// are still the tuner's, each checked when it was measured.
func uncheckedStatic(sel *Selection, cands []SelectCandidate, why, reason string) *Selection {
	sel.Results = sel.Results[:0]
	sel.Winner = 0
	for i, c := range cands {
		sel.Results = append(sel.Results, SelectResult{SelectCandidate: c, Reason: notChecked + ": " + reason})
		if c.Static {
			sel.Winner = i
		}
	}
	sel.Results[sel.Winner].Ratio = 1
	sel.Why = why + ": the static extraction stands unchecked, as the static path takes it"
	return sel
}

func (m *meanTime) mean() time.Duration {
	if m == nil || m.n == 0 {
		return 0
	}
	return m.sum / time.Duration(m.n)
}

// SameProgram begins the reason a candidate is not run: it lowers to the program of the
// candidate whose index follows (the same kernels and dispatches).
const SameProgram = "the same program as candidate "

// sameProgram is the reason of a candidate whose program is candidate j's.
func sameProgram(j int) string { return fmt.Sprintf("%s%d (not run again)", SameProgram, j) }

// checked is what checkCandidate found: the loaded executable (nil when invalid), the plan's
// weight bytes, the key of its program (programKey), "" or why it is invalid, the outputs of a
// reference run (want nil; typed at the check length), and the load's time where it uploaded
// weights into opts.Load.Weights that the later candidates share (0 otherwise).
type checked struct {
	exe          *runtime.Executable
	weights      uint64
	prog, reason string
	outs         map[string]*ir.Tensor
	upload       time.Duration
	ran          time.Duration // the run's wall time (outputs read back included)
}

// checkCandidate lowers, loads and runs one candidate and compares its outputs with want (nil:
// the candidate is the reference, and its outputs are returned). admit, given the program's key
// and the plan, says why the candidate is not loaded ("": it is), such as an earlier candidate
// standing for the program.
func checkCandidate(ctx context.Context, d *runtime.Device, m *ir.Model, ref, fn *ir.Function, want map[string]*ir.Tensor,
	ins map[string][]byte, lowerFn func(fns []*ir.Function) (*plan.Plan, error), opts SelectOptions,
	admit func(key string, p *plan.Plan) string) (ck checked) {
	if len(fn.Outputs) != len(ref.Outputs) {
		return checked{reason: fmt.Sprintf("%d outputs, the function has %d", len(fn.Outputs), len(ref.Outputs))}
	}
	// The trace says where a check's time goes (on the H100 a check of SmolLM2's prefill took
	// 0.15-0.5 s with its pipelines made beforehand).
	var phases []string
	t0 := time.Now()
	phase := func(what string) {
		phases = append(phases, fmt.Sprintf("%s %v", what, time.Since(t0).Round(100*time.Microsecond)))
		t0 = time.Now()
	}
	defer func() {
		if len(phases) > 1 {
			opts.trace("select: %s: %s", fn.Name, strings.Join(phases, ", "))
		}
	}()
	p, err := lowerFn([]*ir.Function{fn})
	if err != nil {
		return checked{reason: "lower: " + err.Error()}
	}
	ck.weights, ck.prog = p.Weights.Size, programKey(p)
	phase("lowered")
	if why := admit(ck.prog, p); why != "" {
		ck.reason = why
		return ck
	}
	regions := opts.Load.Weights.Regions()
	t1 := time.Now()
	exe, err := d.Load(p, opts.Load)
	if err != nil {
		ck.reason = "load: " + err.Error()
		return ck
	}
	if opts.Load.Weights.Regions() > regions {
		ck.upload = time.Since(t1) // weights the later candidates share
	}
	phase("loaded")
	var steps []string
	for _, ph := range exe.LoadPhases() {
		steps = append(steps, fmt.Sprintf("%s %v", ph.Step, ph.Time.Round(100*time.Microsecond)))
	}
	if opts.Load.Weights != nil {
		steps = append(steps, fmt.Sprintf("%d weight regions shared", opts.Load.Weights.Regions()))
	}
	phases[len(phases)-1] += " (" + strings.Join(steps, ", ") + ")"

	bad := func(msg string) checked {
		exe.Close()
		ck.reason = msg
		return ck
	}
	if d.Info.Type == runtime.CPU {
		// A CPU implementation compiles a kernel at its first dispatch, one at a time; Prepare
		// compiles the candidate's new kernels on helper devices too, one a processor
		// (runtime.Executable.Prepare).
		if _, err := exe.Prepare(ctx, runtime.PrepareOptions{}); err != nil {
			return bad("prepare: " + err.Error())
		}
		phase("prepared")
	}
	if err := exe.ResetState(); err != nil {
		return bad("reset state: " + err.Error())
	}
	t2 := time.Now()
	got, err := exe.Run(ctx, fn.Name, ins)
	if err != nil {
		return bad("run: " + err.Error())
	}
	ck.ran = time.Since(t2)
	phase("ran")
	if want == nil {
		// The reference itself (the static extraction on the device): its outputs, by the
		// function's output names, typed at the length checked.
		at, err := checkedAt(ref)
		if err != nil {
			return bad(err.Error())
		}
		outs := map[string]*ir.Tensor{}
		for k, o := range at.Outputs {
			b, t := got[fn.Outputs[k].Name], o.Value.Type()
			if len(b) != deviceSize(t) {
				return bad(fmt.Sprintf("output %s: %d bytes, want %d", fn.Outputs[k].Name, len(b), deviceSize(t)))
			}
			outs[o.Name] = hostTensor(t, b)
		}
		ck.exe, ck.outs = exe, outs
		return ck
	}
	defer phase("compared")
	if msg := compareOutputs(ref, fn, want, got, opts); msg != "" {
		return bad(msg)
	}
	ck.exe = exe
	return ck
}

// compareOutputs checks a candidate fn's outputs got (device bytes by fn's output names)
// against the reference ref's outputs want: "" when they agree, else what is wrong. What it
// derives from want alone (its values as float64, the rows' scales and largest scores) is
// derived once for all the candidates checked against it (opts.refs): on the H100 the
// comparison of SmolLM2's score (37 rows of 49152 logits, their argmax and top 64) took
// 60 ms of each of its candidates' checks of about 150 ms, most of it converting and
// ranking the reference again.
func compareOutputs(ref, fn *ir.Function, want map[string]*ir.Tensor, got map[string][]byte, opts SelectOptions) string {
	view := func(t *ir.Tensor) *refView {
		if opts.refs == nil {
			return newRefView(t)
		}
		v, _ := opts.refs.LoadOrStore(t, newRefView(t))
		return v.(*refView)
	}
	for k, o := range ref.Outputs {
		name := fn.Outputs[k].Name
		b, ok := got[name]
		if !ok {
			return fmt.Sprintf("output %s missing", name)
		}
		w := want[o.Name]
		if w == nil {
			return fmt.Sprintf("the reference has no output %s", o.Name)
		}
		if len(b) != deviceSize(w.Type) {
			return fmt.Sprintf("output %s: %d bytes, want %d", name, len(b), deviceSize(w.Type))
		}
		g := hostTensor(w.Type, b)
		var msg string
		if scores, kk := topkScores(ref, k, want); scores != nil {
			// As for an argmax: indices of the k largest whose reference scores are, rank by
			// rank, within tolerance of the reference's k largest.
			msg = view(scores).compareTopK(g, kk, opts.tolerance(ref, scores.Type.DType))
		} else if scores := argmaxScores(ref, k, want); scores != nil {
			// An argmax over outputs that agree within tolerance may pick another index where
			// two scores are that close (f16 logits of a random model often are): the index is
			// right when its reference score is within tolerance of the row's best.
			msg = view(scores).compareArgmax(g, opts.tolerance(ref, scores.Type.DType))
		} else {
			msg = view(w).compare(g, opts.tolerance(ref, w.Type.DType))
		}
		if msg != "" {
			return fmt.Sprintf("wrong output %s: %s", name, msg)
		}
	}
	return ""
}

// tolerance is the error allowed in an output of dtype d of function fn: the larger of
// Tolerance and FunctionTolerance (of f16 where fn computes a 16-bit float on the way, see
// halfFloats), times tolScale when the reference is another device run.
func (o SelectOptions) tolerance(fn *ir.Function, d ir.DType) float64 {
	if fn != nil && halfFloats(fn) {
		d = ir.F16
	}
	return max(o.Tolerance, FunctionTolerance(d)) * cmp.Or(o.tolScale, 1)
}

// halfFloats reports whether fn computes a 16-bit float value (f16 or bf16) on the way to its
// outputs: an imported model's activations and KV cache, cast to f16 behind f32 inputs and
// logits. Its differences from the interpreter then add up through the layers as a 16-bit
// function's do, whatever the outputs' type. Parameters, state read and constants are not
// computed: both sides read the same values.
//
// (Until session 18 the tolerance was the outputs' type's alone: f32 logits, 1e-3. On the
// H100 every candidate of a Llama-3.2-1B-shaped Q8_0 file's prefill@1, the static extraction
// too, ended 1.7e-3 to 2.1e-3 of the row scale from the interpreter, and its default
// compile failed: "no candidate is valid". The 8B file's graph as written was 1.1e-2 from
// the static extraction on the device, against 2e-3.)
func halfFloats(fn *ir.Function) bool {
	for _, n := range fn.Nodes {
		if n.Op.Info().Kind == ir.KindSource { // inputs, parameters, state, constants
			continue
		}
		for _, t := range n.Outs {
			if t.DType == ir.F16 || t.DType == ir.BF16 {
				return true
			}
		}
	}
	return false
}

// deviceReference is the reference of a selection that checks against a candidate run on the
// device: ref's random inputs at its check length, as StartReference draws them with seed, and
// no outputs yet.
func deviceReference(ref *ir.Function, seed int64) (*Reference, error) {
	at, err := checkedAt(ref)
	if err != nil {
		return nil, err
	}
	r := &Reference{seed: seed, done: make(chan struct{}), inputs: FunctionInputs(at, rand.New(rand.NewSource(seed)))}
	close(r.done)
	return r, nil
}

// programKey identifies what a candidate's plan runs: every dispatch's module (its SPIR-V and
// specialization), push constants, scalars, grid, scale, bindings and barrier, and the
// functions' signatures. Two graphs that lower to one program time the same.
func programKey(p *plan.Plan) string {
	h := sha256.New()
	mod := make([]string, len(p.Modules))
	for i := range p.Modules {
		m := &p.Modules[i]
		mh := sha256.New()
		binary.Write(mh, binary.LittleEndian, m.SPIRV)
		fmt.Fprintf(mh, "|%s|%v|%d", m.Entry, m.SpecConstants, m.PushConstantSize)
		mod[i] = fmt.Sprintf("%x", mh.Sum(nil))
	}
	for _, f := range p.Functions {
		fmt.Fprintf(h, "fn %s %v %v;", f.Name, f.Inputs, f.Outputs)
		for _, d := range f.Dispatches {
			var scale plan.GridScale
			if d.Scale != nil {
				scale = *d.Scale
			}
			fmt.Fprintf(h, "%s|%x|%v|%v|%v|%v|%v;", mod[d.Module], d.Push, d.Scalars, d.Grid, scale, d.Bindings, d.BarrierBefore)
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// argmaxScores returns the reference scores of output k when it is an argmax over the last axis
// of another output of ref (next_token = argmax(logits)), else nil.
func argmaxScores(ref *ir.Function, k int, want map[string]*ir.Tensor) *ir.Tensor {
	n := ref.Outputs[k].Value.Node
	if n.Op != ir.Argmax || len(n.Args) != 1 {
		return nil
	}
	x := n.Args[0]
	if ax := n.Attrs.Int("axis", -1); ax != -1 && ax != x.Type().Shape.Rank()-1 {
		return nil
	}
	for _, o := range ref.Outputs {
		if o.Value == x && want[o.Name] != nil && want[o.Name].Type.DType.IsFloat() {
			return want[o.Name]
		}
	}
	return nil
}

// topkScores returns the reference scores of output k when it is an argtopk over another
// output of ref (top_ids = argtopk(logits)), and its k; else nil.
func topkScores(ref *ir.Function, k int, want map[string]*ir.Tensor) (*ir.Tensor, int) {
	n := ref.Outputs[k].Value.Node
	if n.Op != ir.ArgTopK || len(n.Args) != 1 {
		return nil, 0
	}
	for _, o := range ref.Outputs {
		if o.Value == n.Args[0] && want[o.Name] != nil && want[o.Name].Type.DType.IsFloat() {
			return want[o.Name], n.Attrs.Int("k", 0)
		}
	}
	return nil, 0
}

// CompareTopK checks indices got (argtopk over the last axis of scores, k per row) against the
// reference scores: each row's indices must be distinct and in range, and the score of its t-th
// index within tol of the row's t-th largest score, tol relative to the row's largest magnitude
// (two scores that close may be ranked either way). "" when they are.
func CompareTopK(got, scores *ir.Tensor, k int, tol float64) string {
	return newRefView(scores).compareTopK(got, k, tol)
}

// largest returns the k largest values of s, largest first (NaNs last, as a descending sort
// puts them). A row's k ranks are all a top-k check needs: sorting whole rows took 0.6 s of each
// check of SmolLM2's score (37 rows of 49152 logits) on the H100 machine.
func largest(s []float64, k int) []float64 {
	top := make([]float64, 0, k+1)
	for _, v := range s {
		if v != v || len(top) == k && !(v > top[k-1]) {
			continue
		}
		i := sort.Search(len(top), func(j int) bool { return top[j] < v })
		top = slices.Insert(top, i, v)
		if len(top) > k {
			top = top[:k]
		}
	}
	for len(top) < k { // the NaNs, left out above, fill the last ranks
		top = append(top, math.NaN())
	}
	return top
}

// CompareArgmax checks indices got (argmax over the last axis of scores) against the reference
// scores: each row's index must be in range and its score within tol of the row's largest, tol
// relative to the row's largest magnitude (as Compare measures). "" when it is.
func CompareArgmax(got, scores *ir.Tensor, tol float64) string {
	return newRefView(scores).compareArgmax(got, tol)
}

// FunctionInputs returns random inputs for f: floats standard normal, bools fair coins, and
// integers valid for the ops that read them directly (or through reshapes): embedding ids in
// [0, table rows), attention kv_len the key length, any other integer scalar 0 (a position 0 is
// valid for every rope and cache write), other integer tensors in [0, 8).
func FunctionInputs(f *ir.Function, rng *rand.Rand) map[string]*ir.Tensor {
	users := map[*ir.Node][]use{}
	for _, n := range f.Nodes {
		for i, a := range n.Args {
			users[a.Node] = append(users[a.Node], use{n, i})
		}
	}
	out := map[string]*ir.Tensor{}
	for _, in := range f.Inputs {
		t := in.Outs[0]
		if !t.DType.IsInt() {
			out[in.Name] = Random(rng, t)
			continue
		}
		gen := func() float64 { return float64(rng.Intn(8)) }
		if t.Shape.NumElements() == 1 {
			gen = func() float64 { return 0 }
		}
		// A batched step's slot and position: row r in cell (r mod slots, ctx − 1 − r/slots),
		// no two rows in one cell (see Inputs).
		rowCell := func(cache ir.Type, idx int) func() float64 {
			slots, ctx := max(cache.Shape[0], 1), max(cache.Shape[1], 1)
			r := 0
			return func() float64 {
				v := r % slots
				if idx == 1 {
					v = ctx - 1 - (r/slots)%ctx
				}
				r++
				return float64(v)
			}
		}
		for _, u := range reachThroughReshapes(in, users) {
			switch {
			case u.n.Op == ir.CacheScatter && (u.arg == 2 || u.arg == 3):
				gen = rowCell(u.n.Args[0].Type(), u.arg-2)
			case u.n.Op == ir.AttentionRows && (u.arg == 3 || u.arg == 4):
				gen = rowCell(u.n.Args[1].Type(), u.arg-3)
			case u.n.Op == ir.Embedding && u.arg == 1:
				rows := max(u.n.Args[0].Type().Shape[0], 1)
				gen = func() float64 { return float64(rng.Intn(rows)) }
			case u.n.Op == ir.Attention && u.arg == 3:
				kv, _, _ := ir.LayoutDims(ir.AttentionLayouts(u.n.Attrs).K, u.n.Args[1].Type().Shape)
				gen = func() float64 { return float64(kv) }
			}
		}
		vals := make([]float64, t.Shape.NumElements())
		for i := range vals {
			vals[i] = gen()
		}
		out[in.Name] = ir.TensorFromFloat64s(t, vals)
	}
	return out
}

type use struct {
	n   *ir.Node
	arg int
}

func reachThroughReshapes(n *ir.Node, users map[*ir.Node][]use) []use {
	var out []use
	for _, u := range users[n] {
		if u.n.Op == ir.Reshape {
			out = append(out, reachThroughReshapes(u.n, users)...)
			continue
		}
		out = append(out, u)
	}
	return out
}

// Record is the selection as the plan records it: one candidate per version of the function,
// the winner marked.
func (s *Selection) Record() []plan.Candidate {
	var out []plan.Candidate
	for i, r := range s.Results {
		c := plan.Candidate{Subject: s.Function + " program", Estimated: r.Estimated, Measured: r.Median, Chosen: i == s.Winner}
		note := r.Label
		switch {
		case !r.Valid && i == s.Winner:
			note = strings.TrimSpace(note + " kept without a check (" + r.Reason + ")")
		case !r.Valid:
			note = strings.TrimSpace(note + " rejected: " + r.Reason)
		case r.Ratio > 0 && s.Short > 0 && r.ShortRatio > 0:
			note = strings.TrimSpace(fmt.Sprintf("%s ×%.3f of the winner (at %s=%d ×%.3f)", note, r.Ratio, cmp.Or(s.Dim, "length"), s.Short, r.ShortRatio))
		case r.Ratio > 0:
			note = strings.TrimSpace(fmt.Sprintf("%s ×%.3f of the winner", note, r.Ratio))
		}
		c.Note = fmt.Sprintf("candidate %d: %s", i, note)
		out = append(out, c)
	}
	return out
}

// String is a table of the candidates for `vkc compile --report`.
func (s *Selection) String() string {
	var b strings.Builder
	from := ""
	if s.Recorded {
		from = " (recorded by an earlier compile: nothing measured now)"
	}
	at := ""
	if s.Short > 0 && s.Rounds > 0 {
		at = fmt.Sprintf(", each at %s=%d and %d", cmp.Or(s.Dim, "length"), s.Short, s.Capacity)
	}
	fmt.Fprintf(&b, "function %s: %d candidates, %d paired rounds%s%s\n", s.Function, len(s.Results), s.Rounds, at, from)
	if s.Why != "" {
		fmt.Fprintf(&b, "   %s\n", s.Why)
	}
	if s.Against != "" {
		fmt.Fprintf(&b, "   checked against %s\n", s.Against)
	}
	for i, r := range s.Results {
		mark := " "
		if i == s.Winner {
			mark = "*"
		}
		status := "valid"
		switch {
		case !r.Valid && i == s.Winner:
			status = "kept without a check (" + r.Reason + ")"
		case strings.HasPrefix(r.Reason, SameProgram):
			status = r.Reason
		case !r.Valid:
			status = "rejected: " + r.Reason
		case len(r.Times) > 0 && len(r.Times) < s.Rounds:
			status = fmt.Sprintf("valid, timed in the first %d rounds only (%s: prune)", len(r.Times), cmp.Or(r.Dropped, "dropped"))
		}
		est, med, ratio := "-", "-", "-"
		if r.Estimated > 0 {
			est = r.Estimated.Round(time.Microsecond).String()
		}
		if r.Median > 0 {
			med = r.Median.Round(time.Microsecond).String()
			ratio = fmt.Sprintf("×%.3f", r.Ratio)
		}
		if at != "" {
			// The capacity's figures first, then the short length's.
			short := "-"
			if r.ShortMedian > 0 {
				short = fmt.Sprintf("%s ×%.3f", r.ShortMedian.Round(time.Microsecond), r.ShortRatio)
			}
			ratio = fmt.Sprintf("%-7s at %d: %-18s", ratio, s.Short, short)
		}
		fmt.Fprintf(&b, " %s %d  estimated %-10s measured %-10s %-7s %s  %s\n", mark, i, est, med, ratio, r.Label, status)
	}
	return b.String()
}

func medianF(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func medianD(xs []time.Duration) time.Duration {
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// prefetchCandidates lowers the candidates of every function of fns in the order the checks
// take them, the static extractions of all functions first, and gives each plan to prefetch,
// in a goroutine, while ctx lasts; stop ends it and waits for the lowering under way, done is
// closed when it ends.
func prefetchCandidates(ctx context.Context, fns []*ir.Function, cands func(f *ir.Function) ([]SelectCandidate, error),
	lowerFn func(fns []*ir.Function) (*plan.Plan, error), prefetch func(p *plan.Plan), lowered *sync.Map) (stop func(), done <-chan struct{}) {
	ctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var rest []*ir.Function
		for _, static := range []bool{true, false} {
			for _, f := range fns {
				c, err := cands(f)
				if err != nil {
					return // SelectFunctions reports it
				}
				for _, c := range c {
					if c.Static == static {
						rest = append(rest, c.Fn)
					}
				}
			}
		}
		// Several lowerings at a time where the host has the processors: on the H100 machine
		// (16 of them) one at a time had not reached SmolLM2's scoring candidates when their
		// checks began, and each check lowered its own (45 ms of a 150 ms check; session 22).
		// In order, static extractions first, as the checks come.
		var next atomic.Int64
		var wg sync.WaitGroup
		for range prefetchWorkers() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					k := int(next.Add(1)) - 1
					if k >= len(rest) || ctx.Err() != nil {
						return
					}
					fn := rest[k]
					if p, err := lowerFn([]*ir.Function{fn}); err == nil {
						if lowered != nil {
							lowered.Store(fn, loweredProgram{key: programKey(p), weights: p.Weights.Size, plan: p})
						}
						prefetch(p)
					}
				}
			}()
		}
		wg.Wait()
	}()
	return func() { cancel(); <-finished }, finished
}

// prefetchWorkers is how many candidates prefetchCandidates lowers at a time: a quarter of the
// host's processors, 1 to 4 (the checks, the tuner's pipeline prefetch and the interpreter's
// references run beside it).
func prefetchWorkers() int {
	return min(max(goruntime.GOMAXPROCS(0)/4, 1), 4)
}

// timeWhileWaiting times the functions checked before (ss), a paired round of each in turn,
// while the next function's reference r is evaluated: the device would idle meanwhile. On the
// H100 SmolLM2's score waited 2.1 s for its reference, and the rounds of every function then had
// 0.3 s left before the selection's deadline. Only functions with candidates to compare are
// timed, up to their rounds (SelectOptions.Rounds); the rounds after the checks take up the
// rest.
func timeWhileWaiting(ctx context.Context, ss []*selecting, r *Reference) error {
	for r != nil && !r.ready() && ctx.Err() == nil {
		timed := false
		for _, s := range ss {
			if r.ready() {
				return nil
			}
			if s == nil || s.done || len(s.valid) < 2 || s.sel.Rounds >= s.opts.Rounds {
				continue
			}
			before := s.sel.Rounds
			if err := s.rounds(ctx, 1); err != nil {
				s.record(ctx)
				return err
			}
			timed = timed || s.sel.Rounds > before
		}
		if !timed {
			return nil
		}
	}
	return nil
}

// SelectFunctions runs SelectFunction for every function of fns, with the candidates cands
// gives for it (e.g. rules.OptimizeK under Tuner.OpCost, cheapest first), and returns the winning
// version of each function in fns' order with the selections. A function with one candidate is
// still checked against the interpreter (and timed once). The caller lowers the winners together
// into the final plan and appends each Selection.Record to its record.
func SelectFunctions(ctx context.Context, d *runtime.Device, m *ir.Model, fns []*ir.Function,
	cands func(f *ir.Function) ([]SelectCandidate, error), lowerFn func(fns []*ir.Function) (*plan.Plan, error),
	opts SelectOptions) ([]*ir.Function, []*Selection, error) {
	opts.outer, opts.checks, opts.runs, opts.perKernel = ctx, &meanTime{}, &meanTime{}, &meanTime{}
	// The checks of every function come first (the first function compiles most of the
	// kernels), and but for the static extractions' keep a third of the time for the rounds;
	// then each function's rounds get an equal share of the time left, so the first cannot
	// spend the measuring of all (what it leaves passes on).
	var reserve time.Duration
	if dl, ok := ctx.Deadline(); ok {
		reserve = time.Until(dl) / 3
	}
	if opts.Load.Weights == nil {
		// The candidates of the functions upload the model's weights once (a check's load
		// uploaded them all again: 0.09-0.16 s of SmolLM2's checks on the H100), freed when
		// every candidate's executable is closed (after a timing the deadline abandoned, too).
		share := runtime.NewWeightShare()
		opts.Load.Weights = share
		defer func() {
			if opts.Guard.Abandoned() {
				go func() { opts.Guard.Wait(); share.Close() }()
				return
			}
			t0 := time.Now()
			share.Close()
			opts.trace("select: the shared weights freed in %v", time.Since(t0).Round(time.Millisecond))
		}()
	}
	ss := make([]*selecting, len(fns))
	cs := make([][]SelectCandidate, len(fns))
	if opts.Prefetch != nil {
		opts.lowered = &sync.Map{}
		stop, _ := prefetchCandidates(ctx, fns, cands, lowerFn, opts.Prefetch, opts.lowered)
		defer func() {
			t0 := time.Now()
			stop()
			opts.trace("select: the candidates' prefetch stopped in %v", time.Since(t0).Round(time.Millisecond))
		}()
	}
	defer func() {
		for _, s := range ss {
			if s != nil {
				s.close()
			}
		}
	}()
	var sels []*Selection
	fail := func(i int, err error) ([]*ir.Function, []*Selection, error) {
		for _, s := range ss[:i] {
			sels = append(sels, s.sel)
		}
		return nil, sels, err
	}
	timing := false // a function checked so far has candidates to time
	for i, f := range fns {
		c, err := cands(f)
		if err != nil {
			return fail(i, fmt.Errorf("select %s: candidates: %w", f.Name, err))
		}
		if len(c) == 0 {
			c = []SelectCandidate{{Fn: f, Label: "as written"}}
		}
		o := opts
		if len(c) == 1 {
			o.Rounds = 1
		}
		cs[i], ss[i] = c, newSelecting(d, m, f, c, lowerFn, o)
		if ss[i].done {
			continue
		}
		if timing && ss[i].static && wouldOverrun(ctx, reserve) {
			// Checking this function's static extraction would only confirm what the static
			// path takes, and spend the time kept for timing the candidates checked so far:
			// on the H100 the static checks of SmolLM2's last three functions (and the wait
			// for their references) took 2.7 s past the reserve, and no function got a round.
			opts.trace("select: %s keeps its static extraction unchecked: the time left is kept for timing the functions checked before it", f.Name)
			ss[i].sel, ss[i].done = uncheckedStatic(ss[i].sel, c, "the time left was kept for timing the candidates of the functions checked before it",
				"the time left is kept for timing other functions' candidates"), true
			continue
		}
		if err := timeWhileWaiting(ctx, ss[:i], opts.References[f]); err != nil {
			return fail(i, err)
		}
		if err := ss[i].check(ctx, reserve); err != nil {
			ss[i].record(ctx)
			return fail(i+1, err)
		}
		timing = timing || len(ss[i].valid) > 1
		d = cmp.Or(d, ss[i].d) // opened by the first check
	}
	opts.trace("select: the checks are done")
	// The rounds go to every function up to EvidenceRounds first, and past them only with the
	// time the late checks leave (topUpRounds); and a function whose rounds wait for its late
	// checks keeps its share meanwhile. On the H100 SmolLM2's decode and score functions timed
	// five rounds each, the last of them with all the time left, while prefill and prefill@1,
	// whose candidates waited for the late checks, timed two and one: neither could take the
	// graph it had measured faster.
	// The functions whose candidates run longest come last (cheapestFirst): what the others
	// leave of their equal shares passes on to them. On the H100 SmolLM2's scoring function (six
	// candidates at 128 and 512 rows, 0.58 s a round) came first, and its equal ninth gave it 1
	// round in six compiles of seven, while the functions after it ended their 3 rounds within
	// their shares (session 21).
	order := cheapestFirst(ss)
	later := 0 // the functions before i with late checks to come
	for i, k := range order {
		s := ss[k]
		if !s.done && len(s.valid) <= 1 && len(s.waiting) > 0 {
			later++
			continue
		}
		if !s.done {
			fctx, cancel := equalShare(ctx, len(fns)-i+later)
			if len(s.waiting) > 0 {
				later++
			}
			err := s.rounds(fctx, EvidenceRounds)
			s.sel.deadline = s.sel.deadline || errors.Is(fctx.Err(), context.DeadlineExceeded)
			cancel()
			if err != nil {
				s.record(ctx)
				return fail(len(ss), err)
			}
		}
	}
	// Then the candidates that waited for the rounds (their checks compile kernels new to the
	// device), with the time every function's rounds left, in equal shares of the functions
	// with such candidates; but a function whose cheapest waiting check (and the rounds after
	// it) does not fit its share takes what that needs while the time left holds it: on
	// lavapipe, where a kernel compiles in about a second, tinyllama's equal shares fitted no
	// function's check, and so no alternative was ever timed.
	done := func(upTo int) {
		for _, s := range ss[:upTo] {
			if !s.done {
				s.record(ctx)
			}
			sels = append(sels, s.sel)
		}
	}
	waits := 0 // the functions from i on with late checks
	for _, s := range ss {
		if !s.done && len(s.waiting) > 0 {
			waits++
		}
	}
	for i, s := range ss {
		if !s.done && len(s.waiting) > 0 {
			fctx, cancel := ctx, context.CancelFunc(func() {})
			if dl, ok := ctx.Deadline(); ok {
				left := time.Until(dl)
				share := left / time.Duration(waits)
				if need := s.lateNeed(); need > share && need <= left {
					opts.trace("select: %s takes %v of the %v left for its late check (an equal share: %v)", s.ref.Name,
						need.Round(time.Millisecond), left.Round(time.Millisecond), share.Round(time.Millisecond))
					share = need
				}
				fctx, cancel = context.WithTimeout(ctx, share)
			}
			err := s.late(fctx)
			waits--
			s.sel.deadline = s.sel.deadline || errors.Is(fctx.Err(), context.DeadlineExceeded)
			cancel()
			if err != nil {
				done(i + 1)
				return nil, sels, err
			}
		}
	}
	opts.trace("select: the rounds and late checks are done")
	if err := topUpRounds(ctx, ss, opts); err != nil {
		done(len(ss))
		return nil, sels, err
	}
	done(len(ss))
	var winners []*ir.Function
	for i, s := range ss {
		winners = append(winners, cs[i][s.sel.Winner].Fn)
	}
	return winners, sels, nil
}

// cheapestFirst is the order of ss's first rounds: by their valid candidates' check runs added
// up, least first, in powers of two of 10 ms (those under 10 ms, and those within the same power,
// keep ss's order: a run's wall time varies, by several times on a loaded machine).
func cheapestFirst(ss []*selecting) []int {
	order := make([]int, len(ss))
	for i := range order {
		order[i] = i
	}
	class := func(i int) int { return bits.Len64(uint64(max(ss[i].runs/(10*time.Millisecond), 0))) }
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(class(a), class(b)) })
	return order
}

// topUpRounds gives the time the functions' shares left to those with two or more valid
// candidates whose paired rounds stopped short of the rounds asked for (none at all, too),
// fewest rounds first, each an equal share of what is left, or, short of EvidenceRounds, what
// its rounds up to them need where the time left holds it: a late check's share ends its
// function's rounds with its own deadline, and the functions after it may not use theirs. On lavapipe tinyllama's prefill (a round of two candidates at
// two lengths: 1.2 s) had one round and left 3.2 s of the selection's time to the winners'
// kernels, while prefill@1, prefill@8 and decode had five each.
func topUpRounds(ctx context.Context, ss []*selecting, opts SelectOptions) error {
	var short []*selecting
	for _, s := range ss {
		if !s.done && !s.restored && len(s.valid) > 1 && s.sel.Rounds < s.opts.Rounds {
			short = append(short, s)
		}
	}
	slices.SortStableFunc(short, func(a, b *selecting) int { return a.sel.Rounds - b.sel.Rounds })
	for i, s := range short {
		if ctx.Err() != nil {
			break
		}
		fctx, cancel := equalShare(ctx, len(short)-i)
		if dl, ok := ctx.Deadline(); ok && s.sel.Rounds > 0 && s.sel.Rounds < EvidenceRounds {
			// Short of the evidence, it takes what its rounds up to EvidenceRounds need where
			// the time left holds them (the functions after it have as many or more): on the
			// H100 SmolLM2's scoring function (0.39 s a round) had 1 round, and its equal share
			// of the 0.78 s left held none, while the others went from 3 rounds to 5.
			// (A quarter of a round more: a round takes about the last one's time, more or less.)
			left := time.Until(dl)
			need := time.Duration(EvidenceRounds-s.sel.Rounds)*s.round + s.round/4
			if need > left/time.Duration(len(short)-i) && need <= left {
				cancel()
				opts.trace("select: %s takes %v of the %v left for its paired rounds up to %d", s.ref.Name,
					need.Round(time.Millisecond), left.Round(time.Millisecond), EvidenceRounds)
				fctx, cancel = context.WithTimeout(ctx, need)
			}
		}
		before, deadline := s.sel.Rounds, s.sel.deadline
		err := s.rounds(fctx, 0)
		s.sel.deadline = deadline || errors.Is(fctx.Err(), context.DeadlineExceeded)
		cancel()
		if err != nil {
			return err
		}
		if s.sel.Rounds > before {
			opts.trace("select: %s timed %d more paired rounds with the time the others left (%d in all)", s.ref.Name, s.sel.Rounds-before, s.sel.Rounds)
		}
	}
	return nil
}

// equalShare bounds ctx to a 1/n share of the time to its deadline (ctx itself when it has
// none), for n things that take turns at what is left.
func equalShare(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithTimeout(ctx, time.Until(dl)/time.Duration(n))
	}
	return ctx, func() {}
}
