package tune

import (
	"context"
	"errors"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/runtime"
)

var toySpace = []kernels.Param{
	kernels.Ints("wg", 32, 64, 128),
	kernels.Ints("per", 1, 2, 4),
	kernels.Ints("variant", 0, 1, 2, 3),
}

// The tuner finds the known best point of a fake clock, and rejects every invalid configuration:
// the wrong kernel (which the clock would rank fastest), the Build error and the predicate
// failure are never timed and never chosen.
func TestTunerFindsKnownBestAndRejectsInvalid(t *testing.T) {
	clock := &fakeClock{timeOf: bowl}
	tm := toyTemplate("toy", 1, toySpace...)
	tu := toyTuner(t, clock, tm)
	p := toyProblem(1000)
	c, err := tu.Best(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Static || c.Template != tm || c.Config.Key() != "per=2,variant=0,wg=64" {
		t.Fatalf("chose %s [%s] (static %v), want toy [per=2,variant=0,wg=64]", c.Template.Name, c.Config.Key(), c.Static)
	}
	if want := bowl("toy", c.Config); c.Time != want {
		t.Errorf("time %v, want the clock's %v", c.Time, want)
	}
	e := c.Entries[0]
	if !e.Complete || e.Tried != 27 {
		t.Errorf("entry complete=%v tried=%d, want a complete search of 27 configurations (36 points, 9 rejected by the predicate)", e.Complete, e.Tried)
	}
	for _, key := range clock.timed {
		if !strings.Contains(key, "variant=0") {
			t.Errorf("timed an invalid configuration %s", key)
		}
	}
	if len(clock.timed) != 9 {
		t.Errorf("timed %d configurations, want the 9 valid ones", len(clock.timed))
	}
	var wrong, build int
	for k, why := range e.Invalid {
		switch {
		case strings.Contains(k, "variant=1") && strings.HasPrefix(why, "wrong result"):
			wrong++
		case strings.Contains(k, "variant=2") && strings.HasPrefix(why, "build:"):
			build++
		default:
			t.Errorf("unexpected invalid configuration %s: %s", k, why)
		}
	}
	if wrong != 9 || build != 9 {
		t.Errorf("%d wrong-result and %d build rejections, want 9 and 9", wrong, build)
	}
	for k := range e.Times {
		if !strings.Contains(k, "variant=0") {
			t.Errorf("invalid configuration %s has a time", k)
		}
	}
	// Variants 0 and 1 of each (wg, per) are distinct pipelines; nothing was created twice.
	if n := tu.pipes.Created(); n != 18 || tu.pipes.Len() != 0 {
		t.Errorf("%d pipelines created, %d held; want 18 (one per distinct module and specialization), none held after the search", n, tu.pipes.Len())
	}
	s := tu.Stats()
	if s.Kernels != 1 || s.Searches != 1 || s.Configs != 27 || s.Invalid != 18 || s.Reused != 0 {
		t.Errorf("stats %+v", s)
	}
}

// With the device's own timing (runtime Measure), a kernel that does 2048 extra operations per
// element loses to the plain one, although it is the space's default.
func TestTunerMeasuresOnDevice(t *testing.T) {
	tm := toyTemplate("toy_slow", 1, kernels.Ints("slow", 1, 0), kernels.Ints("wg", 64))
	tu := toyTuner(t, nil, tm)
	tu.Timing = DeviceTiming{Options: runtimeOptionsQuick}
	c, err := tu.Best(context.Background(), toyProblem(1<<14))
	if err != nil {
		t.Fatal(err)
	}
	e := c.Entries[0]
	slow, fast := e.Times["slow=1,wg=64"], e.Times["slow=0,wg=64"]
	t.Logf("slow %v, fast %v", slow, fast)
	if c.Config["slow"] != 0 || fast <= 0 || slow <= fast {
		t.Errorf("chose [%s]; times slow %v, fast %v", c.Config.Key(), slow, fast)
	}

	// Measured fast first, the slow kernel is cut after its checking run: it cannot win.
	var stats TimingStats
	tm2 := toyTemplate("toy_slow_last", 1, kernels.Ints("slow", 0, 1), kernels.Ints("wg", 64))
	tu2 := toyTuner(t, nil, tm2)
	tu2.Timing = DeviceTiming{Options: runtimeOptionsQuick, Stats: &stats}
	c, err = tu2.Best(context.Background(), toyProblem(1<<14))
	if err != nil {
		t.Fatal(err)
	}
	if c.Config["slow"] != 0 || stats.Measured != 1 || stats.Cut != 1 {
		t.Errorf("chose [%s]; %d measured, %d cut; want slow=0, 1 and 1", c.Config.Key(), stats.Measured, stats.Cut)
	}
}

// The selection across templates follows measurement, not the static estimate: the roofline
// ranks toy_a first (it declares a quarter of toy_b's bytes), the clock says toy_b at wg=128 is
// fastest, and that is what Choose returns and Cost reports.
func TestChooseMeasuredWinnerRankedSecondByStaticEstimate(t *testing.T) {
	a := toyTemplate("toy_a", 1, kernels.Ints("wg", 64, 128))
	b := toyTemplate("toy_b", 4, kernels.Ints("wg", 64, 128))
	clock := &fakeClock{timeOf: func(tmpl string, c kernels.Config) time.Duration {
		if tmpl == "toy_a" {
			return 200 * time.Microsecond
		}
		return time.Duration(220-c["wg"]) * time.Microsecond // wg=64: 156 µs, wg=128: 92 µs
	}}
	tu := toyTuner(t, clock, a, b)
	p := toyProblem(4096)
	estimate := func(l *kernels.Launch) time.Duration { return lower.Estimate(l, lower.Lavapipe) }
	static := CheapestOf(tu.Caps, tu.Templates, estimate)
	tu.Static = static
	// The static ranking: toy_a first, toy_b second.
	ea, _, _ := kernels.Build(a, p, kernels.Lavapipe)
	eb, _, _ := kernels.Build(b, p, kernels.Lavapipe)
	if !(estimate(ea) < estimate(eb)) {
		t.Fatalf("static estimates %v (toy_a) and %v (toy_b): the test needs toy_a ranked first", estimate(ea), estimate(eb))
	}
	if st, _, err := static(p); err != nil || st != a {
		t.Fatalf("static choice %v (%v), want toy_a", st, err)
	}
	tmpl, cfg, err := tu.Choose(context.Background())(p)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl != b || cfg.Key() != "wg=128" {
		t.Errorf("Choose gave %s [%s], want the measured winner toy_b [wg=128]", tmpl.Name, cfg.Key())
	}
	if d, ok := tu.Cost(context.Background(), p); !ok || d != 92*time.Microsecond {
		t.Errorf("Cost = %v, %v; want 92µs, true", d, ok)
	}
	if n := clock.count(); n != 4 {
		t.Errorf("timed %d configurations, want 4 (Cost reuses the choice)", n)
	}
	gains := tu.Gains()
	if len(gains) != 1 || gains[0].Static != "toy_a [wg=64]" || gains[0].StaticTime != 200*time.Microsecond ||
		gains[0].Tuned != "toy_b [wg=128]" || gains[0].Ratio() < 2.17 || gains[0].Ratio() > 2.18 {
		t.Errorf("gains %+v", gains)
	}
}

// Cancelling the context stops the search at once: the problem gets the best configuration
// timed so far, a problem tuned after that gets the static choice (neither is an error), the
// interrupted search is kept as incomplete, and a later run resumes it without timing again what
// was already timed.
func TestTunerCancelAndResume(t *testing.T) {
	db, err := OpenDB(t.TempDir() + "/tune.json")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := &fakeClock{timeOf: bowl, onTime: func(n int) {
		if n == 3 {
			cancel()
		}
	}}
	tm := toyTemplate("toy", 1, toySpace...)
	tu := toyTuner(t, clock, tm)
	tu.DB = db
	tu.CompileBudget = time.Minute // a cancellation is not the budget: the search is resumed
	p := toyProblem(1000)
	c, err := tu.Best(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	// Timed before the cancellation, in Points order: wg=32 with per=1, 2, 4; per=2 is best.
	if c.Static || c.Template != tm || c.Config.Key() != "per=2,variant=0,wg=32" {
		t.Errorf("after cancellation: %s [%s] static=%v, want the best so far, toy [per=2,variant=0,wg=32]", c.Template.Name, c.Config.Key(), c.Static)
	}
	c, err = tu.Best(ctx, toyProblem(500))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Static || c.Config.Key() != "per=1,variant=0,wg=32" {
		t.Errorf("tuned after cancellation: [%s] static=%v, want the static choice [per=1,variant=0,wg=32]", c.Config.Key(), c.Static)
	}
	if s := tu.Stats(); !s.Stopped || s.Static != 1 || s.Kernels != 2 {
		t.Errorf("stats %+v, want Stopped, two kernels, one static choice", s)
	}
	e, ok := db.Get(tu.Key(tm, p))
	if !ok || e.Complete || len(e.Times) != 3 {
		t.Fatalf("database entry %+v, want an incomplete search with 3 times", e)
	}

	if e.Budget != 0 {
		t.Errorf("a cancelled search recorded under the budget %v", e.Budget)
	}

	clock2 := &fakeClock{timeOf: bowl}
	tu2 := toyTuner(t, clock2, tm)
	tu2.DB = db
	tu2.CompileBudget = time.Minute
	c2, err := tu2.Best(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Static || c2.Config.Key() != "per=2,variant=0,wg=64" {
		t.Errorf("resumed search chose [%s] static=%v", c2.Config.Key(), c2.Static)
	}
	if n := clock2.count(); n != 6 {
		t.Errorf("resumed search timed %d configurations, want the 6 not timed before", n)
	}
	for _, k := range clock2.timed {
		for _, old := range clock.timed[:3] {
			if k == old {
				t.Errorf("%s timed again", k)
			}
		}
	}
	if e, _ := db.Get(tu2.Key(tm, p)); !e.Complete || e.Tried != 27 {
		t.Errorf("resumed entry complete=%v tried=%d, want complete, 27", e.Complete, e.Tried)
	}
}

// Progress reports count kernels and configurations and the time left before the deadline.
func TestTunerProgress(t *testing.T) {
	var reports []Progress
	tu := toyTuner(t, &fakeClock{timeOf: bowl}, toyTemplate("toy", 1, kernels.Ints("wg", 32, 64), kernels.Ints("variant", 0, 1)))
	tu.Progress = func(p Progress) { reports = append(reports, p) }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := tu.Best(ctx, toyProblem(100)); err != nil {
		t.Fatal(err)
	}
	if len(reports) != 5 {
		t.Fatalf("%d progress reports, want 4 configurations and 1 kernel", len(reports))
	}
	last := reports[len(reports)-1]
	if last.Kernels != 1 || last.Configs != 4 || last.Invalid != 2 || !last.Deadline || last.TimeLeft <= 0 || last.TimeLeft > time.Minute {
		t.Errorf("last report %+v", last)
	}
	for i, r := range reports[:4] {
		if r.Configs != i+1 || !strings.HasPrefix(r.Current, "toy neg") {
			t.Errorf("report %d: %+v", i, r)
		}
	}
}

// A problem no configuration computes correctly is an error that says so, not a choice.
func TestTunerAllInvalid(t *testing.T) {
	tu := toyTuner(t, &fakeClock{timeOf: bowl}, toyTemplate("toy", 1, kernels.Ints("variant", 1, 2)))
	_, err := tu.Best(context.Background(), toyProblem(64))
	if err == nil || !strings.Contains(err.Error(), "no template computes it correctly") {
		t.Errorf("err = %v", err)
	}
}

var runtimeOptionsQuick = runtime.MeasureOptions{Warmup: 1, Reps: 5}

// SearchLimit cuts one template's search short; it is stored as interrupted and a later run
// resumes it.
func TestTunerSearchLimit(t *testing.T) {
	db, _ := OpenDB(t.TempDir() + "/tune.json")
	slow := &fakeClock{timeOf: bowl, onTime: func(int) { time.Sleep(30 * time.Millisecond) }}
	tm := toyTemplate("toy", 1, toySpace...)
	tu := toyTuner(t, slow, tm)
	tu.DB, tu.SearchLimit = db, 50*time.Millisecond
	p := toyProblem(1000)
	c, err := tu.Best(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	e := c.Entries[0]
	if e.Complete || len(e.Times) == 0 || len(e.Times) >= 9 || c.Static {
		t.Fatalf("limited search: complete=%v, %d timed, static=%v", e.Complete, len(e.Times), c.Static)
	}
	tu2 := toyTuner(t, &fakeClock{timeOf: bowl}, tm)
	tu2.DB = db
	c, err = tu2.Best(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Entries[0].Complete || c.Config.Key() != "per=2,variant=0,wg=64" {
		t.Errorf("resumed: complete=%v [%s]", c.Entries[0].Complete, c.Config.Key())
	}
}

// The static choice's template is searched first: when the budget ends during the first search,
// the baseline that wins is the static template's, not a template that merely sorts first by name
// (on the H200 decode attention otherwise took the prefill kernel, 60x slower).
func TestStaticTemplateSearchedFirst(t *testing.T) {
	a := toyTemplate("toy_a", 4, kernels.Ints("wg", 64, 128))
	b := toyTemplate("toy_b", 1, kernels.Ints("wg", 64, 128))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := &fakeClock{timeOf: func(tmpl string, c kernels.Config) time.Duration {
		if tmpl == "toy_a" {
			return 600 * time.Microsecond
		}
		return 10 * time.Microsecond
	}, onTime: func(n int) {
		if n == 1 {
			cancel() // the budget ends after one configuration has been timed
		}
	}}
	tu := toyTuner(t, clock, a, b)
	estimate := func(l *kernels.Launch) time.Duration { return lower.Estimate(l, lower.Lavapipe) }
	tu.Static = CheapestOf(tu.Caps, tu.Templates, estimate)
	p := toyProblem(4096)
	if st, _, err := tu.Static(p); err != nil || st != b {
		t.Fatalf("static choice %v (%v): the test needs toy_b, the second by name", st, err)
	}
	c, err := tu.Best(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Template != b {
		t.Errorf("chose %s, want the static choice's template toy_b measured first", c.Template.Name)
	}
	if len(clock.timed) == 0 || !strings.HasPrefix(clock.timed[0], "toy_b[") {
		t.Errorf("timed %v first, want toy_b", clock.timed)
	}
}

// TuneAll shares the budget: with a search that alone would outlast it (9 configurations at
// 80 ms each against 600 ms), the first problem is cut at its share and the second is still
// measured, where one deadline for both would leave the second at the static choice.
func TestTuneAllSharesTheBudget(t *testing.T) {
	slow := &fakeClock{timeOf: bowl, onTime: func(int) { time.Sleep(80 * time.Millisecond) }}
	tm := toyTemplate("toy", 1, kernels.Ints("wg", 32, 64, 128), kernels.Ints("per", 1, 2, 4))
	tu := toyTuner(t, slow, tm)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	a, b := toyProblem(1000), toyProblem(2000)
	if n := tu.TuneAll(ctx, []*kernels.Problem{a, b, a}); n != 2 {
		t.Fatalf("TuneAll measured %d problems, want 2", n)
	}
	ca, _ := tu.Best(ctx, a)
	cb, _ := tu.Best(ctx, b)
	if ca.Static || cb.Static {
		t.Fatalf("static choices: first %v, second %v; want both measured", ca.Static, cb.Static)
	}
	if ca.Entries[0].Complete {
		t.Errorf("the first search completed (%d timed): it should have been cut at its share", len(ca.Entries[0].Times))
	}
	if d, ok := tu.Known(b); !ok || d != cb.Time {
		t.Errorf("Known(second) = %v, %v; want %v, true", d, ok, cb.Time)
	}
	if _, ok := tu.Known(toyProblem(3000)); ok {
		t.Error("Known reports a problem never tuned")
	}
}

// coldClock is bowl with its first n timings 5× slower, as on a GPU at idle clocks.
func coldClock(n int) *fakeClock {
	cold := 0
	return &fakeClock{timeOf: func(tmpl string, c kernels.Config) time.Duration {
		d := bowl(tmpl, c)
		if cold < n {
			cold++
			return 5 * d
		}
		return d
	}}
}

// The first timings of a search run on a GPU that sat idle (low clocks): with a clock that makes
// the first two measurements 5x slow, the default point would look 5x worse than it is. The
// confirmation pass times the fastest points and the default again, back to back after a
// warm-up, and stores those times.
func TestConfirmRetimesTheDefaultWarm(t *testing.T) {
	clock := coldClock(2)
	tm := toyTemplate("toy", 1, kernels.Ints("wg", 128, 64), kernels.Ints("per", 1, 2))
	tu := toyTuner(t, clock, tm)
	tu.Confirm = 1
	c, err := tu.Best(context.Background(), toyProblem(1000))
	if err != nil {
		t.Fatal(err)
	}
	e := c.Entries[0]
	def := kernels.Config{"wg": 128, "per": 1}
	if got, want := e.Times[def.Key()], bowl("toy", def); got != want {
		t.Errorf("default point stored at %v, want its warm time %v (cold: %v)", got, want, 5*want)
	}
	if c.Config.Key() != "per=2,wg=64" || c.Time != bowl("toy", c.Config) {
		t.Errorf("chose [%s] at %v, want [per=2,wg=64] at %v", c.Config.Key(), c.Time, bowl("toy", kernels.Config{"wg": 64, "per": 2}))
	}
	// 4 points, then a warm-up and two confirmations (the best and the default).
	if n := clock.count(); n != 7 {
		t.Errorf("%d timings, want 7 (4 points, 1 warm-up, 2 confirmations)", n)
	}
}

// The static choice is measured first, when the GPU may be at idle clocks; confirm times it
// again warm beside the winner, so a cold first measurement does not make tuning look better
// than the baseline.
func TestConfirmRetimesTheStaticChoiceWarm(t *testing.T) {
	clock := coldClock(1)
	tm := toyTemplate("toy", 1, kernels.Ints("wg", 128, 64), kernels.Ints("per", 1, 2))
	static := kernels.Config{"wg": 64, "per": 1}
	tm.Static = func(*kernels.Problem, kernels.Caps) []kernels.Config { return []kernels.Config{static} }
	tu := toyTuner(t, clock, tm)
	tu.Confirm = 1
	c, err := tu.Best(context.Background(), toyProblem(1000))
	if err != nil {
		t.Fatal(err)
	}
	if first := clock.timed[0]; first != "toy["+static.Key()+"]" {
		t.Errorf("first timed %s, want the static choice [%s]", first, static.Key())
	}
	if got, want := c.Entries[0].Times[static.Key()], bowl("toy", static); got != want {
		t.Errorf("static choice stored at %v, want its warm time %v (cold: %v)", got, want, 5*want)
	}
}

// With 8-bit activations allowed (Int8Auto), the tuner measures the float and the integer-dot
// kernel of a quantized matrix-vector product, checks each against the interpreter (the integer
// one at its declared tolerance: every one of its points must pass), and keeps whichever the
// clock says is faster.
func TestTunerChoosesInt8ByMeasurement(t *testing.T) {
	d := testDevice(t)
	caps := CapsOf(&d.Info)
	if !caps.IntegerDot {
		t.Skipf("%s has no integer dot products (shaderIntegerDotProduct): nothing to choose between", d.Info.Name)
	}
	caps.Int8 = kernels.Int8Auto
	_, outs, err := ir.Infer(ir.Linear, nil, []ir.Type{ir.T(ir.F32, 1, 256), ir.T(ir.Q4_K, 37, 256)})
	if err != nil {
		t.Fatal(err)
	}
	p := &kernels.Problem{Op: ir.Linear, Args: []ir.Type{ir.T(ir.F32, 1, 256), ir.T(ir.Q4_K, 37, 256)}, Outs: outs, NumOpArgs: 2}
	for _, faster := range []*kernels.Template{kernels.MatmulVecQDot, kernels.MatmulVecQ} {
		clock := &fakeClock{timeOf: func(tmpl string, c kernels.Config) time.Duration {
			if tmpl == faster.Name {
				return time.Duration(50+c["wg"]) * time.Microsecond
			}
			return 400 * time.Microsecond
		}}
		tu := toyTuner(t, clock, kernels.MatmulVecQ, kernels.MatmulVecQDot)
		tu.Caps, tu.Budget, tu.Exhaustive = caps, 3, 3
		c, err := tu.Best(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if c.Template != faster {
			t.Errorf("chose %s, the clock says %s is faster", c.Template.Name, faster.Name)
		}
		for _, e := range c.Entries {
			if len(e.Invalid) > 0 || len(e.Times) == 0 {
				t.Errorf("%s: %d points timed, invalid: %v", e.Key.Template, len(e.Times), e.Invalid)
			}
		}
		if len(c.Entries) != 2 {
			t.Errorf("%d templates searched, want both", len(c.Entries))
		}
	}
}

// A search the compile's deadline cuts short, and one it never lets start, are recorded with the
// compile's budget: a compile of the same budget takes both as they stand and measures nothing
// (a warm compile, the same choices); a larger budget resumes the search.
func TestTunerBudgetCutKept(t *testing.T) {
	db, err := OpenDB(t.TempDir() + "/tune.json")
	if err != nil {
		t.Fatal(err)
	}
	const budget = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	clock := &fakeClock{timeOf: bowl, onTime: func(n int) {
		if n == 3 {
			<-ctx.Done() // the deadline passes during the fourth timing
		}
	}}
	tm := toyTemplate("toy", 1, toySpace...)
	tu := toyTuner(t, clock, tm)
	tu.DB, tu.CompileBudget = db, budget
	p, q := toyProblem(1000), toyProblem(500)
	first, err := tu.Best(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	unreached, err := tu.Best(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if first.Static || !unreached.Static {
		t.Fatalf("cut: static=%v, unreached: static=%v; want a measured choice, then the static one", first.Static, unreached.Static)
	}
	for _, pr := range []*kernels.Problem{p, q} {
		if e, ok := db.Get(tu.Key(tm, pr)); !ok || e.Complete || e.Budget != budget {
			t.Fatalf("%s: entry %+v, want an incomplete one cut under the budget %v", pr.Key(), e, budget)
		}
	}

	clock2 := &fakeClock{timeOf: bowl}
	tu2 := toyTuner(t, clock2, tm)
	tu2.DB, tu2.CompileBudget = db, budget
	again, err := tu2.Best(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	still, err := tu2.Best(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if n := clock2.count(); n != 0 {
		t.Errorf("a compile of the same budget timed %d configurations, want none", n)
	}
	if again.Config.Key() != first.Config.Key() || !still.Static || still.Config.Key() != unreached.Config.Key() {
		t.Errorf("same budget chose [%s] and [%s] static=%v, want [%s] and the static [%s]",
			again.Config.Key(), still.Config.Key(), still.Static, first.Config.Key(), unreached.Config.Key())
	}
	if s := tu2.Stats(); s.Reused != 2 || s.Kept != 2 || s.Searches != 0 {
		t.Errorf("same budget: stats %+v, want 2 reused as kept, no search", s)
	}

	clock3 := &fakeClock{timeOf: bowl}
	tu3 := toyTuner(t, clock3, tm)
	tu3.DB, tu3.CompileBudget = db, 2*budget
	resumed, err := tu3.Best(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if n := clock3.count(); n != 6 || resumed.Config.Key() != "per=2,variant=0,wg=64" {
		t.Errorf("a larger budget timed %d configurations and chose [%s], want the 6 left and [per=2,variant=0,wg=64]", n, resumed.Config.Key())
	}
	if e, _ := db.Get(tu3.Key(tm, p)); !e.Complete || e.Budget != 0 {
		t.Errorf("resumed entry complete=%v budget=%v, want complete, no budget", e.Complete, e.Budget)
	}
}

// Get waits at most Pipelines.Wait for a pipeline: past it ErrSlowPipeline, while the
// creation goes on; a later Get finds the pipeline made, and Close waits for the creation. The
// driver's slow compile is played by a kernel that takes 400 ms to hand over.
func TestPipelinesWaitBound(t *testing.T) {
	d := testDevice(t)
	pipes := NewPipelines(d)
	pipes.Wait = 50 * time.Millisecond
	l, err := buildToy(toyProblem(1000), kernels.Config{"wg": 64, "per": 2}, 1)
	if err != nil {
		t.Fatal(err)
	}
	k := l.Steps[0].Kernel
	slow := func() runtime.Kernel {
		time.Sleep(400 * time.Millisecond)
		return runtime.Kernel{Name: k.Name, SPIRV: k.Bytes(), Bindings: len(k.Bindings), PushConstantSize: k.PushSize}
	}
	t0 := time.Now()
	if _, err := pipes.slot("slow", slow, -1, false, pipes.Wait); !errors.Is(err, ErrSlowPipeline) {
		t.Fatalf("a creation of 400 ms: %v, want ErrSlowPipeline", err)
	}
	if dt := time.Since(t0); dt > 300*time.Millisecond {
		t.Errorf("Get returned after %v, want about the 50 ms bound", dt)
	}
	if _, err := pipes.slot("slow", slow, -1, false, pipes.Wait); !errors.Is(err, ErrSlowPipeline) {
		t.Errorf("a second Get while it is created: %v, want ErrSlowPipeline", err)
	}
	if pl, err := pipes.slot("slow", slow, -1, false, 0); err != nil || pl == nil {
		t.Fatalf("an unbounded Get: %v", err)
	}
	if n := pipes.Created(); n != 1 {
		t.Errorf("%d pipelines created, want 1", n)
	}
	t0 = time.Now() // slow2's creation starts after this, and takes 400 ms
	if _, err := pipes.slot("slow2", slow, -1, false, pipes.Wait); !errors.Is(err, ErrSlowPipeline) {
		t.Fatalf("another slow creation: %v, want ErrSlowPipeline", err)
	}
	pipes.Close() // waits for slow2's creation, whose pipeline is then destroyed
	if dt := time.Since(t0); dt < 400*time.Millisecond {
		t.Errorf("Close returned %v after slow2's creation began, before it ended", dt)
	}
	if n, m := pipes.Created(), pipes.Len(); n != 1 || m != 0 {
		t.Errorf("after Close: %d created, %d held; want 1 (the one made before Close) and 0", n, m)
	}
}

// Pipelines made by Prefetch and Get at once are created once per kernel and shared; Close
// waits for the prefetches in flight; Release while one is being created destroys it when done.
func TestPipelinesPrefetchOnce(t *testing.T) {
	d := testDevice(t)
	pipes := NewPipelines(d)
	p := toyProblem(1000)
	c := kernels.Config{"wg": 64, "per": 2}
	build := func() (*kernels.Launch, error) { return buildToy(p, c, 1) }
	l, err := build()
	if err != nil {
		t.Fatal(err)
	}
	pipes.Prefetch("toy", true, []func() (*kernels.Launch, error){build, build})
	pipes.Prefetch("toy", false, []func() (*kernels.Launch, error){build})
	got := make([]*runtime.Pipeline, 4)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pl, err := pipes.Get(l.Steps[0].Kernel, l.Steps[0].Spec)
			if err != nil {
				t.Error(err)
			}
			got[i] = pl
		}()
	}
	wg.Wait()
	for _, pl := range got[1:] {
		if pl != got[0] {
			t.Error("two pipelines for one kernel")
		}
	}
	if n := pipes.Created(); n != 1 {
		t.Errorf("%d pipelines created, want 1", n)
	}
	pipes.Close()
	if n := pipes.Len(); n != 0 {
		t.Errorf("%d pipelines after Close", n)
	}

	// Queued and then forgotten: nothing is created for it.
	other := func() (*kernels.Launch, error) { return buildToy(toyProblem(500), c, 1) }
	block := make(chan struct{})
	busy := func() (*kernels.Launch, error) { <-block; return nil, errors.New("blocked") }
	busyN := make([]func() (*kernels.Launch, error), goruntime.GOMAXPROCS(0))
	for i := range busyN {
		busyN[i] = busy
	}
	pipes.Prefetch("busy", true, busyN) // every worker waits
	pipes.Prefetch("other", false, []func() (*kernels.Launch, error){other})
	pipes.Forget("other")
	close(block)
	pipes.Close()
	if n := pipes.Created(); n != 1 {
		t.Errorf("%d pipelines created in all, want the first 1 (the forgotten prefetch made one)", n)
	}
}

// blockingClock times the first configuration only when release is closed (a driver compiling
// a kernel for seconds, which nothing interrupts), and every other at once.
type blockingClock struct {
	started, release chan struct{}
	once             sync.Once
}

func (c *blockingClock) Time(ctx context.Context, cand *Candidate) (time.Duration, error) {
	first := false
	c.once.Do(func() { first = true })
	if first {
		close(c.started)
		<-c.release
	}
	return bowl(cand.Template.Name, cand.Config), nil
}

// The tuning phase keeps its own deadline (TunePlan's context), not only the guard's hard one
// (the whole budget): a configuration its deadline finds running is left to finish, TunePlan
// returns, and the device's next work waits for it.
func TestTunePlanPhaseDeadline(t *testing.T) {
	clock := &blockingClock{started: make(chan struct{}), release: make(chan struct{})}
	tu := toyTuner(t, clock, toyTemplate("toy", 1, kernels.Ints("wg", 32, 64, 128)))
	g := &DeviceGuard{Deadline: time.Now().Add(10 * time.Minute)}
	tu.Guard = g
	released := false
	defer func() {
		if !released {
			close(clock.release)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan PlanReport, 1)
	go func() { done <- tu.TunePlan(ctx, []Ranked{{Problem: toyProblem(1024), Share: 1, Uses: 1}}) }()
	var rep PlanReport
	select {
	case rep = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("TunePlan did not return at its phase's deadline while a configuration was timed")
	}
	select {
	case <-clock.started:
	default:
		t.Fatal("no configuration was timed before the phase's deadline (3 s): nothing to leave running")
	}
	if g.Abandoned() || !g.Busy() || g.Stragglers() != 1 {
		t.Errorf("after the phase: abandoned=%v busy=%v stragglers=%d, want false, true, 1", g.Abandoned(), g.Busy(), g.Stragglers())
	}
	if len(rep.Unmet) != 1 {
		t.Errorf("the search cut by the phase's deadline is not reported unmet: %+v", rep)
	}
	close(clock.release)
	released = true
	ran := false
	if !g.Run(func() { ran = true }) || !ran {
		t.Error("the device's next work did not run after the straggler ended")
	}
}

// A template measured while the static choice's template was not (its search cut before a point
// was timed: here a database entry a compile of the same budget cut, as a phase of one compile
// leaves it for the next) does not replace the static choice: nothing compared them. On the
// H200 SmolLM2's prefill took matmul_tiled this way, 1.9x slower at 128 rows than the static
// cooperative-matrix kernel.
func TestUnmeasuredStaticChoiceStands(t *testing.T) {
	a := toyTemplate("toy_a", 4, kernels.Ints("wg", 64, 128))
	b := toyTemplate("toy_b", 1, kernels.Ints("wg", 64, 128))
	clock := &fakeClock{timeOf: func(string, kernels.Config) time.Duration { return 10 * time.Microsecond }}
	tu := toyTuner(t, clock, a, b)
	estimate := func(l *kernels.Launch) time.Duration { return lower.Estimate(l, lower.Lavapipe) }
	tu.Static = CheapestOf(tu.Caps, tu.Templates, estimate)
	db, err := OpenDB(filepath.Join(t.TempDir(), "db.json"))
	if err != nil {
		t.Fatal(err)
	}
	tu.DB, tu.CompileBudget = db, 15*time.Second
	p := toyProblem(4096)
	st, sc, err := tu.Static(p)
	if err != nil || st != b {
		t.Fatalf("static choice %v (%v): the test needs toy_b", st, err)
	}
	if err := tu.init(); err != nil { // the device's fingerprint is part of the key
		t.Fatal(err)
	}
	db.Put(&Entry{Key: tu.Key(b, p), Times: map[string]time.Duration{}, Invalid: map[string]string{}, Budget: 15 * time.Second, Updated: time.Now()})
	c, err := tu.Best(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(clock.timed) == 0 || !strings.HasPrefix(clock.timed[0], "toy_a[") {
		t.Fatalf("timed %v, want toy_a measured (toy_b's search taken as the budget cut it)", clock.timed)
	}
	if c.Template != b || !c.Static || c.Config.Key() != sc.Key() {
		t.Errorf("chose %s [%s] static=%v, want the static choice toy_b [%s]", c.Template.Name, c.Config.Key(), c.Static, sc.Key())
	}
}

// A plan's modules prefetched by PrefetchKernels are the pipelines Kernel then gives the
// runtime (one each, kept), and NewKernels no longer counts them.
func TestPipelinesPrefetchKernels(t *testing.T) {
	d, m, _ := selectModel(t, "testdata/select.yaml")
	tu := &Tuner{Device: d, Compiler: "vkc test"}
	defer tu.Close()
	p, err := lowerWith(d, m, tu.Choose(context.Background()))([]*ir.Function{m.Function("forward")})
	if err != nil {
		t.Fatal(err)
	}
	fresh := tu.NewKernels(p)
	if fresh == 0 {
		t.Fatal("forward's plan has no kernel new to the tuner")
	}
	if _, err := tu.device(); err != nil { // makes the tuner's pipelines
		t.Fatal(err)
	}
	fresh = tu.NewKernels(p) // (making the device may have made some)
	before := tu.pipes.Created()
	var ks []runtime.Kernel
	for _, mod := range tu.newModules(p) {
		ks = append(ks, moduleKernel(mod))
	}
	tu.pipes.PrefetchKernels("select", ks)
	tu.pipes.wg.Wait()
	if n := tu.pipes.Created() - before; n != fresh {
		t.Errorf("%d pipelines created, want %d", n, fresh)
	}
	if n := tu.NewKernels(p); n != 0 {
		t.Errorf("after the prefetch %d kernels are new, want 0", n)
	}
	exe, err := d.Load(p, runtime.LoadOptions{Pipelines: tu.Kernel})
	if err != nil {
		t.Fatal(err)
	}
	exe.Close()
	if n := tu.pipes.Created() - before; n != fresh {
		t.Errorf("loading the plan created %d more pipelines", n-fresh)
	}
}

// A search whose problem's reference the interpreter would not finish before the deadline is not
// started: the problem keeps its static choice at once, and the trace and the summary say why.
// (On the H100 the 8B's LM head's reference took 19 s of device time at the end of the tuning
// phase, and the first candidate graph waited for it.) A small problem under the same deadline
// is searched.
func TestTunerSkipsReferencePastDeadline(t *testing.T) {
	d := testDevice(t)
	var trace strings.Builder
	tu := &Tuner{Device: d, Compiler: "vkc test", Timing: &fakeClock{timeOf: bowl}, Exhaustive: 2, Budget: 2, Trace: &trace}
	defer tu.Close()
	estimate := func(l *kernels.Launch) time.Duration { return lower.Estimate(l, lower.Lavapipe) }
	tu.Static = CheapestOf(CapsOf(&d.Info), kernels.For, estimate)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// Llama-3.1-8B's LM head at the check length: 525M weight elements to convert, 39 GFLOP.
	head := opProblem(t, ir.Linear, nil, ir.T(ir.F32, 37, 4096), ir.T(ir.Q8_0, 128256, 4096))
	if est := (&checkData{p: head}).referenceTime(); est < 3*time.Second {
		t.Fatalf("the LM head's reference estimated at %v: the test needs more than its deadline", est)
	}
	t0 := time.Now()
	c, err := tu.Best(ctx, head)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Static || tu.Stats().Unreferenced == 0 {
		t.Errorf("the LM head: static=%v, stats %+v; want the static choice, its search not started", c.Static, tu.Stats())
	}
	if dt := time.Since(t0); dt > time.Second {
		t.Errorf("the LM head's choice took %v: its reference was evaluated", dt)
	}
	if !strings.Contains(trace.String(), "its reference would take about") || !strings.Contains(tu.Summary(), "not started") {
		t.Errorf("trace %q, summary %q: neither says why", trace.String(), tu.Summary())
	}
	small := opProblem(t, ir.Linear, nil, ir.T(ir.F32, 2, 64), ir.T(ir.Q8_0, 16, 64))
	if c, err := tu.Best(ctx, small); err != nil || c.Static {
		t.Errorf("a small problem under the same deadline: static=%v, err %v; want it measured", c != nil && c.Static, err)
	}
}
