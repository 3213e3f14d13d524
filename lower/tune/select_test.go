package tune

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

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
	d := testDevice(t)
	m, err := ir.ParseModel("testdata/select.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tu := &Tuner{Device: d, Compiler: "vkc test", Timing: &fakeClock{timeOf: bowl}, Exhaustive: 2, Budget: 2}
	defer tu.Close()
	ctx := context.Background()
	lowerFn := func(fns []*ir.Function) (*plan.Plan, error) {
		p, _, err := lower.Lower(m, fns, lower.Options{Caps: CapsOf(&d.Info), Device: d.DeviceFingerprint(), CompilerVersion: "vkc test", Choose: tu.Choose(ctx)})
		return p, err
	}
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
	d := testDevice(t)
	m, err := ir.ParseModel("testdata/select.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tu := &Tuner{Device: d, Compiler: "vkc test", Timing: &fakeClock{timeOf: bowl}, Exhaustive: 2, Budget: 2}
	defer tu.Close()
	ctx := context.Background()
	lowerFn := func(fns []*ir.Function) (*plan.Plan, error) {
		p, _, err := lower.Lower(m, fns, lower.Options{Caps: CapsOf(&d.Info), Device: d.DeviceFingerprint(), CompilerVersion: "vkc test", Choose: tu.Choose(ctx)})
		return p, err
	}
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
	lowerFn := func(fns []*ir.Function) (*plan.Plan, error) {
		p, _, err := lower.Lower(m, fns, lower.Options{Caps: CapsOf(&d.Info), Device: d.DeviceFingerprint(), CompilerVersion: "vkc test", Choose: tu.Choose(ctx)})
		return p, err
	}
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
