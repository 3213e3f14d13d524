package tune

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

// selectModel opens the test device and parses the model at path, with a tuner of tiny budgets
// on a fake clock.
func selectModel(t *testing.T, path string) (*runtime.Device, *ir.Model, *Tuner) {
	t.Helper()
	d := testDevice(t)
	m, err := ir.ParseModel(path)
	if err != nil {
		t.Fatal(err)
	}
	tu := &Tuner{Device: d, Compiler: "vkc test", Timing: &fakeClock{timeOf: bowl}, Exhaustive: 2, Budget: 2}
	t.Cleanup(tu.Close)
	return d, m, tu
}

// lowerWith is the lowerFn of SelectFunction for m on d with the kernel choices of choose.
func lowerWith(d *runtime.Device, m *ir.Model, choose func(*kernels.Problem) (*kernels.Template, kernels.Config, error)) func([]*ir.Function) (*plan.Plan, error) {
	return func(fns []*ir.Function) (*plan.Plan, error) {
		p, _, err := lower.Lower(m, fns, lower.Options{Caps: CapsOf(&d.Info), Device: d.DeviceFingerprint(), CompilerVersion: "vkc test", Choose: choose})
		return p, err
	}
}

// warmKernels compiles the kernels of every function of m on d, lowered by lowerFn, into the
// driver's disk cache. A test whose budget assumes that a check compiling nothing new only runs
// calls it first: lavapipe compiles a kernel at its first dispatch, and with an empty cache
// (a fresh machine, or the test run alone) the late-check tests failed on that time, passing only
// after other tests had compiled the same kernels.
func warmKernels(t *testing.T, d *runtime.Device, m *ir.Model, lowerFn func([]*ir.Function) (*plan.Plan, error)) {
	t.Helper()
	p, err := lowerFn(m.Functions)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := d.Load(p, runtime.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	if _, err := exe.Prepare(context.Background(), runtime.PrepareOptions{}); err != nil {
		t.Fatal(err)
	}
}

// planClock is a fake PlanTimer: a fixed time per candidate, and the order of the calls.
type planClock struct {
	mu    sync.Mutex
	times map[int]time.Duration
	calls []int
}

func (c *planClock) TimePlan(ctx context.Context, exe *runtime.Executable, fn string, inputs map[string][]byte, cand int) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if exe == nil {
		panic("timing a candidate that was not loaded")
	}
	c.calls = append(c.calls, cand)
	// A slow drift over the calls: paired rounds cancel it.
	return c.times[cand] + time.Duration(len(c.calls))*time.Microsecond, nil
}

// Measured selection over whole functions: the wrong version (which the clock would rank
// fastest) is rejected by the interpreter check and never timed; of the two valid versions the
// measured winner is chosen although the estimates rank it second; rounds alternate their order.
func TestSelectFunctionMeasuredWinner(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	ctx := context.Background()
	lowerFn := lowerWith(d, m, tu.Choose(ctx))
	cands := []SelectCandidate{
		{Fn: m.Function("forward"), Label: "as written", Estimated: 10 * time.Microsecond},
		{Fn: m.Function("forward_alt"), Label: "matmul+add", Estimated: 20 * time.Microsecond},
		{Fn: m.Function("forward_wrong"), Label: "wrong", Estimated: 5 * time.Microsecond},
	}
	clock := &planClock{times: map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond, 2: time.Microsecond}}
	sel, err := SelectFunction(ctx, d, m, m.Function("forward"), cands, lowerFn, SelectOptions{Rounds: 4, Timer: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sel.String())
	if sel.Winner != 1 {
		t.Errorf("winner %d, want 1 (the measured winner, estimated second)", sel.Winner)
	}
	if r := sel.Results[2]; r.Valid || !strings.Contains(r.Reason, "wrong output y") {
		t.Errorf("the wrong candidate: valid=%v reason %q", r.Valid, r.Reason)
	}
	if !sel.Results[0].Valid || !sel.Results[1].Valid {
		t.Fatalf("valid candidates rejected: %q, %q", sel.Results[0].Reason, sel.Results[1].Reason)
	}
	if want := []int{0, 1, 1, 0, 0, 1, 1, 0}; !equalInts(clock.calls, want) {
		t.Errorf("timing order %v, want alternating %v", clock.calls, want)
	}
	if r := sel.Results[0].Ratio; r < 1.4 || r > 1.6 {
		t.Errorf("candidate 0 ratio %.3f to the winner, want about 1.5", r)
	}
	rec := sel.Record()
	if len(rec) != 3 || !rec[1].Chosen || rec[0].Chosen || !strings.Contains(rec[2].Note, "rejected") || rec[1].Measured <= 0 {
		t.Errorf("record %+v", rec)
	}

	// The same selection timed by the device (Executable.Measure): both valid versions get a
	// time and one of them wins.
	sel, err = SelectFunction(ctx, d, m, m.Function("forward"), cands[:2], lowerFn,
		SelectOptions{Rounds: 2, Timer: ExecTiming{Options: runtimeOptionsQuick}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sel.String())
	if sel.Winner < 0 || sel.Rounds != 2 || sel.Results[0].Median <= 0 || sel.Results[1].Median <= 0 {
		t.Errorf("device-timed selection: %s", sel)
	}
}

// Without the interpreter's reference (NoReference: the model would not fit the host in float64,
// or its evaluation would outlast the budget), the candidates are checked against the static
// extraction run on the device: the wrong version is rejected as against the interpreter, the
// valid one is timed against the static one and wins, and the selection says what it was
// checked against. Without a static candidate there is nothing to check against on the device.
func TestSelectFunctionDeviceReference(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	ctx := context.Background()
	lowerFn := lowerWith(d, m, tu.Choose(ctx))
	ref := m.Function("forward")
	cands := []SelectCandidate{
		{Fn: m.Function("forward_wrong"), Label: "wrong", Estimated: 5 * time.Microsecond},
		{Fn: m.Function("forward_alt"), Label: "matmul+add", Estimated: 20 * time.Microsecond},
		{Fn: ref, Label: "as written", Estimated: 10 * time.Microsecond, Static: true},
	}
	clock := &planClock{times: map[int]time.Duration{0: time.Microsecond, 1: 200 * time.Microsecond, 2: 300 * time.Microsecond}}
	refs := map[*ir.Function]*Reference{ref: NoReference("test: no interpreter")}
	sel, err := SelectFunction(ctx, d, m, ref, cands, lowerFn, SelectOptions{Rounds: 4, Timer: clock, References: refs})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sel.String())
	if r := sel.Results[0]; r.Valid || !strings.Contains(r.Reason, "wrong output y") {
		t.Errorf("the wrong candidate: valid=%v reason %q", r.Valid, r.Reason)
	}
	if !sel.Results[1].Valid || !sel.Results[2].Valid {
		t.Fatalf("valid candidates rejected: %q, %q", sel.Results[1].Reason, sel.Results[2].Reason)
	}
	if sel.Winner != 1 || sel.Rounds != 4 || slices.Contains(clock.calls, 0) {
		t.Errorf("winner %d after %d rounds, timed %v; want 1 after 4, the wrong one never timed", sel.Winner, sel.Rounds, clock.calls)
	}
	if !strings.Contains(sel.String(), "checked against the static extraction (candidate 2) run on the device") || !strings.Contains(sel.String(), "test: no interpreter") {
		t.Errorf("the selection does not say what it was checked against:\n%s", sel)
	}

	// A candidate within twice the tolerance of the device's static result passes, one beyond
	// it does not: the tolerance is the one the comparison uses.
	o := SelectOptions{Tolerance: 1e-3, tolScale: 2}
	if got := o.tolerance(ref, ir.F32); got != 2e-3 {
		t.Errorf("tolerance against the device: %g, want 2e-3", got)
	}
	if got := (SelectOptions{Tolerance: 1e-3}).tolerance(ref, ir.F16); got != FunctionTolerance(ir.F16) {
		t.Errorf("tolerance against the interpreter (f16): %g, want %g", got, FunctionTolerance(ir.F16))
	}

	// No static candidate: no device reference; the interpreter's absence is an error.
	_, err = SelectFunction(ctx, d, m, ref, cands[:2], lowerFn, SelectOptions{Rounds: 1, Timer: clock, References: refs})
	if err == nil || !strings.Contains(err.Error(), "no static extraction") {
		t.Errorf("a selection without a reference or a static candidate: err %v", err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// SelectFunctions picks a version per function and keeps the functions' order.
func TestSelectFunctions(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	ctx := context.Background()
	lowerFn := lowerWith(d, m, tu.Choose(ctx))
	cands := func(f *ir.Function) ([]SelectCandidate, error) {
		if f.Name == "forward" {
			return []SelectCandidate{{Fn: f, Label: "as written"}, {Fn: m.Function("forward_alt"), Label: "alt"}}, nil
		}
		return nil, nil // as written only
	}
	clock := &planClock{times: map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond}}
	fns := []*ir.Function{m.Function("forward"), m.Function("forward_alt")}
	winners, sels, err := SelectFunctions(ctx, d, m, fns, cands, lowerFn, SelectOptions{Timer: clock})
	if err != nil {
		t.Fatal(err)
	}
	if len(winners) != 2 || winners[0] != m.Function("forward_alt") || winners[1] != m.Function("forward_alt") || len(sels) != 2 {
		t.Fatalf("winners %v, %d selections", winners, len(sels))
	}
	if sels[1].Rounds != 1 || sels[1].Winner != 0 {
		t.Errorf("single candidate: %s", sels[1])
	}
}

// With the budget already spent, candidates are checked only until one is valid, nothing is
// timed, and that one wins.
func TestSelectFunctionBudgetSpent(t *testing.T) {
	d := testDevice(t)
	m, err := ir.ParseModel("testdata/select.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tu := &Tuner{Device: d, Compiler: "vkc test", Timing: &fakeClock{timeOf: bowl}}
	defer tu.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lowerFn := lowerWith(d, m, tu.Choose(ctx))
	cands := []SelectCandidate{{Fn: m.Function("forward_wrong")}, {Fn: m.Function("forward_alt")}, {Fn: m.Function("forward")}}
	clock := &planClock{}
	sel, err := SelectFunction(ctx, d, m, m.Function("forward"), cands, lowerFn, SelectOptions{Timer: clock})
	if err != nil {
		t.Fatal(err)
	}
	if sel.Winner != 1 || sel.Rounds != 0 || len(clock.calls) != 0 {
		t.Errorf("winner %d after %d rounds, %d timings; want 1, none, none", sel.Winner, sel.Rounds, len(clock.calls))
	}
	if r := sel.Results[0]; r.Valid || !strings.Contains(r.Reason, "wrong output") {
		t.Errorf("candidate 0: %q", r.Reason)
	}
	if r := sel.Results[2]; r.Valid || !strings.Contains(r.Reason, "not checked") {
		t.Errorf("candidate 2: %q", r.Reason)
	}
	if s := tu.Stats(); s.Static == 0 || s.Configs != 0 {
		t.Errorf("tuner stats %+v: with the budget spent, kernels take the static choice", s)
	}
}

// With the budget spent before any check and a static candidate among them, no candidate is
// lowered, run or timed: the static one stands unchecked (what the static path runs), and the
// record says so; a wrong candidate listed first cannot win so.
func TestSelectFunctionBudgetSpentStatic(t *testing.T) {
	d := testDevice(t)
	m, err := ir.ParseModel("testdata/select.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lowered := 0
	lowerFn := func(fns []*ir.Function) (*plan.Plan, error) {
		lowered++
		return nil, errors.New("lowered")
	}
	cands := []SelectCandidate{{Fn: m.Function("forward_wrong")}, {Fn: m.Function("forward_alt"), Static: true}, {Fn: m.Function("forward")}}
	clock := &planClock{}
	sel, err := SelectFunction(ctx, d, m, m.Function("forward"), cands, lowerFn, SelectOptions{Timer: clock})
	if err != nil {
		t.Fatal(err)
	}
	if sel.Winner != 1 || sel.Rounds != 0 || len(clock.calls) != 0 || lowered != 0 {
		t.Errorf("winner %d after %d rounds, %d timings, %d lowerings; want the static 1, nothing measured", sel.Winner, sel.Rounds, len(clock.calls), lowered)
	}
	for i, r := range sel.Results {
		if r.Valid || !strings.HasPrefix(r.Reason, "not checked") {
			t.Errorf("candidate %d: valid=%v %q", i, r.Valid, r.Reason)
		}
	}
	if !strings.Contains(sel.Why, "unchecked") || !strings.Contains(sel.String(), "kept without a check") {
		t.Errorf("why %q:\n%s", sel.Why, sel)
	}
}

// An argmax output is checked through its reference scores: an index whose score ties the best
// within tolerance passes (f16 logits of a random model flip argmax between equivalent graphs),
// a clearly worse one or one out of range does not.
func TestCompareArgmax(t *testing.T) {
	scores := ir.TensorFromFloat64s(ir.T(ir.F32, 2, 4), []float64{
		0.5, 3.000, 2.995, -1,
		9, 1, 2, 3,
	})
	idx := func(a, b int) *ir.Tensor {
		return ir.TensorFromFloat64s(ir.T(ir.I32, 2), []float64{float64(a), float64(b)})
	}
	if msg := CompareArgmax(idx(1, 0), scores, 1e-2); msg != "" {
		t.Errorf("exact argmax rejected: %s", msg)
	}
	if msg := CompareArgmax(idx(2, 0), scores, 1e-2); msg != "" {
		t.Errorf("near tie (3.000 vs 2.995) rejected: %s", msg)
	}
	if msg := CompareArgmax(idx(0, 0), scores, 1e-2); !strings.Contains(msg, "row 0: index 0") {
		t.Errorf("a clearly worse index: %q", msg)
	}
	if msg := CompareArgmax(idx(1, 4), scores, 1e-2); !strings.Contains(msg, "out of range") {
		t.Errorf("an index out of range: %q", msg)
	}
	if msg := CompareArgmax(idx(1, 3), scores, 1e-2); msg == "" {
		t.Error("row 1 index 3 (score 3 against 9) accepted")
	}
}

// sizeClock is a PlanTimer that records the size of each input it is given.
type sizeClock struct {
	mu    sync.Mutex
	sizes []int
}

func (c *sizeClock) TimePlan(ctx context.Context, exe *runtime.Executable, fn string, inputs map[string][]byte, cand int) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sizes = append(c.sizes, len(inputs["x"]))
	return time.Duration(100+cand) * time.Microsecond, nil
}

// lengthFixture is the device, testdata/select_length.yaml's model, its function forward (a
// capacity of 64 rows) and a lowering with a tuner on a fake clock, which the length tests share.
func lengthFixture(t *testing.T) (*runtime.Device, *ir.Model, *ir.Function, func([]*ir.Function) (*plan.Plan, error)) {
	t.Helper()
	d := testDevice(t)
	m, err := ir.ParseModel("testdata/select_length.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tu := &Tuner{Device: d, Compiler: "vkc test", Timing: &fakeClock{timeOf: bowl}, Exhaustive: 2, Budget: 2}
	t.Cleanup(tu.Close)
	return d, m, m.Function("forward"), lowerWith(d, m, tu.Choose(context.Background()))
}

// A function with a run-time length is checked against the interpreter at CheckLength rows,
// not at its capacity (the reference of a 512-row prefill is what a tuned compile of SmolLM2
// spent its selection on), and timed at the capacity; a wrong candidate is still rejected.
func TestSelectFunctionChecksAtCheckLength(t *testing.T) {
	d, m, f, lowerFn := lengthFixture(t)
	if f.Length == nil || f.Length.Max != 64 || CheckLength >= 64 {
		t.Fatalf("the test wants a capacity of 64 above CheckLength %d", CheckLength)
	}
	ins, want, err := StartReference(m, f, 0, nil).Wait()
	if err != nil {
		t.Fatal(err)
	}
	if got := ins["x"].Type.Shape; !got.Equal(ir.Shape{CheckLength, 16}) {
		t.Errorf("reference input x %v, want [%d 16]", got, CheckLength)
	}
	if got := want["y"].Type.Shape; !got.Equal(ir.Shape{CheckLength, 24}) {
		t.Errorf("reference output y %v, want [%d 24]", got, CheckLength)
	}
	ctx := context.Background()
	cands := []SelectCandidate{{Fn: m.Function("forward_wrong"), Label: "wrong"}, {Fn: f, Label: "as written"}}
	clock := &sizeClock{}
	sel, err := SelectFunction(ctx, d, m, f, cands, lowerFn, SelectOptions{Rounds: 2, Timer: clock})
	if err != nil {
		t.Fatal(err)
	}
	if r := sel.Results[0]; r.Valid || !strings.Contains(r.Reason, "wrong output y") {
		t.Errorf("the wrong candidate: valid=%v reason %q", r.Valid, r.Reason)
	}
	// The one valid candidate has nothing to be paired with: of the 2 rounds asked it gets one,
	// which times it at the capacity (64 rows) and at ShortAt (16 rows).
	if sel.Winner != 1 || len(clock.sizes) != 2 || sel.Rounds != 1 {
		t.Fatalf("winner %d after %d timings in %d rounds, want 1 after 2 in 1", sel.Winner, len(clock.sizes), sel.Rounds)
	}
	if sel.Short != 16 || sel.Capacity != 64 || sel.Dim != "seq" {
		t.Errorf("timed at %s=%d and %d, want seq=16 and 64", sel.Dim, sel.Short, sel.Capacity)
	}
	byRows := map[int]int{}
	for _, n := range clock.sizes {
		byRows[n/(16*4)]++
	}
	if byRows[64] != 1 || byRows[16] != 1 {
		t.Errorf("timings by the rows of input x: %v, want 1 at the capacity (64) and 1 at 16", byRows)
	}
}

// rowsClock is a fake PlanTimer whose time depends on the candidate and on the rows of input x
// (16 f32 columns): times[rows][candidate]; it records the rows of each call.
type rowsClock struct {
	mu    sync.Mutex
	times map[int]map[int]time.Duration
	rows  []int
}

func (c *rowsClock) TimePlan(ctx context.Context, exe *runtime.Executable, fn string, inputs map[string][]byte, cand int) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if exe == nil {
		panic("timing a candidate that was not loaded")
	}
	rows := len(inputs["x"]) / (16 * 4)
	c.rows = append(c.rows, rows)
	d, ok := c.times[rows][cand]
	if !ok {
		return 0, fmt.Errorf("no time for candidate %d at %d rows", cand, rows)
	}
	return d + time.Duration(len(c.rows))*time.Nanosecond, nil
}

// A candidate faster at the capacity in every round but slower at the short length does not
// replace the static extraction (SmolLM2's prefill on the H200 won 4 of 4 rounds at 512 rows
// and lost 0 of 40 held out at 128); one faster at both does.
func TestSelectFunctionTimesShortLength(t *testing.T) {
	d, m, f, lowerFn := lengthFixture(t)
	ctx := context.Background()
	cands := []SelectCandidate{{Fn: f, Key: "a", Label: "static extraction", Static: true}, {Fn: m.Function("forward_alt"), Key: "b", Label: "matmul+add"}}
	us := func(x float64) time.Duration { return time.Duration(x * float64(time.Microsecond)) }
	db, err := OpenDB(t.TempDir() + "/tune.json")
	if err != nil {
		t.Fatal(err)
	}
	key := func(*ir.Function) SelectionKey {
		return SelectionKey{Device: "d", Compiler: "vkc test", Function: "forward", Graph: "g"}
	}
	// Candidate 1 is 10% faster at 64 rows and 5% slower at 16.
	clock := &rowsClock{times: map[int]map[int]time.Duration{64: {0: us(400), 1: us(360)}, 16: {0: us(100), 1: us(105)}}}
	sel, err := SelectFunction(ctx, d, m, f, cands, lowerFn, SelectOptions{Rounds: 4, Timer: clock, DB: db, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sel.String())
	if !sel.Results[1].Valid || sel.Winner != 0 || !strings.Contains(sel.Why, "kept the static extraction over candidate 1: at seq=16: faster in 0 of 4") {
		t.Errorf("slower at the short length: winner %d, want the static extraction kept at seq=16:\n%s", sel.Winner, sel)
	}
	if r := sel.Results[1]; len(r.ShortTimes) != 4 || len(r.Times) != 4 || r.ShortRatio < 1.03 || r.Ratio > 0.92 {
		t.Errorf("candidate 1: %d short and %d capacity rounds, ratios %.3f at 16 and %.3f at 64; want 4, 4, about 1.05 and 0.9",
			len(r.ShortTimes), len(r.Times), r.ShortRatio, r.Ratio)
	}
	if !strings.Contains(sel.String(), "each at seq=16 and 64") {
		t.Errorf("the report does not say the lengths timed:\n%s", sel)
	}
	// A warm selection takes the record, the short length's figures with it, timing nothing.
	calls := len(clock.rows)
	warm, err := SelectFunction(ctx, d, m, f, cands, lowerFn, SelectOptions{Rounds: 4, Timer: clock, DB: db, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if !warm.Recorded || len(clock.rows) != calls || warm.Winner != 0 || warm.Short != 16 || warm.Results[1].ShortRatio != sel.Results[1].ShortRatio ||
		len(warm.Results[1].ShortTimes) != 4 || !strings.Contains(warm.String(), "each at seq=16 and 64") {
		t.Errorf("warm selection: recorded=%v, %d timings more, winner %d, short %d, candidate 1 at it ×%.3f over %d rounds:\n%s",
			warm.Recorded, len(clock.rows)-calls, warm.Winner, warm.Short, warm.Results[1].ShortRatio, len(warm.Results[1].ShortTimes), warm)
	}
	// Faster at both lengths: it replaces the static extraction, the reason length by length.
	clock = &rowsClock{times: map[int]map[int]time.Duration{64: {0: us(400), 1: us(360)}, 16: {0: us(100), 1: us(90)}}}
	sel, err = SelectFunction(ctx, d, m, f, cands, lowerFn, SelectOptions{Rounds: 4, Timer: clock})
	if err != nil {
		t.Fatal(err)
	}
	if sel.Winner != 1 || !strings.Contains(sel.Why, "at seq=64: faster in 4 of 4") || !strings.Contains(sel.Why, "at seq=16: faster in 4 of 4") {
		t.Errorf("faster at both lengths: winner %d (%s), want candidate 1 with both lengths' evidence", sel.Winner, sel.Why)
	}
}

// rowsTiming times a plan for real (ExecTiming) and records the rows of input x of each call.
type rowsTiming struct {
	mu   sync.Mutex
	rows []int
}

func (c *rowsTiming) TimePlan(ctx context.Context, exe *runtime.Executable, fn string, inputs map[string][]byte, cand int) (time.Duration, error) {
	c.mu.Lock()
	c.rows = append(c.rows, len(inputs["x"])/(16*4))
	c.mu.Unlock()
	return ExecTiming{Options: RoundTiming}.TimePlan(ctx, exe, fn, inputs, cand)
}

// On the device, a function with a run-time length is timed at ShortAt as well as at its
// capacity: the executable runs at 16 rows, and the short times and medians are recorded.
func TestSelectFunctionShortLengthOnDevice(t *testing.T) {
	d, m, f, lowerFn := lengthFixture(t)
	ctx := context.Background()
	timing := &rowsTiming{}
	sel, err := SelectFunction(ctx, d, m, f, []SelectCandidate{{Fn: f, Label: "as written", Static: true}}, lowerFn,
		SelectOptions{Rounds: 2, Timer: timing})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sel.String())
	if !slices.Equal(timing.rows, []int{64, 16, 64, 16}) {
		t.Errorf("timed at rows %v, want [64 16 64 16]: each round at the capacity, then at ShortAt", timing.rows)
	}
	r := sel.Results[0]
	if sel.Short != 16 || len(r.ShortTimes) != 2 || r.ShortMedian <= 0 || r.Median <= 0 {
		t.Errorf("short length %d, %d short rounds, medians %v at 16 and %v at 64", sel.Short, len(r.ShortTimes), r.ShortMedian, r.Median)
	}
}

// stallClock times each call at 100 µs, except that call stall ends the deadline (expire, when
// set) and waits for the context to end.
type stallClock struct {
	mu     sync.Mutex
	calls  int
	stall  int
	expire func()
}

func (c *stallClock) TimePlan(ctx context.Context, exe *runtime.Executable, fn string, inputs map[string][]byte, cand int) (time.Duration, error) {
	c.mu.Lock()
	c.calls++
	n := c.calls
	c.mu.Unlock()
	if n == c.stall {
		if c.expire != nil {
			c.expire()
		}
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return 100 * time.Microsecond, nil
}

// deadlineCtx is a context whose deadline is far off until expire makes it pass (Err is then
// context.DeadlineExceeded): a test ends a budget at a chosen point, not at a time a loaded
// machine might reach early or late.
type deadlineCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newDeadlineCtx() *deadlineCtx {
	return &deadlineCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }
func (c *deadlineCtx) Done() <-chan struct{}       { return c.done }
func (c *deadlineCtx) expire()                     { c.once.Do(func() { close(c.done) }) }
func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// A selection the compile's deadline cuts short is recorded with the compile's budget: a compile
// of the same budget takes its winner without measuring; a larger budget measures it again.
func TestSelectionBudgetCutKept(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	lowerFn := lowerWith(d, m, tu.Choose(context.Background()))
	db, err := OpenDB(t.TempDir() + "/tune.json")
	if err != nil {
		t.Fatal(err)
	}
	f := m.Function("forward")
	key := func(*ir.Function) SelectionKey {
		return SelectionKey{Device: "d", Compiler: "vkc test", Function: "forward", Graph: "g"}
	}
	cands := []SelectCandidate{{Fn: f, Key: "a", Label: "as written", Static: true}, {Fn: m.Function("forward_alt"), Key: "b", Label: "alt"}}
	const budget = time.Minute
	opts := SelectOptions{Rounds: 3, DB: db, Key: key, Budget: budget}

	// The deadline passes in the second round (its first timing).
	ctx := newDeadlineCtx()
	opts.Timer = &stallClock{stall: 3, expire: ctx.expire}
	sel, err := SelectFunction(ctx, d, m, f, cands, lowerFn, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Rounds != 1 || sel.Recorded {
		t.Fatalf("cut selection: %d rounds, recorded=%v; want 1 measured round", sel.Rounds, sel.Recorded)
	}
	e, ok := db.GetSelection(key(f))
	if !ok || e.Complete || e.Budget != budget {
		t.Fatalf("recorded %+v, want an incomplete selection cut under the budget %v", e, budget)
	}

	same := &stallClock{}
	opts.Timer = same
	again, err := SelectFunction(context.Background(), d, m, f, cands, lowerFn, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Recorded || again.Winner != sel.Winner || same.calls != 0 {
		t.Errorf("same budget: recorded=%v winner %d (was %d), %d timings; want the recorded winner, none", again.Recorded, again.Winner, sel.Winner, same.calls)
	}

	larger := &stallClock{}
	opts.Timer, opts.Budget = larger, 2*budget
	measured, err := SelectFunction(context.Background(), d, m, f, cands, lowerFn, opts)
	if err != nil {
		t.Fatal(err)
	}
	if measured.Recorded || measured.Rounds != 3 || larger.calls != 6 {
		t.Errorf("larger budget: recorded=%v, %d rounds, %d timings; want 3 rounds measured again", measured.Recorded, measured.Rounds, larger.calls)
	}
	if e, _ := db.GetSelection(key(f)); !e.Complete || e.Budget != 0 {
		t.Errorf("after the larger budget: complete=%v budget=%v", e.Complete, e.Budget)
	}
}

// References of one model share their parameters' float64 values (interp.ParamCache): an
// evaluation never writes its arguments, so every function of every example, evaluated twice
// through one cache, gives exactly what an evaluation without the cache gives.
func TestReferenceParamCacheSharesWeights(t *testing.T) {
	for _, name := range []string{"tinyllama", "qwen3-tiny", "llama-tied", "mlp", "resnet-tiny", "whisper-tiny-encoder"} {
		m, err := ir.ParseModel("../../examples/" + name + "/model.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cache := interp.NewParamCache()
		for round := range 2 {
			for _, f := range m.Functions {
				at, err := f.At(CheckAt(f))
				if err != nil {
					t.Fatal(err)
				}
				in := FunctionInputs(at, rand.New(rand.NewSource(int64(round))))
				want, _, err := interp.Run(m, f.Name, in, nil)
				if err != nil {
					t.Fatalf("%s %s: %v", name, f.Name, err)
				}
				got, _, err := interp.RunCached(m, f.Name, in, nil, cache)
				if err != nil {
					t.Fatalf("%s %s with the cache: %v", name, f.Name, err)
				}
				for k, w := range want {
					if g := got[k]; g == nil || !bytes.Equal(g.Data, w.Data) {
						t.Errorf("%s %s round %d: output %s differs with the cache", name, f.Name, round, k)
					}
				}
			}
		}
	}
}

// A candidate whose check would compile kernels new to the device waits until the candidates
// whose checks only run are checked and timed, so that its check (a compile predicted wrong
// by far) cannot spend their rounds; it is then checked when its prediction (CompileCost, not
// the mean per kernel of the checks so far) fits, and the valid candidates are timed again
// with it. The costs are synthetic: candidate 3 compiles 2 new kernels, the others none.
func TestSelectChecksExpensiveCandidateLast(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	lowerFn := lowerWith(d, m, tu.Choose(context.Background()))
	cands := []SelectCandidate{{Fn: m.Function("forward"), Static: true, Label: "static"}, {Fn: m.Function("forward_alt"), Label: "alt"},
		{Fn: m.Function("forward_wrong"), Label: "wrong"}, {Fn: m.Function("forward_relu2"), Label: "new attention"}}
	newKernels := func(p *plan.Plan) int {
		if p.Functions[0].Name == "forward_relu2" {
			return 2
		}
		return 0
	}
	for _, tc := range []struct {
		compile time.Duration
		checked bool
		winner  int
	}{{70 * time.Second, false, 1}, {time.Millisecond, true, 3}} {
		var trace bytes.Buffer
		// Candidate 1 within DropRatio of candidate 3, so that both are timed in every round.
		clock := &planClock{times: map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond, 3: 170 * time.Microsecond}}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_, sels, err := SelectFunctions(ctx, d, m, []*ir.Function{m.Function("forward")},
			func(*ir.Function) ([]SelectCandidate, error) { return cands, nil }, lowerFn,
			SelectOptions{Timer: clock, Trace: &trace, NewKernels: newKernels, KernelCost: time.Millisecond,
				CompileCost: func(p *plan.Plan) time.Duration { return time.Duration(newKernels(p)/2) * tc.compile }})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		sel := sels[0]
		tr := trace.String()
		// The first rounds stop at EvidenceRounds (round 2); the rest come after the late check.
		round, checked3 := strings.Index(tr, "forward round 2"), strings.Index(tr, "checked forward candidate 3")
		if !strings.Contains(tr, "candidate 3 waits") || round < 0 || checked3 < round || strings.Index(tr, "checked forward candidate 2") > round {
			t.Errorf("compile %v: candidate 3 (new kernels) was not checked after candidates 1 and 2 (none) and their rounds:\n%s", tc.compile, tr)
		}
		if r := sel.Results[2]; r.Valid || !strings.Contains(r.Reason, "wrong output") {
			t.Errorf("compile %v: candidate 2: %q", tc.compile, r.Reason)
		}
		r := sel.Results[3]
		if tc.checked != r.Valid || tc.checked && len(r.Times) != sel.Rounds {
			t.Errorf("compile %v: candidate 3 valid=%v %q, timed in %d of %d rounds", tc.compile, r.Valid, r.Reason, len(r.Times), sel.Rounds)
		}
		if !tc.checked && !strings.Contains(r.Reason, "not checked: the budget ran out (it would compile 2 kernels)") {
			t.Errorf("compile %v: candidate 3's reason %q", tc.compile, r.Reason)
		}
		if sel.Rounds != 5 || len(sel.Results[0].Times) != 5 || len(sel.Results[1].Times) != 5 {
			t.Errorf("compile %v: %d rounds, want 5 of candidates 0 and 1:\n%s", tc.compile, sel.Rounds, sel)
		}
		if sel.Winner != tc.winner {
			t.Errorf("compile %v: winner %d, want %d:\n%s", tc.compile, sel.Winner, tc.winner, sel)
		}
	}
}

// A result a rope part rotates is checked at the precision of its f32 angles at the check's
// positions: the one-row QKV product of a 1024-row cache (pos 1023) at 6·1023·2⁻²⁴, its f16
// cache results at f16's, the same product with a 10-row cache at f32's 1e-4.
func TestProblemToleranceRopeParts(t *testing.T) {
	qkv := func(ctx int) *kernels.Problem {
		cache := ir.T(ir.F16, ctx, 8, 64)
		p := &kernels.Problem{Op: ir.RMSNormLinear, Attrs: ir.Attrs{"eps": 1e-5},
			Args: []ir.Type{ir.T(ir.F32, 1, 2048), ir.T(ir.F32, 2048), ir.T(ir.Q8_0, 3072, 2048), ir.T(ir.I32), cache, cache},
			Outs: []ir.Type{ir.T(ir.F32, 1, 32, 64), cache, cache}, NumOpArgs: 3, Pos: 3}
		p.Parts = []kernels.Part{
			{Kind: kernels.PartRope, Cols: 2048, Out: 0, Head: 64, Theta: 500000},
			{Kind: kernels.PartRope, Cols: 512, Out: 1, Head: 64, Theta: 500000, Cache: true, State: 4},
			{Kind: kernels.PartStore, Cols: 512, Out: 2, Cache: true, State: 5},
		}
		return p
	}
	p := qkv(1024)
	if got, want := ProblemTolerance(p, 0), 6*1023*math.Ldexp(1, -24); math.Abs(got-want) > 1e-12 {
		t.Errorf("q at pos 1023: tolerance %g, want %g", got, want)
	}
	for i := 1; i <= 2; i++ {
		if got := ProblemTolerance(p, i); got != Tolerance(ir.F16) {
			t.Errorf("f16 cache result %d: tolerance %g, want f16's %g", i, got, Tolerance(ir.F16))
		}
	}
	if got := ProblemTolerance(qkv(10), 0); got != Tolerance(ir.F32) {
		t.Errorf("q at pos 9: tolerance %g, want f32's %g", got, Tolerance(ir.F32))
	}
}

// A function that computes 16-bit floats on the way (an imported model's f16 activations behind
// f32 inputs and logits) is checked within the 16-bit function tolerance, whatever its outputs'
// type; one that computes in f32 throughout, or only reads f16 parameters, keeps f32's.
func TestToleranceOfHalfFloatFunctions(t *testing.T) {
	src := []byte(`model: half
dims: {n: 2, d: 4}
weights: {init: random, seed: 1, scale: 0.25}
params:
  w: {shape: [d, d], dtype: f16}
functions:
  act_f16:
    inputs:
      x: f32[n, d]
    outputs:
      y: f32[n, d]
    body:
      - y = cast(linear(cast(x, to=f16), w), to=f32)
  weights_f16:
    inputs:
      x: f32[n, d]
    outputs:
      y: f32[n, d]
    body:
      - y = linear(x, cast(w, to=f32))
`)
	m, err := ir.ParseModelBytes("half.yaml", src, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	o := SelectOptions{}
	if got, want := o.tolerance(m.Function("act_f16"), ir.F32), FunctionTolerance(ir.F16); got != want {
		t.Errorf("f16 activations, f32 output: tolerance %g, want %g", got, want)
	}
	if got, want := (SelectOptions{tolScale: 2}).tolerance(m.Function("act_f16"), ir.F32), 2*FunctionTolerance(ir.F16); got != want {
		t.Errorf("against the device: %g, want %g", got, want)
	}
	// The cast of an f16 parameter to f32 computes an f32: exact, as the interpreter's.
	if got, want := o.tolerance(m.Function("weights_f16"), ir.F32), FunctionTolerance(ir.F32); got != want {
		t.Errorf("f16 weights read as f32: tolerance %g, want %g", got, want)
	}
}

// Tuner.CompileCost predicts each new kernel of a plan at the mean first run measured for its
// op, scaled by its SPIR-V words against the mean words of that op's configurations, and one of
// an op never measured at its words times all ops' first runs a word.
func TestTunerCompileCost(t *testing.T) {
	tu := &Tuner{}
	words := func(n int) []uint32 { return make([]uint32, n) }
	// Module keys as the lowering writes them: the template's name, then the problem's key.
	// (Distinct SPIR-V: newModules counts a kernel once.)
	p := &plan.Plan{Modules: []plan.Module{{Key: "attention_split attention[layout=shd](f32[4])->(f32[4])", SPIRV: append(words(99), 1)},
		{Key: "matmul_vec linear(f32[4])->(f32[4])", SPIRV: append(words(2999), 2)},
		{Key: "elementwise elementwise(f32[4])->(f32[4]){add}", SPIRV: append(words(499), 3)}}}
	if c := tu.CompileCost(p); c != 0 {
		t.Errorf("nothing measured: %v, want 0", c)
	}
	tu.addFirstRun("linear", firstRun{4 * time.Second, 1000})
	tu.addFirstRun("elementwise", firstRun{50 * time.Millisecond, 500})
	tu.addFirstRun("linear", firstRun{time.Second, 1000})
	tu.addFirstRun("linear", firstRun{0, 5000}) // did not get to its first run: not counted
	// linear: a mean of 2.5 s over 1000 words, this kernel 3000 words; elementwise as measured;
	// attention, never tuned: 5.05 s over 2500 words of all ops, 100 words.
	if c, want := tu.CompileCost(p), 202*time.Millisecond+3*2500*time.Millisecond+50*time.Millisecond; c != want {
		t.Errorf("CompileCost %v, want %v (attention at all ops' rate a word, linear at its mean per word)", c, want)
	}
	if got, want := tu.CompilePricing(p), "1×202ms attention (never tuned: all ops' rate a word), 1×7.5s linear, 1×50ms elementwise"; got != want {
		t.Errorf("CompilePricing %q, want %q", got, want)
	}
}

// slowClock is planClock whose timings of candidate slow (or, with slowFn, of the candidate
// whose function is named so; with all, of every candidate) each take wall of real time (until
// ctx ends).
type slowClock struct {
	planClock
	slow   int
	slowFn string
	all    bool
	wall   time.Duration
}

func (c *slowClock) TimePlan(ctx context.Context, exe *runtime.Executable, fn string, inputs map[string][]byte, cand int) (time.Duration, error) {
	if c.all || c.slowFn == "" && cand == c.slow || c.slowFn != "" && fn == c.slowFn {
		select {
		case <-time.After(c.wall):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return c.planClock.TimePlan(ctx, exe, fn, inputs, cand)
}

// A candidate checked after the rounds that then cannot be timed in EvidenceRounds rounds
// leaves the rounds before it standing (the first EvidenceRounds: the rest would come after the
// late checks), and the selection says so: here a timing of it takes 2.5 s of a 6 s selection,
// so the second rounds reach at most 2.
func TestSelectLateCandidateTooLateToTime(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	lowerFn := lowerWith(d, m, tu.Choose(context.Background()))
	warmKernels(t, d, m, lowerFn)
	cands := []SelectCandidate{{Fn: m.Function("forward"), Static: true, Label: "static"}, {Fn: m.Function("forward_alt"), Label: "alt"},
		{Fn: m.Function("forward_relu2"), Label: "new kernels"}}
	newKernels := func(p *plan.Plan) int {
		if p.Functions[0].Name == "forward_relu2" {
			return 1
		}
		return 0
	}
	clock := &slowClock{planClock: planClock{times: map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond, 2: 100 * time.Microsecond}},
		slow: 2, wall: 2500 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	_, sels, err := SelectFunctions(ctx, d, m, []*ir.Function{m.Function("forward")},
		func(*ir.Function) ([]SelectCandidate, error) { return cands, nil }, lowerFn,
		SelectOptions{Timer: clock, NewKernels: newKernels, KernelCost: time.Millisecond,
			CompileCost: func(p *plan.Plan) time.Duration { return time.Duration(newKernels(p)) * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	sel := sels[0]
	if sel.Rounds != EvidenceRounds || sel.Winner != 1 || !sel.Results[2].Valid || len(sel.Results[2].Times) != 0 || len(sel.Results[1].Times) != EvidenceRounds {
		t.Errorf("want the %d rounds of candidates 0 and 1 to stand (1 wins), candidate 2 valid and untimed:\n%s", EvidenceRounds, sel)
	}
	if !strings.Contains(sel.Why, "candidate 2 checked valid after the rounds, with too little time left to time it in 3 paired rounds") {
		t.Errorf("why: %q", sel.Why)
	}
}

// When the equal shares of the late checks fit no function's check, a function takes what its
// cheapest waiting check and the rounds after it need, while the time left holds it: here two
// functions each wait on a check predicted at 4 s in a 10 s selection. An equal share (5 s) kept
// a third for the rounds and so fitted neither the first function's check nor, in practice on
// lavapipe, any other; now the first takes 1.6 times its prediction, its check runs in milliseconds, and what it
// leaves passes on, so both functions time their late candidate.
func TestSelectLateTakesWhatItsCheckNeeds(t *testing.T) {
	sels, trace := selectLate(t, 10*time.Second, 0, 4*time.Second)
	if !strings.Contains(trace, "select: forward takes ") {
		t.Errorf("forward did not take the time its check needs:\n%s", trace)
	}
	for _, sel := range sels {
		if r := sel.Results[1]; !r.Valid || sel.Rounds != 5 || len(r.Times) != 5 || sel.Winner != 1 {
			t.Errorf("%s: want candidate 1 checked late, timed in 5 rounds and winning:\n%s", sel.Function, sel)
		}
	}
}

// selectLate selects forward and forward_alt within timeout, each between its static extraction
// and forward_relu2, whose check compiles one kernel new to the device (NewKernels), predicted
// at compile (CompileCost), and waits for the rounds. A static extraction's check takes
// staticCheck (a cold driver compile of its 4 kernels; 0: as fast as it runs). It returns the
// selections and the trace.
func selectLate(t *testing.T, timeout, staticCheck, compile time.Duration) ([]*Selection, string) {
	return selectLateWith(t, timeout, staticCheck, compile, &planClock{times: twoSpeedTimes()})
}

// selectLateWith is selectLate with the candidates timed by clock.
func selectLateWith(t *testing.T, timeout, staticCheck, compile time.Duration, clock PlanTimer) ([]*Selection, string) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	lowerFn := lowerWith(d, m, tu.Choose(context.Background()))
	warmKernels(t, d, m, lowerFn)
	newKernels := func(p *plan.Plan) int {
		if p.Functions[0].Name == "forward_relu2" {
			return 1
		}
		if staticCheck > 0 {
			time.Sleep(staticCheck)
			return 4
		}
		return 0
	}
	cands := staticOrRelu2(m, "new kernels")
	var trace bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, sels, err := SelectFunctions(ctx, d, m, []*ir.Function{m.Function("forward"), m.Function("forward_alt")}, cands, lowerFn,
		SelectOptions{Timer: clock, Trace: &trace, NewKernels: newKernels, KernelCost: time.Millisecond,
			CompileCost: func(p *plan.Plan) time.Duration {
				if p.Functions[0].Name == "forward_relu2" {
					return compile
				}
				return 0
			}})
	if err != nil {
		t.Fatal(err)
	}
	return sels, trace.String()
}

// TestSelectLateCheckByItsPrediction: a late check is bounded by its own prediction, not by the
// mean of the checks before it. The static extractions' checks here take 2.5 s each (as on a
// cold driver cache, where they compile every kernel of their function); the waiting
// candidate, one new kernel at the 0.5 s a kernel those checks took, is predicted at 1 s. With the
// mean (2.5 s) plus the time kept for the rounds, no function's share held the late check, and
// the candidate was refused unchecked.
func TestSelectLateCheckByItsPrediction(t *testing.T) {
	sels, trace := selectLate(t, 9*time.Second, 2500*time.Millisecond, 500*time.Millisecond)
	for _, sel := range sels {
		if r := sel.Results[1]; !r.Valid || sel.Rounds < EvidenceRounds || sel.Winner != 1 {
			t.Errorf("%s: want candidate 1 checked late, timed in %d rounds or more and winning:\n%s\n%s", sel.Function, EvidenceRounds, sel, trace)
		}
	}
}

// checkCost separates what a check costs beside its compiles (the checks that compiled
// nothing) from what each new kernel adds. The figures are the H100's checks of SmolLM2's
// prefill functions (docs/bench/h100-2026-12-06): checks that compiled nothing took 0.23–0.29 s,
// one that compiled 2 kernels 0.18 s; the graph as written would compile 9. Counting the run as
// one more kernel at a whole check's mean predicted it at 4.4 s, past the function's share.
func TestCheckCostSeparatesRunFromKernels(t *testing.T) {
	opts := SelectOptions{KernelCost: 10 * time.Millisecond, checks: &meanTime{}, runs: &meanTime{}, perKernel: &meanTime{}}
	if got := checkCost(opts, 9, nil, false); got != 100*time.Millisecond {
		t.Errorf("nothing measured: %v, want 10 × KernelCost", got)
	}
	// Before any check that compiled nothing, a check's time is split evenly between its
	// kernels and its run: 2.5 s with 4 kernels is 0.5 s each, and 0.5 s the run.
	opts.addCheck(2500*time.Millisecond, 4)
	if got := checkCost(opts, 1, nil, false); got != time.Second {
		t.Errorf("after a check of 4 kernels in 2.5 s: %v, want 1 s", got)
	}
	opts = SelectOptions{KernelCost: 10 * time.Millisecond, checks: &meanTime{}, runs: &meanTime{}, perKernel: &meanTime{}}
	opts.addCheck(270*time.Millisecond, 0)
	opts.addCheck(230*time.Millisecond, 0)
	opts.addCheck(180*time.Millisecond, 2) // faster than a run: its kernels added nothing
	if got := checkCost(opts, 9, nil, false); got != 250*time.Millisecond {
		t.Errorf("9 kernels: %v, want 0.25 s (the run's mean, kernels measured at 0)", got)
	}
	opts.addCheck(1250*time.Millisecond, 2) // 1 s beyond the run: 0.5 s a kernel
	if got, want := checkCost(opts, 9, nil, false), 250*time.Millisecond+9*250*time.Millisecond; got != want {
		t.Errorf("9 kernels: %v, want %v (a kernel at the mean of 0 and 0.5 s)", got, want)
	}
	// Risky: at least the run plus CompileCost's prediction.
	opts.CompileCost = func(*plan.Plan) time.Duration { return 10 * time.Second }
	if got, want := checkCost(opts, 9, &plan.Plan{}, true), 250*time.Millisecond+10*time.Second; got != want {
		t.Errorf("risky: %v, want %v", got, want)
	}
}

// The selection's prefetch lowers every candidate once, the static extractions of all
// functions before any other candidate, and stops when asked.
func TestPrefetchCandidatesOrder(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	lowerFn := lowerWith(d, m, tu.Choose(context.Background()))
	fa, fb := m.Function("forward"), m.Function("forward_alt")
	cands := func(f *ir.Function) ([]SelectCandidate, error) {
		return []SelectCandidate{{Fn: f, Static: true}, {Fn: m.Function("forward_relu2")}}, nil
	}
	var order []string
	record := func(fns []*ir.Function) (*plan.Plan, error) {
		order = append(order, fns[0].Name)
		return lowerFn(fns)
	}
	plans := 0
	lowered := &sync.Map{}
	stop, done := prefetchCandidates(context.Background(), []*ir.Function{fa, fb}, cands, record, func(p *plan.Plan) {
		if len(p.Modules) == 0 {
			t.Error("a prefetched plan without modules")
		}
		plans++
	}, lowered)
	<-done
	stop()
	if want := []string{"forward", "forward_alt", "forward_relu2", "forward_relu2"}; !slices.Equal(order, want) || plans != 4 {
		t.Errorf("lowered %v (%d prefetched), want %v", order, plans, want)
	}
	// What it keeps of each lowering: the program's key, distinct for distinct programs.
	o := SelectOptions{lowered: lowered}
	la, okA := o.loweredProgram(fa)
	lr, okR := o.loweredProgram(m.Function("forward_relu2"))
	if !okA || !okR || la.key == "" || la.key == lr.key || la.weights == 0 {
		t.Errorf("kept %+v (%v) for forward and %+v (%v) for forward_relu2", la, okA, lr, okR)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	order = nil
	stop, _ = prefetchCandidates(ctx, []*ir.Function{fa, fb}, cands, record, func(*plan.Plan) {}, nil)
	stop()
	if len(order) != 0 {
		t.Errorf("lowered %v after the context ended", order)
	}
}

// A candidate the prefetch has lowered to the program of an earlier valid candidate is that
// program without a second lowering: here a copy of forward (another function, the same graph)
// is lowered once, by the prefetch, and reported as candidate 0's program. The reference is
// held until the prefetch has lowered both, so that the checks come after it.
func TestSelectSkipsLoweringPrefetched(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	ctx := context.Background()
	base := lowerWith(d, m, tu.Choose(ctx))
	fwd := m.Function("forward")
	twin := *fwd
	var mu sync.Mutex
	lowerings := map[*ir.Function]int{}
	lowerFn := func(fns []*ir.Function) (*plan.Plan, error) {
		mu.Lock()
		lowerings[fns[0]]++
		mu.Unlock()
		return base(fns)
	}
	inputs, want, err := StartReference(m, fwd, 0, nil).Wait()
	if err != nil {
		t.Fatal(err)
	}
	held := &Reference{done: make(chan struct{}), inputs: inputs, want: want}
	prefetched := 0
	prefetch := func(*plan.Plan) {
		if prefetched++; prefetched == 2 {
			close(held.done)
		}
	}
	cands := func(*ir.Function) ([]SelectCandidate, error) {
		return []SelectCandidate{{Fn: fwd, Static: true, Label: "static"}, {Fn: &twin, Label: "twin"}}, nil
	}
	clock := &planClock{times: map[int]time.Duration{0: 100 * time.Microsecond, 1: 100 * time.Microsecond}}
	_, sels, err := SelectFunctions(ctx, d, m, []*ir.Function{fwd}, cands, lowerFn,
		SelectOptions{Rounds: 1, Timer: clock, Prefetch: prefetch, References: map[*ir.Function]*Reference{fwd: held}})
	if err != nil {
		t.Fatal(err)
	}
	r := sels[0].Results[1]
	if r.Reason != SameProgram+"0 (not run again)" || r.Weights == 0 {
		t.Errorf("the twin: %q, weights %d; want candidate 0's program:\n%s", r.Reason, r.Weights, sels[0])
	}
	if n := lowerings[&twin]; n != 1 {
		t.Errorf("the twin was lowered %d times, want once (by the prefetch)", n)
	}
	// The static extraction's check runs the plan the prefetch lowered.
	if n := lowerings[fwd]; n != 1 {
		t.Errorf("the static extraction was lowered %d times, want once (by the prefetch)", n)
	}
}

// TestSelectKeepsReserveForEarlierRounds: once a function checked before has candidates to time
// and less than the reserve is left, a later function keeps its static extraction unchecked
// rather than spend the rounds' time confirming what the static path takes. Here the load of
// forward's second candidate takes 4.5 s (as a check waiting for its pipelines did on the H100)
// of a 6 s selection whose reserve is 2 s: forward_alt is then not checked, and forward is timed.
func TestSelectKeepsReserveForEarlierRounds(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	lowerFn := lowerWith(d, m, tu.Choose(context.Background()))
	warmKernels(t, d, m, lowerFn)
	slow := 0 // 1: the next load waits
	newKernels := func(p *plan.Plan) int {
		if p.Functions[0].Name == "forward_relu2" && slow == 0 {
			slow = 1
		}
		return 0
	}
	var pipes []*runtime.Pipeline
	defer func() {
		for _, pl := range pipes {
			pl.Close()
		}
	}()
	pipeline := func(k runtime.Kernel) (*runtime.Pipeline, error) {
		if slow == 1 {
			slow = 2
			time.Sleep(4500 * time.Millisecond)
		}
		pl, err := d.NewPipeline(k)
		if err == nil {
			pipes = append(pipes, pl)
		}
		return pl, err
	}
	cands := staticOrRelu2(m, "other")
	clock := &planClock{times: twoSpeedTimes()}
	var trace bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	_, sels, err := SelectFunctions(ctx, d, m, []*ir.Function{m.Function("forward"), m.Function("forward_alt")}, cands, lowerFn,
		SelectOptions{Timer: clock, Trace: &trace, NewKernels: newKernels, KernelCost: time.Millisecond,
			Load: runtime.LoadOptions{Pipelines: pipeline}})
	if err != nil {
		t.Fatal(err)
	}
	if sels[0].Rounds < 1 || !sels[0].Results[1].Valid {
		t.Errorf("forward: want its two candidates checked and timed:\n%s\n%s", sels[0], trace.String())
	}
	if r := sels[1].Results[0]; r.Valid || !strings.Contains(sels[1].Why, "kept for timing the candidates of the functions checked before it") {
		t.Errorf("forward_alt: want its static extraction unchecked, the time kept for forward's rounds:\n%s\n%s", sels[1], trace.String())
	}
}

// TestSelectTimesWhileWaiting: while a function's reference is still evaluated, the functions
// checked before it are timed (a paired round each in turn) instead of the device idling: with
// forward_alt's reference ready only after 800 ms, forward's rounds come before forward_alt's
// checks.
func TestSelectTimesWhileWaiting(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	lowerFn := lowerWith(d, m, tu.Choose(context.Background()))
	warmKernels(t, d, m, lowerFn)
	alt := m.Function("forward_alt")
	own := StartReference(m, alt, 0, nil)
	if _, _, err := own.Wait(); err != nil {
		t.Fatal(err)
	}
	late := &Reference{done: make(chan struct{}), inputs: own.inputs, want: own.want, started: time.Now()}
	go func() {
		time.Sleep(800 * time.Millisecond)
		late.began, late.ended = time.Now(), time.Now()
		close(late.done)
	}()
	cands := staticOrRelu2(m, "other")
	clock := &planClock{times: twoSpeedTimes()}
	var trace bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, sels, err := SelectFunctions(ctx, d, m, []*ir.Function{m.Function("forward"), alt}, cands, lowerFn,
		SelectOptions{Timer: clock, Trace: &trace, References: map[*ir.Function]*Reference{alt: late}})
	if err != nil {
		t.Fatal(err)
	}
	tr := trace.String()
	round, check := strings.Index(tr, "select: forward round 0"), strings.Index(tr, "select: check forward_alt candidate 0")
	if round < 0 || check < 0 || round > check {
		t.Errorf("want forward timed while forward_alt's reference is evaluated, before its checks:\n%s", tr)
	}
	if sels[0].Rounds < 1 || sels[1].Rounds < 1 {
		t.Errorf("want both functions timed:\n%s\n%s\n%s", sels[0], sels[1], tr)
	}
}

// TestLargest: the k largest of a row, largest first, are a descending sort's first k (ties,
// infinities, NaNs last), for every k up to the row's length.
func TestLargest(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for trial := 0; trial < 50; trial++ {
		s := make([]float64, 1+rng.Intn(40))
		for i := range s {
			switch rng.Intn(12) {
			case 0:
				s[i] = math.NaN()
			case 1:
				s[i] = math.Inf(1 - 2*rng.Intn(2))
			default:
				s[i] = float64(rng.Intn(9) - 4) // ties
			}
		}
		want := slices.Clone(s)
		sort.Sort(sort.Reverse(sort.Float64Slice(want)))
		for k := 1; k <= len(s); k++ {
			got := largest(s, k)
			for i := range got {
				if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
					t.Fatalf("largest(%v, %d) = %v, want %v", s, k, got, want[:k])
				}
			}
		}
	}
}

// The time a function's share leaves passes back to a function whose rounds its own share cut
// short (topUpRounds): forward's paired rounds take 1.2 s each (its static extraction's timing;
// as tinyllama's prefill on lavapipe), so its half of an 8 s selection holds three of them;
// forward_alt's are instant and leave the rest of its half, in which forward times two more
// (five, the rounds asked for). Before, forward kept three rounds and the time left went unused
// by the selection.
func TestSelectTopsUpShortRounds(t *testing.T) {
	clock := &slowClock{planClock: planClock{times: twoSpeedTimes()},
		slowFn: "forward", wall: 1200 * time.Millisecond}
	sels, trace := selectLateWith(t, 8*time.Second, 0, time.Millisecond, clock)
	if sel := sels[1]; sel.Rounds != 5 {
		t.Errorf("forward_alt: want 5 rounds:\n%s", sel)
	}
	sel := sels[0]
	if sel.Rounds < 4 || len(sel.Results[1].Times) != sel.Rounds || !strings.Contains(trace, "select: forward timed ") {
		t.Errorf("forward: want more rounds than its own share held (3), topped up with the time forward_alt left:\n%s\n%s", sel, trace)
	}
}

// staticOrRelu2 is the candidates of the late-check tests: the function's static extraction
// and forward_relu2 (label), whose check compiles a kernel new to the device.
func staticOrRelu2(m *ir.Model, label string) func(f *ir.Function) ([]SelectCandidate, error) {
	return func(f *ir.Function) ([]SelectCandidate, error) {
		return []SelectCandidate{{Fn: f, Static: true, Label: "static"}, {Fn: m.Function("forward_relu2"), Label: label}}, nil
	}
}

// twoSpeedTimes are a planClock's times of the late-check tests: candidate 0 at 300 µs,
// candidate 1 at 100 µs.
func twoSpeedTimes() map[int]time.Duration {
	return map[int]time.Duration{0: 300 * time.Microsecond, 1: 100 * time.Microsecond}
}

// A check whose load uploads the weights into the selection's share says how long that load took
// (the checks' mean leaves it out: later checks share the weights); a check sharing them says
// nothing. Both run as references (want nil): their outputs come back typed.
func TestCheckCandidateUploadTime(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	ctx := context.Background()
	lowerFn := lowerWith(d, m, tu.Choose(ctx))
	share := runtime.NewWeightShare()
	defer share.Close()
	opts := SelectOptions{Load: runtime.LoadOptions{Weights: share}}
	ref := m.Function("forward")
	ins := map[string][]byte{}
	for name, x := range FunctionInputs(ref, rand.New(rand.NewSource(1))) {
		ins[name] = deviceBytes(x)
	}
	admit := func(string, *plan.Plan) string { return "" }
	first := checkCandidate(ctx, d, m, ref, ref, nil, ins, lowerFn, opts, admit)
	second := checkCandidate(ctx, d, m, ref, ref, nil, ins, lowerFn, opts, admit)
	if first.exe == nil || second.exe == nil {
		t.Fatalf("checks failed: %q, %q", first.reason, second.reason)
	}
	defer first.exe.Close()
	defer second.exe.Close()
	if first.upload <= 0 || second.upload != 0 || share.Regions() != 1 {
		t.Errorf("upload times %v then %v with %d regions: want the first load's alone", first.upload, second.upload, share.Regions())
	}
	if y := first.outs["y"]; y == nil || !y.Type.Equal(ref.Outputs[0].Value.Type()) || Compare(second.outs["y"], y, 0) != "" {
		t.Errorf("the reference outputs: %v and %v", first.outs, second.outs)
	}
}

// A function whose rounds wait for a late check keeps its share of the time while the
// functions after it time theirs, and those stop at EvidenceRounds until the late checks are
// done: here "forward" waits for a candidate with new kernels while "forward_alt", checked after
// it, could fill the 1.6 s with five rounds of 200 ms and leave forward two.
func TestSelectRoundsLeaveLateChecksTheirShare(t *testing.T) {
	newKernels := func(p *plan.Plan) int {
		if p.Functions[0].Name == "forward_relu2" {
			return 1
		}
		return 0
	}
	sels, trace := selectTwoTimed(t, "forward_relu2", 100*time.Millisecond, 1600*time.Millisecond,
		SelectOptions{NewKernels: newKernels, KernelCost: time.Millisecond,
			CompileCost: func(p *plan.Plan) time.Duration { return time.Duration(newKernels(p)) * time.Millisecond }})
	if !strings.Contains(trace, "forward candidate 1 waits") {
		t.Fatalf("forward's candidate 1 did not wait for the rounds:\n%s", trace)
	}
	for _, sel := range sels {
		if sel.Rounds < EvidenceRounds {
			t.Errorf("%s timed %d paired rounds, want at least %d:\n%s\n%s", sel.Function, sel.Rounds, EvidenceRounds, sel, trace)
		}
	}
}

// selectTwoTimed selects forward (its static extraction and the function named second) and
// forward_alt (its static extraction and forward) within budget, each timing taking wall of
// wall time, with opts (its Timer and Trace set here); it returns the selections and the trace.
func selectTwoTimed(t *testing.T, second string, wall, budget time.Duration, opts SelectOptions) ([]*Selection, string) {
	t.Helper()
	d, m, tu := selectModel(t, "testdata/select.yaml")
	lowerFn := lowerWith(d, m, tu.Choose(context.Background()))
	warmKernels(t, d, m, lowerFn)
	cands := map[string][]SelectCandidate{
		"forward":     {{Fn: m.Function("forward"), Static: true, Label: "static"}, {Fn: m.Function(second), Label: second}},
		"forward_alt": {{Fn: m.Function("forward_alt"), Static: true, Label: "static"}, {Fn: m.Function("forward"), Label: "other"}},
	}
	var trace bytes.Buffer
	opts.Timer = &slowClock{planClock: planClock{times: map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond}}, all: true, wall: wall}
	opts.Trace = &trace
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	_, sels, err := SelectFunctions(ctx, d, m, []*ir.Function{m.Function("forward"), m.Function("forward_alt")},
		func(f *ir.Function) ([]SelectCandidate, error) { return cands[f.Name], nil }, lowerFn, opts)
	if err != nil {
		t.Fatal(err)
	}
	return sels, trace.String()
}

// A paired round that starts within its function's share runs to its end within the
// selection's time: an interrupted round is dropped, and a share shorter than one round would
// otherwise time nothing (SmolLM2's prefill on the H100). Here a timing takes 450 ms of wall
// time, so a round of two candidates takes 0.9 s, past forward's half of a 1.5 s selection:
// forward's round still counts; forward_alt's, cut by the selection's end, does not.
func TestSelectRoundOutlastsItsShare(t *testing.T) {
	sels, trace := selectTwoTimed(t, "forward_alt", 450*time.Millisecond, 1500*time.Millisecond, SelectOptions{})
	if sels[0].Rounds != 1 || sels[1].Rounds != 0 {
		// (Their first rounds go cheapest first: on a loaded machine forward_alt's checks may
		// have run longer, and its round come first.)
		sels[0], sels[1] = sels[1], sels[0]
	}
	if sels[0].Rounds != 1 || sels[1].Rounds != 0 {
		t.Errorf("paired rounds %d and %d, want 1 (the function timed first, past its share) and 0 (the other, cut at the selection's end):\n%s\n%s\n%s",
			sels[0].Rounds, sels[1].Rounds, sels[0], sels[1], trace)
	}
}

// A candidate at least DropRatio times the fastest in each of the first DropAfter rounds, or within
// TwinRatio of one as fast or faster (its twin), is not timed in the rounds after them; the others
// are. The static extraction is never dropped, however slow: a replacement is judged against it.
func TestSelectDropsClearlySlower(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	ctx := context.Background()
	lowerFn := lowerWith(d, m, tu.Choose(ctx))
	cands := []SelectCandidate{
		{Fn: m.Function("forward"), Label: "as written", Static: true},
		{Fn: m.Function("forward_alt"), Label: "matmul+add"},
		{Fn: m.Function("forward_relu2"), Label: "relu twice"},
	}
	count := func(calls []int, c int) int {
		n := 0
		for _, x := range calls {
			if x == c {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		name  string
		times map[int]time.Duration
		want  [3]int // rounds timing each candidate
	}{
		{"slow candidate", map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond, 2: 600 * time.Microsecond}, [3]int{5, 5, DropAfter}},
		{"slow static", map[int]time.Duration{0: 600 * time.Microsecond, 1: 200 * time.Microsecond, 2: 210 * time.Microsecond}, [3]int{5, 5, 5}},
		{"near the ratio", map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond, 2: 240 * time.Microsecond}, [3]int{5, 5, 5}},
		// Within TwinRatio of candidate 1 and no faster: the rounds cannot tell them apart.
		{"twin", map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond, 2: 202 * time.Microsecond}, [3]int{5, 5, DropAfter}},
		// 2.5% slower than candidate 1: not its twin.
		{"near twin", map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond, 2: 205 * time.Microsecond}, [3]int{5, 5, 5}},
	} {
		clock := &planClock{times: tc.times}
		sel, err := SelectFunction(ctx, d, m, m.Function("forward"), cands, lowerFn, SelectOptions{Rounds: 5, Timer: clock})
		if err != nil {
			t.Fatal(err)
		}
		got := [3]int{count(clock.calls, 0), count(clock.calls, 1), count(clock.calls, 2)}
		if got != tc.want || sel.Rounds != 5 || sel.Winner != 1 {
			t.Errorf("%s: candidates timed %v times, want %v; %d rounds, winner %d (want 5 and 1):\n%s", tc.name, got, tc.want, sel.Rounds, sel.Winner, sel)
		}
		for i, r := range sel.Results {
			if len(r.Times) != tc.want[i] {
				t.Errorf("%s: candidate %d has %d times, want %d", tc.name, i, len(r.Times), tc.want[i])
			}
		}
		if r := sel.Results[2].Ratio; tc.name == "slow candidate" && (r < 2.9 || r > 3.1) {
			t.Errorf("%s: the dropped candidate's ratio to the winner %.3f, want about 3 (over the rounds that timed it)", tc.name, r)
		}
		if dropped := strings.Contains(sel.String(), "timed in the first"); dropped != (tc.want[2] == DropAfter) {
			t.Errorf("%s: the report says a candidate was dropped: %v, want %v:\n%s", tc.name, dropped, tc.want[2] == DropAfter, sel)
		}
		if tc.name == "twin" && !strings.Contains(sel.String(), "within 2% of candidate 1, as fast or faster, in each: prune") {
			t.Errorf("twin: the report does not say whose twin it was:\n%s", sel)
		}
	}
}

// A candidate whose last timing took longer than RepTime gets fewer repetitions, at least 2.
func TestRoundReps(t *testing.T) {
	for _, c := range []struct {
		reps int
		last time.Duration
		want int
	}{
		{5, 0, 5}, {5, time.Millisecond, 5}, {5, 5 * time.Millisecond, 5}, {5, 6 * time.Millisecond, 5},
		{5, 10 * time.Millisecond, 3}, {5, 22 * time.Millisecond, 2}, {5, time.Second, 2}, {1, 10 * time.Millisecond, 1},
	} {
		if got := roundReps(c.reps, c.last); got != c.want {
			t.Errorf("roundReps(%d, %v) = %d, want %d", c.reps, c.last, got, c.want)
		}
	}
}

// The functions' first rounds go cheapest first (their valid candidates' check runs added up, in
// powers of two of 10 ms), so that what the cheap ones leave of their shares passes to the dear
// ones; within a power, and under 10 ms, they keep their order.
func TestCheapestFirst(t *testing.T) {
	ms := time.Millisecond
	ss := []*selecting{{runs: 900 * ms}, {runs: 20 * ms}, {runs: 300 * ms}, {runs: 30 * ms}, {runs: 7 * ms}, {runs: 400 * time.Microsecond}, {runs: 800 * ms}}
	// classes 7, 2, 5, 2, 0, 0, 7
	if got, want := cheapestFirst(ss), []int{4, 5, 1, 3, 2, 0, 6}; !equalInts(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// A function short of EvidenceRounds takes what its rounds up to them need from the time the
// others left, not an equal share that holds none: forward's static candidate takes 1 s a
// timing, so its first share (about half of 4 s) holds 1 round; forward_alt's rounds are quick
// and leave about 2.7 s, whose equal half held 1 more round of forward's; now it takes 2 s for 2.
func TestSelectTopUpToEvidence(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	lowerFn := lowerWith(d, m, tu.Choose(context.Background()))
	warmKernels(t, d, m, lowerFn)
	cands := map[string][]SelectCandidate{
		"forward":     {{Fn: m.Function("forward"), Static: true, Label: "static"}, {Fn: m.Function("forward_relu2"), Label: "relu twice"}},
		"forward_alt": {{Fn: m.Function("forward_alt"), Static: true, Label: "static"}, {Fn: m.Function("forward_relu2"), Label: "relu twice"}},
	}
	var trace bytes.Buffer
	clock := &slowClock{planClock: planClock{times: map[int]time.Duration{0: 300 * time.Microsecond, 1: 200 * time.Microsecond}}, slowFn: "forward", wall: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	_, sels, err := SelectFunctions(ctx, d, m, []*ir.Function{m.Function("forward"), m.Function("forward_alt")},
		func(f *ir.Function) ([]SelectCandidate, error) { return cands[f.Name], nil }, lowerFn, SelectOptions{Timer: clock, Trace: &trace})
	if err != nil {
		t.Fatal(err)
	}
	if sels[0].Rounds < EvidenceRounds || sels[1].Rounds < EvidenceRounds || !strings.Contains(trace.String(), "forward takes") {
		t.Errorf("paired rounds %d and %d, want %d or more each, forward's taken from the time left:\n%s\n%s\n%s",
			sels[0].Rounds, sels[1].Rounds, EvidenceRounds, sels[0], sels[1], trace.String())
	}
}

// A waiting candidate whose kernels were made while it waited (here NewKernels counts its one new
// kernel only at its first check, as after the prefetch; the prefetch itself makes nothing) is
// checked before the valid candidates are timed: the rounds run once, with all three. Before,
// the first late check made two valid, those two were timed in 3 rounds, and the rounds began
// again with the third.
func TestSelectLateReadyCheckedBeforeRounds(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	lowerFn := lowerWith(d, m, tu.Choose(context.Background()))
	warmKernels(t, d, m, lowerFn)
	var mu sync.Mutex
	asked := map[string]int{}
	newKernels := func(p *plan.Plan) int {
		mu.Lock()
		defer mu.Unlock()
		name := p.Functions[0].Name
		asked[name]++
		if name != "forward" && asked[name] == 1 {
			return 1
		}
		return 0
	}
	cands := []SelectCandidate{{Fn: m.Function("forward"), Static: true, Label: "static"},
		{Fn: m.Function("forward_relu2"), Label: "relu twice"}, {Fn: m.Function("forward_relu3"), Label: "relu three times"}}
	clock := &planClock{times: map[int]time.Duration{0: 300 * time.Microsecond, 1: 270 * time.Microsecond, 2: 240 * time.Microsecond}}
	var trace bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, sels, err := SelectFunctions(ctx, d, m, []*ir.Function{m.Function("forward")},
		func(*ir.Function) ([]SelectCandidate, error) { return cands, nil }, lowerFn,
		SelectOptions{Timer: clock, Trace: &trace, NewKernels: newKernels, KernelCost: time.Millisecond,
			CompileCost: func(*plan.Plan) time.Duration { return time.Millisecond },
			Prefetch:    func(*plan.Plan) {}})
	if err != nil {
		t.Fatal(err)
	}
	sel := sels[0]
	if n := strings.Count(trace.String(), "select: forward round 0\n"); n != 1 {
		t.Errorf("the rounds began %d times, want once:\n%s", n, trace.String())
	}
	if sel.Rounds != 5 || sel.Winner != 2 || len(sel.Results[1].Times) != 5 || len(sel.Results[2].Times) != 5 {
		t.Errorf("want all three timed in 5 rounds and candidate 2 winning:\n%s", sel)
	}
}

// The prefetch lowers the candidates several at a time where the host has the processors
// (prefetchWorkers), sharing one fold cache: each candidate's program is the one a lowering of
// it alone makes, and every candidate is prefetched once. Run with -race -cpu 16 it checks the
// lowerings beside each other.
func TestPrefetchCandidatesInParallel(t *testing.T) {
	d, m, tu := selectModel(t, "testdata/select.yaml")
	choose := tu.Choose(context.Background())
	fold := lower.NewFoldCache()
	lowerFn := func(fns []*ir.Function) (*plan.Plan, error) {
		p, _, err := lower.Lower(m, fns, lower.Options{Caps: CapsOf(&d.Info), Device: d.DeviceFingerprint(), CompilerVersion: "vkc test",
			Choose: choose, Folds: fold})
		return p, err
	}
	names := []string{"forward", "forward_alt", "forward_relu2", "forward_relu3", "forward_wrong"}
	var fns []*ir.Function
	for _, n := range names {
		fns = append(fns, m.Function(n))
	}
	cands := func(f *ir.Function) ([]SelectCandidate, error) {
		var c []SelectCandidate
		for _, g := range fns {
			c = append(c, SelectCandidate{Fn: g, Static: g == f})
		}
		return c, nil
	}
	var mu sync.Mutex
	prefetched := 0
	lowered := &sync.Map{}
	_, done := prefetchCandidates(context.Background(), fns, cands, lowerFn, func(*plan.Plan) {
		mu.Lock()
		prefetched++
		mu.Unlock()
	}, lowered)
	<-done
	if want := len(fns) * len(fns); prefetched != want {
		t.Errorf("%d plans prefetched, want %d (each function's candidates, %d workers)", prefetched, want, prefetchWorkers())
	}
	for _, f := range fns {
		v, ok := lowered.Load(f)
		if !ok {
			t.Fatalf("%s was not lowered", f.Name)
		}
		p, err := lowerWith(d, m, choose)([]*ir.Function{f})
		if err != nil {
			t.Fatal(err)
		}
		if got := v.(loweredProgram).key; got != programKey(p) {
			t.Errorf("%s: the prefetch's program differs from a lowering of it alone", f.Name)
		}
	}
}
