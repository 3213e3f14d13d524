package tune

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

// TimingSource times one configuration that has been built, run and checked.
type TimingSource interface {
	Time(ctx context.Context, c *Candidate) (time.Duration, error)
}

// Candidate is the configuration being timed.
type Candidate struct {
	Problem  *kernels.Problem
	Template *kernels.Template
	Config   kernels.Config
	Launch   *kernels.Launch
	// Bench is the launch recorded on the device with the checked inputs in its buffers, after
	// one checking run; Bench.Measure times it.
	Bench *Bench
	// BestSoFar is the lowest time of the search so far (0: none yet), for cutting losers short.
	BestSoFar time.Duration
}

// DeviceTiming times a candidate on its device with runtime.Program.Measure: warm-up runs, then
// Options.Reps repetitions in one submission, the median of the quietest round. Measure repeats a
// noisy round itself (up to Options.MaxRounds); a result still noisy after that is measured once
// more and the quieter of the two is kept.
//
// A candidate whose first two warm runs (after the checking run) both take more than Cutoff
// times the best median of its search so far cannot win; it is not measured further and the
// quicker run's GPU time stands as its time. On lavapipe, where a bad configuration can take
// hundreds of times longer than a good one, this keeps a search's cost near that of its good
// points.
type DeviceTiming struct {
	Options runtime.MeasureOptions
	// Cutoff is the ratio above which a candidate is cut after its checking run (0: 4; negative:
	// never cut).
	Cutoff float64
	// Stats, when set, counts what Time did.
	Stats *TimingStats
}

// TimingStats counts DeviceTiming's work.
type TimingStats struct {
	Measured int // candidates measured in full
	Cut      int // candidates timed by their checking run alone (Cutoff)
}

// Time implements TimingSource.
func (t DeviceTiming) Time(ctx context.Context, c *Candidate) (time.Duration, error) {
	cutoff := t.Cutoff
	if cutoff == 0 {
		cutoff = 4
	}
	if cutoff > 0 && c.BestSoFar > 0 {
		// The checking run's own time is no guide: a driver may compile the pipeline at its
		// first dispatch (lavapipe does, taking milliseconds). One more run gives a warm figure.
		warm, err := c.Bench.Sample(ctx)
		if err != nil {
			return 0, err
		}
		if float64(warm) > cutoff*float64(c.BestSoFar) {
			// A second run before cutting: one slow run is often the machine's, not the
			// point's (a loaded CI machine cut 5 of 9 alike points on one run each).
			again, err := c.Bench.Sample(ctx)
			if err != nil {
				return 0, err
			}
			warm = min(warm, again)
		}
		if float64(warm) > cutoff*float64(c.BestSoFar) {
			if t.Stats != nil {
				t.Stats.Cut++
			}
			return warm, nil
		}
	}
	m, err := c.Bench.Measure(ctx, t.Options)
	if err != nil {
		return 0, err
	}
	if m.Noisy {
		if m2, err := c.Bench.Measure(ctx, t.Options); err == nil && m2.Spread < m.Spread {
			m = m2
		}
	}
	if t.Stats != nil {
		t.Stats.Measured++
	}
	return m.Median, nil
}

// Progress is one progress report of a Tuner.
type Progress struct {
	Kernels  int    // problems whose kernel is chosen
	Reused   int    // template searches taken complete from the database
	Configs  int    // configurations built and run in this session
	Invalid  int    // of which were rejected (build or pipeline error, wrong result)
	Current  string // "template problem" being searched, "" between searches
	TimeLeft time.Duration
	Deadline bool // TimeLeft is meaningful (the context has a deadline)
}

// Stats count what a Tuner did in this session.
type Stats struct {
	Kernels  int // problems chosen
	Searches int // template searches run (new, or resumed from an interrupted one)
	Reused   int // template searches taken complete from the database
	// Kept: of Reused, searches a compile of the same or a larger budget cut short, taken as
	// they stand (Entry.Budget).
	Kept    int
	Configs int // configurations built and run
	Invalid int // configurations rejected after building or running
	Static  int // problems that got the static choice (no measured configuration)
	// Unreferenced: searches not started because the interpreter's reference of their problem
	// would have outlasted the deadline (checkData.referenceTime).
	Unreferenced int
	Stopped      bool
}

// Choice is the tuner's answer for one problem.
type Choice struct {
	Problem  *kernels.Problem
	Template *kernels.Template
	Config   kernels.Config
	// Time is the measured median of Template at Config; 0 with Static.
	Time time.Duration
	// Static: nothing was measured for this problem (the budget ran out first), so Template and
	// Config are Tuner.Static's.
	Static bool
	// Entries are the searches of every template that accepts the problem, by template name.
	Entries []*Entry
}

// Tuner searches kernel templates' spaces on a device. The zero value of every field but Device
// (or Open) is usable. A Tuner serialises its work; it is safe to call from several goroutines.
type Tuner struct {
	// Device runs and times configurations.
	Device *runtime.Device
	// Open, when Device is nil, opens the device the first time a configuration must be
	// measured: a compile whose searches the database holds opens none. Caps, Fingerprint and
	// Driver must then be set (the device's, from runtime.Devices).
	Open func() (*runtime.Device, error)
	// Caps are the device facts templates see; the zero value means CapsOf(&Device.Info).
	Caps kernels.Caps
	// DB, when set, is consulted before searching and updated after; the caller saves it.
	DB *DB
	// Compiler is the compiler version in database keys (vkc.CompilerVersion()).
	Compiler string
	// Fingerprint and Driver identify the device in database keys; zero values mean the
	// Device's (Info.Fingerprint.String(), Info.DriverVersion).
	Fingerprint, Driver string
	// Timing times checked configurations; nil means DeviceTiming with default options.
	Timing TimingSource
	// Exhaustive: spaces of at most this many points are searched in full (default 64).
	// Budget: larger spaces get this many built-and-run configurations (default 32).
	Exhaustive, Budget int
	// Confirm is how many of a search's fastest points are timed again at its end, back to back
	// with the template's default point and its static choice, after one warm-up measurement
	// (0: 3; negative: none).
	// A GPU that sat idle (while the interpreter computed a big problem's reference) runs the
	// first points of a search at low clocks: on the H200 the default point of SmolLM2's lm_head
	// measured 1.94 ms there against 0.34 ms warm, which inflated what tuning seemed to gain.
	Confirm int
	// SearchLimit, when positive, bounds each template search's wall time; a search cut by it
	// keeps its best point so far and is stored as interrupted, so a later compile resumes it.
	// With one deadline for the whole compile (the context's), it keeps the first problems from
	// spending the time of all the others.
	SearchLimit time.Duration
	// Guard, when set, bounds each configuration's device work by its hard deadline: one the
	// deadline leaves running is abandoned (DeviceGuard), its search recorded as the budget
	// cut it, and the tuner gives the device no more work. The owner closes the tuner and the
	// device after Guard.Wait.
	Guard *DeviceGuard
	// CompileBudget is the budget of the compile the tuner serves (0: none): a search its
	// deadline cuts short, or never lets start, is recorded with it (Entry.Budget), and an
	// entry recorded so under a budget at least as large is taken as it stands, measuring
	// nothing.
	CompileBudget time.Duration
	// Seed fixes the search order of budgeted searches and the random inputs.
	Seed int64
	// Templates lists the templates that accept a problem (default kernels.For).
	Templates func(p *kernels.Problem, caps kernels.Caps) ([]*kernels.Template, error)
	// Static is the choice for a problem nothing was measured for (default: the first accepting
	// template at its default configuration; Cheapest builds the roofline choice).
	Static func(p *kernels.Problem) (*kernels.Template, kernels.Config, error)
	// Progress, when set, is called after every configuration and every chosen problem.
	Progress func(Progress)
	// Trace, when set, gets a line before each configuration is built and run and one after,
	// written unbuffered: when a configuration crashes the driver, the last line names it.
	Trace io.Writer
	// Log, when set, receives warnings: a stale database entry searched again, the first
	// problem left at the static choice because the budget ran out.
	Log func(msg string)

	mu      sync.Mutex
	pipes   *Pipelines
	choices map[string]*Choice
	failed  map[string]error // problems no template could serve, so a cost lookup asks once
	stats   Stats
	// loggedStatic: the first static fallback was logged (the rest are only counted).
	loggedStatic bool
	// planning: TunePlan is running (it releases the pipelines when it ends).
	planning bool
	// phase is the deadline of TunePlan's context (zero: none), the phase's own deadline
	// for the device work of its searches (DeviceGuard.RunBy): the compile's tuning phase
	// has the first quarter of the budget, while the guard's deadline is the whole of it.
	phase time.Time
	// pointTime is the wall time of the configurations tried so far (building, compiling the
	// pipelines, checking and timing), by template and over all ("").
	pointTime map[string]*meanTime
	// firstRun is the first runs of the configurations so far (creating their pipelines and
	// their check's run, where a CPU driver compiles the kernel), by op (kernels.Problem.OpName)
	// and over all (""): what CompileCost predicts a new kernel by. firstMu guards it (t.mu is
	// held through a search).
	firstMu  sync.Mutex
	firstRun map[string]*firstRuns
}

// firstRun is a configuration's first run (try): creating its pipelines and its check's run,
// and the SPIR-V words of its distinct kernels.
type firstRun struct {
	took  time.Duration
	words int
}

// firstRuns are the first runs of an op's configurations: their sum and count, and the SPIR-V
// words of their kernels.
type firstRuns struct {
	meanTime
	words int
}

// meanTime is a running mean of durations.
type meanTime struct {
	sum time.Duration
	n   int
}

func (m *meanTime) add(d time.Duration) { m.sum += d; m.n++ }

// expectedPoint is what one more configuration of template tm is expected to cost: the mean of
// tm's so far in this session, else of all templates' (0 before any: the session's first
// configuration always starts).
func (t *Tuner) expectedPoint(tm string) time.Duration {
	for _, k := range []string{tm, ""} {
		if m := t.pointTime[k]; m != nil && m.n > 0 {
			return m.sum / time.Duration(m.n)
		}
	}
	return 0
}

func (t *Tuner) addPoint(tm string, d time.Duration) {
	if t.pointTime == nil {
		t.pointTime = map[string]*meanTime{}
	}
	for _, k := range []string{tm, ""} {
		if t.pointTime[k] == nil {
			t.pointTime[k] = &meanTime{}
		}
		t.pointTime[k].add(d)
	}
}

// wouldOverrun reports whether ctx's deadline comes before work expected to take d: work that
// cannot be interrupted (a driver compiling a pipeline, a timed submission) is not started then,
// so that a budget bounds the wall time rather than the start of the last piece of work.
func wouldOverrun(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && d > 0 && time.Until(dl) < d
}

func (t *Tuner) init() error {
	if t.Device == nil && (t.Open == nil || t.Caps.MaxInvocations == 0 || t.Fingerprint == "") {
		return errors.New("tune: the tuner has no device")
	}
	if t.choices == nil {
		t.choices = map[string]*Choice{}
		t.failed = map[string]error{}
	}
	if t.Device != nil && t.pipes == nil {
		t.pipes = t.newPipelines(t.Device)
	}
	if t.Caps.MaxInvocations == 0 {
		t.Caps = CapsOf(&t.Device.Info)
	}
	if t.Fingerprint == "" {
		t.Fingerprint = t.Device.Info.Fingerprint.String()
	}
	if t.Driver == "" && t.Device != nil {
		t.Driver = t.Device.Info.DriverVersion
	}
	if t.Timing == nil {
		t.Timing = DeviceTiming{}
	}
	if t.Exhaustive <= 0 {
		t.Exhaustive = 64
	}
	if t.Budget <= 0 {
		t.Budget = 32
	}
	if t.Templates == nil {
		t.Templates = kernels.For
	}
	if t.Static == nil {
		t.Static = Cheapest(t.Caps, nil)
	}
	return nil
}

// device returns the device, opening it (Open) on first use, and the tuner's pipeline cache.
func (t *Tuner) device() (*runtime.Device, error) {
	if t.Device == nil {
		d, err := t.Open()
		if err != nil {
			return nil, fmt.Errorf("open device for tuning: %w", err)
		}
		t.Device = d
	}
	if t.pipes == nil {
		t.pipes = t.newPipelines(t.Device)
	}
	return t.Device, nil
}

// pipelineWait is how long a configuration's try waits for its pipelines on a GPU
// (Pipelines.Wait): NVIDIA's compiler takes 0.3–1 s for a cooperative-matrix product. A CPU
// device's compiles (LLVM: up to seconds for a large kernel on a loaded machine) are waited for.
const pipelineWait = 3 * time.Second

func (t *Tuner) newPipelines(d *runtime.Device) *Pipelines {
	c := NewPipelines(d)
	if d.Info.Type != runtime.CPU {
		c.Wait = pipelineWait
	}
	return c
}

func (t *Tuner) logf(format string, args ...any) {
	if t.Log != nil {
		t.Log(fmt.Sprintf(format, args...))
	}
}

// Kernel returns the pipeline of a kernel as the runtime takes it (runtime.LoadOptions.Pipelines)
// from the tuner's pipelines, opening the device if need be: a plan loaded so shares the kernels
// tuning built, and those of the plans loaded before it. The pipelines live until Close.
func (t *Tuner) Kernel(k runtime.Kernel) (*runtime.Pipeline, error) {
	if t.Guard.Abandoned() {
		return nil, ErrAbandoned
	}
	t.mu.Lock()
	if err := t.init(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	if _, err := t.device(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	pipes := t.pipes
	t.mu.Unlock()
	return pipes.Kernel(k)
}

// KernelCost is what a kernel new to the device is expected to cost a plan that runs it, before
// a plan's check has measured it: 0.1 s on a CPU device (lavapipe compiles a kernel at its first
// run: tinyllama's plans took 0.05–0.1 s per kernel on a shared 2-core machine), 10 ms on a GPU.
// Tuning's configurations are no guide: they include the large tiles that compile slowest.
func (t *Tuner) KernelCost() time.Duration {
	if t.Caps.CPU {
		return 100 * time.Millisecond
	}
	return 10 * time.Millisecond
}

// NewKernels counts the distinct kernels of plan p that no pipeline of the tuner exists for: a
// plan loaded with Kernel creates (and compiles) them.
func (t *Tuner) NewKernels(p *plan.Plan) int {
	return len(t.newModules(p))
}

// PrefetchPlan creates the pipelines of plan p's kernels that none exists for in the
// background (none on a CPU device: its driver compiles on the cores that run its kernels, so
// there it would slow the checks and timings it runs beside). A measured selection prefetches
// its candidates' plans while it checks the first of them: on the H100, SmolLM2's nine functions'
// static extractions took 6 s of checks, most of it the driver compiling their kernels one
// check at a time, which left its late candidates no time.
func (t *Tuner) PrefetchPlan(p *plan.Plan) {
	if t.Caps.CPU || t.Guard.Abandoned() {
		return
	}
	t.mu.Lock()
	pipes := t.pipes
	t.mu.Unlock()
	if pipes == nil {
		return
	}
	var ks []runtime.Kernel
	for _, m := range t.newModules(p) {
		ks = append(ks, moduleKernel(m))
	}
	pipes.PrefetchKernels("select", ks)
}

// StopPrefetch drops the pipelines PrefetchPlan queued and no worker has started (the
// selection is over: the kernel tuning after it should not wait behind them).
func (t *Tuner) StopPrefetch() {
	t.mu.Lock()
	pipes := t.pipes
	t.mu.Unlock()
	if pipes != nil {
		pipes.Forget("select")
	}
}

// moduleKernel is a plan module as the runtime loads it.
func moduleKernel(m *plan.Module) runtime.Kernel {
	k := runtime.Kernel{Name: m.Key, SPIRV: wordsBytes(m.SPIRV), Entry: m.Entry, PushConstantSize: int(m.PushConstantSize)}
	for _, b := range m.Bindings {
		k.Bindings = max(k.Bindings, int(b.Binding)+1)
	}
	for _, s := range m.SpecConstants {
		k.Spec = append(k.Spec, runtime.SpecConstant{ID: s.ID, Value: s.Value})
	}
	return k
}

// newModules returns the modules of p (one per distinct kernel) that no pipeline of the tuner
// exists for.
func (t *Tuner) newModules(p *plan.Plan) []*plan.Module {
	t.mu.Lock()
	pipes := t.pipes
	t.mu.Unlock()
	seen := map[string]bool{}
	var out []*plan.Module
	for i := range p.Modules {
		m := &p.Modules[i]
		key := runtimeKernelKey(moduleKernel(m))
		if seen[key] {
			continue
		}
		seen[key] = true
		if pipes == nil || !pipes.has(key) {
			out = append(out, m)
		}
	}
	return out
}

// addFirstRun records a configuration's first run of a problem of op (took 0: it did not get
// that far).
func (t *Tuner) addFirstRun(op string, r firstRun) {
	if r.took <= 0 {
		return
	}
	t.firstMu.Lock()
	defer t.firstMu.Unlock()
	if t.firstRun == nil {
		t.firstRun = map[string]*firstRuns{}
	}
	for _, k := range []string{op, ""} {
		f := t.firstRun[k]
		if f == nil {
			f = &firstRuns{}
			t.firstRun[k] = f
		}
		f.add(r.took)
		f.words += r.words
	}
}

// CompileCost predicts what compiling the kernels of plan p that no pipeline exists for yet
// (NewKernels) costs, by the first runs of the configurations this session tuned: each kernel
// at the mean first run of its op (moduleOp), scaled by its SPIR-V words against the mean of
// that op's configurations; a kernel of an op never tuned at its words times the rate of all
// first runs (their time over their words). 0 before any was measured.
//
// Why the words: a driver's compile grows with the code. On lavapipe, cold, tinyllama's
// prefill@8 runs its products on matmul_vec at 8 rows, 1.4–8.7k words each where its tuned
// configurations averaged about 2k; the check of 4 of them took 3.25 s, predicted at the op's
// mean 0.1 s, and spent the time of decode's late check and rounds.
//
// Why not the slowest first run of any op for an op never tuned (until session 18): the ops
// never tuned are the small ones (cache_write, rope_cache_write, add_rmsnorm: no space to
// search), and at the slowest first run (736 ms on lavapipe) they made most of every waiting
// check's prediction (CompilePricing): tinyllama's prefill candidates (8–12 kernels) were
// predicted at 1.7–2.4 s. With the rate a word, cold on lavapipe (an empty Mesa cache),
// tinyllama's default compile timed 5, 5, 5, 5 and 4, 5, 5, 5 paired rounds a function where
// it timed 1, 5, 5, 1 and 1, 1, 0, 0; warm 5, 5, 5, 5 as before; Whisper's encoder and
// resnet-tiny 5 rounds, as before. The slowest was chosen against a kernel that sits in the driver's disk cache or not
// (Whisper's attention with K transposed: about 10 s on lavapipe, predicted 0.2 s); a check
// that compiles new kernels now waits until the candidates checked are timed, and runs within
// its function's share.
func (t *Tuner) CompileCost(p *plan.Plan) time.Duration {
	cost, _ := t.compileCost(p)
	return cost
}

// CompilePricing says how CompileCost priced p's new kernels, op by op, for the selection's
// trace: "3×54ms rmsnorm_linear, 1×8ms add_rmsnorm (never tuned: all ops' rate a word)".
func (t *Tuner) CompilePricing(p *plan.Plan) string {
	_, why := t.compileCost(p)
	return why
}

func (t *Tuner) compileCost(p *plan.Plan) (time.Duration, string) {
	t.firstMu.Lock()
	defer t.firstMu.Unlock()
	type priced struct {
		n    int
		cost time.Duration
	}
	var ops []string
	by := map[string]*priced{}
	var cost time.Duration
	for _, m := range t.newModules(p) {
		op := moduleOp(m.Key)
		var c time.Duration
		if f := t.firstRun[op]; f != nil {
			c = f.mean()
			if f.words > 0 {
				c = time.Duration(float64(c) * float64(len(m.SPIRV)) * float64(f.n) / float64(f.words))
			}
		} else if f := t.firstRun[""]; f != nil && f.words > 0 {
			c = time.Duration(float64(f.sum) * float64(len(m.SPIRV)) / float64(f.words))
			op += " (never tuned: all ops' rate a word)"
		}
		cost += c
		if by[op] == nil {
			by[op] = &priced{}
			ops = append(ops, op)
		}
		by[op].n++
		by[op].cost += c
	}
	var parts []string
	for _, op := range ops {
		b := by[op]
		parts = append(parts, fmt.Sprintf("%d×%v %s", b.n, (b.cost/time.Duration(b.n)).Round(time.Millisecond), op))
	}
	return cost, strings.Join(parts, ", ")
}

// moduleOp is the op of a plan module's key: "<template> <problem key>", the problem key
// beginning with its op ("matmul_tiled rmsnorm_linear[eps=1e-05](…)…" → "rmsnorm_linear").
// (Until 2026-12-07 CompileCost took the template's name and the op together for the op, found
// none of them measured, and priced every new kernel at the slowest first run of any op:
// tinyllama's waiting checks on lavapipe at 0.8 s a kernel, where they took 0.03–0.2 s, and so
// prefill@8 got no late check within its share.)
func moduleOp(key string) string {
	op, _, _ := strings.Cut(key, "(")
	op, _, _ = strings.Cut(op, "[")
	if _, after, ok := strings.Cut(op, " "); ok {
		op = after
	}
	return op
}

// CreateTime is the mean time the device's driver took to create a pipeline so far in this
// session (0: none created yet).
func (t *Tuner) CreateTime() time.Duration {
	t.mu.Lock()
	pipes := t.pipes
	t.mu.Unlock()
	if pipes == nil {
		return 0
	}
	return pipes.CreateTime()
}

// Close destroys the pipelines the tuner created (after the work its Guard abandoned: call it
// after Guard.Wait when the guard abandoned any). It does not save the database.
func (t *Tuner) Close() {
	t.Guard.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pipes != nil {
		t.pipes.Close()
	}
}

// Stats returns what the tuner did so far.
func (t *Tuner) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Summary is one line for a compile report: "tuned 12 kernels: 9 searches reused from the
// database, 3 searched (145 configurations, 7 invalid)".
func (t *Tuner) Summary() string {
	s := t.Stats()
	var b strings.Builder
	fmt.Fprintf(&b, "tuned %d kernels: %d searches reused from the database", s.Kernels, s.Reused)
	if s.Kept > 0 {
		fmt.Fprintf(&b, " (%d as a compile of budget %v left them)", s.Kept, t.CompileBudget)
	}
	fmt.Fprintf(&b, ", %d searched (%d configurations, %d invalid)", s.Searches, s.Configs, s.Invalid)
	if s.Static > 0 {
		fmt.Fprintf(&b, ", %d left at the static choice", s.Static)
	}
	if s.Unreferenced > 0 {
		fmt.Fprintf(&b, " (%d searches not started: the interpreter's reference of their problem would have outlasted the deadline)", s.Unreferenced)
	}
	if s.Stopped {
		b.WriteString("; stopped by the budget or a cancellation")
	}
	return b.String()
}

// ErrAbandoned is the error of device work refused because the hard deadline left other work
// running on the device (DeviceGuard).
var ErrAbandoned = errors.New("the device is busy with work the budget's deadline abandoned")

// Choose returns the function lower.Options.Choose wants: for each problem, the template and
// configuration with the lowest measured time among all templates that accept it (see Best).
// ctx bounds all the tuning the function does, across every problem (map --budget to its
// deadline).
func (t *Tuner) Choose(ctx context.Context) func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	return func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
		c, err := t.Best(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		return c.Template, c.Config, nil
	}
}

// Cost is the measured time of p's best template and configuration, tuning p if it was not yet,
// for use as an e-graph extraction cost; ok is false when nothing could be measured (the budget
// ran out, or no template accepts p) and the caller should use its static cost.
func (t *Tuner) Cost(ctx context.Context, p *kernels.Problem) (time.Duration, bool) {
	c, err := t.Best(ctx, p)
	if err != nil || c.Static {
		return 0, false
	}
	return c.Time, true
}

// Best tunes every template that accepts p (or reuses their searches) and returns the fastest
// valid configuration; ties go to the template first by name. Results are remembered per
// problem key for the tuner's lifetime. When ctx has ended before anything valid was measured
// for p, the choice is Static. It is an error when no template accepts p, or when every
// template's search completed and found no valid configuration.
func (t *Tuner) Best(ctx context.Context, p *kernels.Problem) (*Choice, error) {
	return t.BestWithin(ctx, p, nil)
}

// BestWithin is Best with a criterion for ending each template's search early: once enough
// returns true for the search's best time so far, the search stops and is recorded complete
// (Entry.Stopped says why), so later compiles reuse it as they reuse a finished one.
func (t *Tuner) BestWithin(ctx context.Context, p *kernels.Problem, enough func(best time.Duration) bool) (*Choice, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.init(); err != nil {
		return nil, err
	}
	pk := p.Key()
	prev, seen := t.choices[pk]
	if seen && (!prev.Static || ctx.Err() != nil) {
		return prev, nil
	}
	if err, ok := t.failed[pk]; ok {
		return nil, err
	}
	c, err := t.best(ctx, p, pk, seen, enough)
	if err != nil {
		t.failed[pk] = err
	}
	return c, err
}

func (t *Tuner) best(ctx context.Context, p *kernels.Problem, pk string, seen bool, enough func(time.Duration) bool) (*Choice, error) {
	tmpls, err := t.Templates(p, t.Caps)
	if err != nil {
		return nil, err
	}
	// The static choice's template is searched first, so that when the budget runs out mid-way the
	// measured baseline includes it: a template measured only because it came first by name must
	// not win over an unmeasured, much faster static choice (seen on the H200: decode attention
	// took the prefill kernel at 664 µs over the split kernel's ~10 µs).
	if t.Static != nil {
		if st, _, err := t.Static(p); err == nil {
			for i, tm := range tmpls {
				if tm == st && i > 0 {
					first := append([]*kernels.Template{tm}, tmpls[:i]...)
					tmpls = append(first, tmpls[i+1:]...)
					break
				}
			}
		}
	}
	in := &checkData{p: p, seed: t.Seed ^ int64(hashString(pk))}
	choice := &Choice{Problem: p}
	allComplete := true
	for _, tm := range tmpls {
		e, err := t.search(ctx, p, tm, in, enough)
		if err != nil {
			return nil, err
		}
		choice.Entries = append(choice.Entries, e)
		allComplete = allComplete && e.Complete
		if e.Best != nil && (choice.Template == nil || e.Time < choice.Time) {
			choice.Template, choice.Config, choice.Time = tm, cloneConfig(e.Best), e.Time
		}
	}
	if choice.Template != nil && t.staticUnmeasured(p, tmpls, choice) {
		// Another template was measured and the static choice's was not (its search cut before
		// a point was timed: a phase's deadline, or a configuration an earlier phase left
		// running): nothing compared them, and the static choice stands. On the H200 a cold
		// compile of SmolLM2 ran two prefill products on matmul_tiled where the static plan
		// runs matmul_coop, and its 128-token prompt took 6.7 ms against 3.5 ms; this is the
		// path the tuner allowed to that (its trace of that compile was not obtained).
		choice.Template, choice.Config, choice.Time = nil, nil, 0
	}
	if choice.Template == nil {
		if allComplete {
			var why []string
			for _, e := range choice.Entries {
				why = append(why, fmt.Sprintf("%s: %d configurations tried, none valid%s", e.Template, e.Tried, firstInvalid(e)))
			}
			return nil, fmt.Errorf("tune %s: no template computes it correctly: %s", pk, strings.Join(why, "; "))
		}
		tm, c, err := t.Static(p)
		if err != nil {
			return nil, fmt.Errorf("tune %s: static choice: %w", pk, err)
		}
		for _, e := range choice.Entries {
			if reason, bad := e.Invalid[c.Key()]; bad && e.Template == tm.Name {
				return nil, fmt.Errorf("tune %s: the budget ran out before a valid configuration was measured, and the static choice %s [%s] is invalid: %s", pk, tm.Name, c.Key(), reason)
			}
		}
		choice.Template, choice.Config, choice.Static = tm, c, true
		if !t.loggedStatic {
			t.loggedStatic = true
			t.logf("nothing was measured for %s before its share of the budget ran out (or the compile was cancelled): it keeps the static choice %s [%s]; the summary counts every such problem", pk, tm.Name, c.Key())
		}
		if !seen {
			t.stats.Static++
		}
	} else if seen {
		t.stats.Static-- // a static choice made earlier is now measured
	}
	if t.Trace != nil {
		fmt.Fprintf(t.Trace, "tune: chose %s [%s] (%v, static=%v) for %s\n", choice.Template.Name, choice.Config.Key(), choice.Time, choice.Static, pk)
	}
	if t.pipes != nil {
		// The plans that run the choice (measured selection's candidates) load its kernels
		// from the tuner's pipelines: they outlive the search.
		if l, err := choice.Template.Build(p, choice.Config, t.Caps); err == nil {
			t.pipes.Keep(l)
		}
	}
	t.choices[pk] = choice
	if !seen {
		t.stats.Kernels++
	}
	t.progress(ctx, "")
	return choice, nil
}

// staticUnmeasured reports whether choice (a measured one) is another template than the static
// choice's, whose search for p measured nothing and did not finish (cut by the budget), while
// the static configuration is not known to be invalid.
func (t *Tuner) staticUnmeasured(p *kernels.Problem, tmpls []*kernels.Template, choice *Choice) bool {
	if t.Static == nil {
		return false
	}
	st, sc, err := t.Static(p)
	if err != nil || st == choice.Template {
		return false
	}
	for i, tm := range tmpls {
		if tm != st || i >= len(choice.Entries) {
			continue
		}
		e := choice.Entries[i]
		_, invalid := e.Invalid[sc.Key()]
		return e.Best == nil && !e.Complete && !invalid
	}
	return false
}

// Record lists the tuner's decisions for a plan's record: for every problem chosen (sorted by
// problem key), each accepting template's best configuration with its measured time, the chosen
// one marked, and a template with no valid configuration noted.
func (t *Tuner) Record() []plan.Candidate {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.choices))
	for k := range t.choices {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []plan.Candidate
	for _, k := range keys {
		c := t.choices[k]
		if c.Static {
			out = append(out, plan.Candidate{Subject: k, Kernel: c.Template.Name, Config: config64(c.Config), Chosen: true,
				Note: "static choice: nothing measured before the budget ran out"})
			continue
		}
		for _, e := range c.Entries {
			pc := plan.Candidate{Subject: k, Kernel: e.Template, Config: config64(e.Best), Measured: e.Time,
				Chosen: e.Template == c.Template.Name}
			pc.Note = fmt.Sprintf("%d configurations tried, %d invalid", e.Tried, len(e.Invalid))
			switch {
			case e.Best == nil && e.Tried == 0:
				pc.Note = "not measured: the budget ran out first"
			case e.Best == nil:
				pc.Note += "; none valid"
			}
			if !e.Complete {
				pc.Note += "; search interrupted"
			}
			out = append(out, pc)
		}
	}
	return out
}

// Choices returns the tuner's choices so far, sorted by problem key.
func (t *Tuner) Choices() []*Choice {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.choices))
	for k := range t.choices {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*Choice, len(keys))
	for i, k := range keys {
		out[i] = t.choices[k]
	}
	return out
}

// Gain compares a problem's tuned choice with its static choice (Tuner.Static), both as
// measured during the search.
type Gain struct {
	Problem       string
	Static, Tuned string        // "template [config]"
	StaticTime    time.Duration // 0 when the static point was not measured (invalid, or the search never reached it)
	TunedTime     time.Duration
}

// Ratio is StaticTime/TunedTime (0 when either is unknown).
func (g Gain) Ratio() float64 {
	if g.StaticTime <= 0 || g.TunedTime <= 0 {
		return 0
	}
	return float64(g.StaticTime) / float64(g.TunedTime)
}

// Gains lists, for every measured choice, what tuning gained over the static choice, largest
// gain first (ties by problem key). The static point is a template's default configuration,
// which every search measures first, so it is known unless it was invalid.
func (t *Tuner) Gains() []Gain {
	var out []Gain
	for _, c := range t.Choices() {
		if c.Static || c.Problem == nil {
			continue
		}
		g := Gain{Problem: c.Problem.Key(), Tuned: c.Template.Name + " [" + c.Config.Key() + "]", TunedTime: c.Time}
		if st, sc, err := t.Static(c.Problem); err == nil {
			g.Static = st.Name + " [" + sc.Key() + "]"
			for _, e := range c.Entries {
				if e.Template == st.Name {
					g.StaticTime = e.Times[sc.Key()]
				}
			}
		}
		out = append(out, g)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Ratio() > out[j].Ratio() })
	return out
}

func config64(c kernels.Config) map[string]int64 {
	if c == nil {
		return nil
	}
	return c.Spec64()
}

func firstInvalid(e *Entry) string {
	keys := make([]string, 0, len(e.Invalid))
	for k := range e.Invalid {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return ""
	}
	sort.Strings(keys)
	return fmt.Sprintf(" (e.g. [%s] %s)", keys[0], e.Invalid[keys[0]])
}

func (t *Tuner) progress(ctx context.Context, current string) {
	if t.Progress == nil {
		return
	}
	pr := Progress{Kernels: t.stats.Kernels, Reused: t.stats.Reused, Configs: t.stats.Configs,
		Invalid: t.stats.Invalid, Current: current}
	if d, ok := ctx.Deadline(); ok {
		pr.Deadline, pr.TimeLeft = true, max(time.Until(d), 0)
	}
	t.Progress(pr)
}

// Key is the database key of template tm on p under this tuner's device and compiler.
func (t *Tuner) Key(tm *kernels.Template, p *kernels.Problem) Key {
	return Key{Device: t.Fingerprint, Driver: t.Driver, Compiler: t.Compiler, Template: tm.Name, Problem: p.Key()}
}

// checkData holds a problem's random inputs and the interpreter's results on them, made on
// first use and shared by every template and configuration of the problem. A problem with more
// run-time rows than CheckLength is checked in a run at CheckLength (at: the problem there, dev:
// the arguments with the rows past it poisoned, want: at's reference) and timed at its capacity
// on args.
type checkData struct {
	p    *kernels.Problem
	seed int64
	done bool
	args []*ir.Tensor
	at   *kernels.Problem // nil: checked at the capacity
	dev  []*ir.Tensor
	want []*ir.Tensor
	err  error
}

// checkedProblem is p at CheckLength rows where it has more run-time rows than that, else nil (p
// is checked at its capacity).
func checkedProblem(p *kernels.Problem) (*kernels.Problem, error) {
	if p.Rows != nil && p.Rows.Max > CheckLength {
		return p.At(CheckLength)
	}
	return nil, nil
}

func (c *checkData) get() ([]*ir.Tensor, []*ir.Tensor, error) {
	if !c.done {
		c.done = true
		c.args = Inputs(c.p, rand.New(rand.NewSource(c.seed)))
		ref := c.args
		if c.at, c.err = checkedProblem(c.p); c.err != nil {
			c.err = fmt.Errorf("reference for %s: %w", c.p.Key(), c.err)
			return nil, nil, c.err
		}
		if c.at != nil {
			ref, c.dev = ArgsAt(c.p, c.at, c.args)
		}
		p := c.p
		if c.at != nil {
			p = c.at
		}
		c.want, c.err = Expect(p, ref)
		if c.err != nil {
			c.err = fmt.Errorf("reference for %s: %w", p.Key(), c.err)
		}
	}
	return c.args, c.want, c.err
}

// referenceTime estimates what the interpreter takes for the problem's reference (get), at the
// rows it is checked at: every argument converted to float64 (referenceElement an element, on one
// core), then its matrix products, 2·M·N·K each, at referenceProduct a core. Measured on the H100
// machine (16 cores, session 15): Llama-3.1-8B's LM head over 512 rows (q8_0[128256,4096]) took
// 19.1 s; 14336×4096 Q8_0 at one row 0.48 s, nearly all of it the conversion.
func (c *checkData) referenceTime() time.Duration {
	p, err := checkedProblem(c.p)
	if err != nil {
		return 0
	}
	p = cmp.Or(p, c.p)
	var elems, flops float64
	for _, a := range p.Args {
		elems += float64(a.Shape.NumElements())
	}
	if f, err := p.Reference(); err == nil {
		for _, n := range f.Nodes {
			info := n.Op.Info()
			if info == nil || len(info.WeightArgs) == 0 || len(n.Outs) == 0 || len(n.Args) <= info.WeightArgs[0] {
				continue
			}
			out, w := n.Outs[0].Shape, n.Args[info.WeightArgs[0]].Type().Shape
			if out.Rank() == 0 || out[out.Rank()-1] == 0 {
				continue
			}
			k := float64(w.NumElements()) / float64(out[out.Rank()-1]) // K (times any batch)
			flops += 2 * float64(out.NumElements()) * k
		}
	}
	return time.Duration(elems*float64(referenceElement) + flops/(referenceProduct*float64(goruntime.NumCPU()))*1e9)
}

// referenceElement and referenceProduct are referenceTime's rates: a tensor element converted to
// float64 (8 ns on one core), and the products' floating-point operations per second a core.
const (
	referenceElement = 8 * time.Nanosecond
	referenceProduct = 1.7e9
)

// check runs launch l once as the problem is checked (at CheckLength when in.at is set, the
// capacity otherwise) and returns the results to compare with in.want.
func (c *checkData) check(ctx context.Context, d *runtime.Device, l *kernels.Launch, pipes *Pipelines, capacity *Bench) ([]*ir.Tensor, error) {
	if c.at == nil {
		return capacity.Run(ctx, c.args)
	}
	b, err := NewBenchAt(d, c.p, l, pipes, CheckLength)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	got, err := b.Run(ctx, c.dev)
	if err != nil {
		return nil, err
	}
	// The capacity's bench runs once, as the timing expects of a checked bench.
	if err := capacity.Exec(ctx, c.args); err != nil {
		return nil, err
	}
	return ResultsAt(c.p, c.at, got), nil
}

// search runs (or reuses, or resumes) the search of template tm on p and returns its entry.
func (t *Tuner) search(ctx context.Context, p *kernels.Problem, tm *kernels.Template, in *checkData, enough func(time.Duration) bool) (*Entry, error) {
	key := t.Key(tm, p)
	e := &Entry{Key: key, Times: map[string]time.Duration{}, Invalid: map[string]string{}, ShortRows: ShortRows(p)}
	if t.DB != nil {
		if old, ok := t.DB.Get(key); ok {
			// An entry whose best point the template's space no longer accepts (a development
			// build whose version string did not change) is stale: search afresh. So is one
			// whose times were not measured at the short length this build times (LengthTime).
			if old.ShortRows != e.ShortRows {
				t.logf("tuning database entry for %s with %s was timed at %d short rows, not %d; searching again", key.Problem, tm.Name, old.ShortRows, e.ShortRows)
				old = nil
			}
			if old != nil && old.Best != nil {
				if err := tm.Space.Valid(p, old.Best, t.Caps); err != nil {
					t.logf("tuning database entry for %s with %s is stale (%v); searching again", key.Problem, tm.Name, err)
					old = nil
				}
			}
			switch {
			case old == nil:
			case old.Reusable(t.CompileBudget):
				t.stats.Reused++
				if !old.Complete {
					t.stats.Kept++
				}
				return old, nil
			default:
				e = old // resume: what it measured is replayed, not measured again
			}
		}
	}
	if ctx.Err() != nil || t.Guard.Abandoned() {
		t.stats.Stopped = true
		t.cut(ctx, e, t.Guard.Abandoned())
		return e, nil
	}
	if _, err := t.device(); err != nil {
		return nil, err
	}
	// The interpreter's reference of the problem is evaluated as the first point is tried, on
	// the device's time (DeviceGuard): one that would outlast the deadline is not started, and
	// the problem keeps its static choice. On the H100 the reference of the 8B's LM head over 512
	// rows (19 s) began 7 s before the tuning phase's end, and the first candidate graph's check
	// waited for it, 12 s of a 60 s budget.
	if !in.done {
		d := in.referenceTime()
		if wouldOverrun(ctx, d) || !t.phase.IsZero() && time.Until(t.phase) < d {
			t.stats.Stopped = true
			t.stats.Unreferenced++
			if t.Trace != nil {
				fmt.Fprintf(t.Trace, "tune: %s %s: its reference would take about %v, past the deadline: left at the static choice\n", tm.Name, key.Problem, d.Round(time.Millisecond))
			}
			t.cut(ctx, e, true)
			return e, nil
		}
	}
	t.stats.Searches++
	current := tm.Name + " " + key.Problem
	var fatal error
	start := time.Now()
	limited := false
	early := false
	// overrun: the next configuration was expected to outlast the deadline, so the search
	// stopped as if the deadline had come.
	overrun := false
	var bestSoFar time.Duration
	stop := func() bool {
		if t.SearchLimit > 0 && time.Since(start) > t.SearchLimit {
			limited = true
		}
		if enough != nil && bestSoFar > 0 && enough(bestSoFar) {
			early = true
		}
		if !early && wouldOverrun(ctx, t.expectedPoint(tm.Name)) {
			overrun = true
		}
		return fatal != nil || ctx.Err() != nil || limited || early || overrun
	}
	// Configurations that realise the same launch (a parameter the template ignores for this
	// problem) share one run and one time.
	sameLaunch := map[string]string{} // launch signature → config key measured
	_, bestSoFar = bestOf(e.Times)
	eval := func(c kernels.Config) (outcome, float64) {
		ck := c.Key()
		if d, ok := e.Times[ck]; ok {
			return timed, float64(d)
		}
		if _, ok := e.Invalid[ck]; ok {
			return failed, 0
		}
		if err := tm.Space.Valid(p, c, t.Caps); err != nil {
			return skipped, 0
		}
		t0 := time.Now()
		var (
			o      outcome
			d      time.Duration
			reason string
			tfatal error
		)
		// t.phase is TunePlan's deadline (t.mu is held: BestWithin).
		var first firstRun
		if !t.Guard.RunBy(t.phase, func() { o, d, reason = t.try(ctx, p, tm, c, in, sameLaunch, e, bestSoFar, &tfatal, &first) }) {
			// The phase's or the hard deadline came while the device worked on it (or on
			// what an earlier phase left running): abandoned, with the search (recorded as
			// the budget cut it).
			overrun = true
			return skipped, 0
		}
		fatal = cmp.Or(fatal, tfatal)
		// What the point cost counts even when the deadline stopped it: the next one is
		// expected to cost as much.
		t.addPoint(tm.Name, time.Since(t0))
		t.addFirstRun(p.OpName(), first)
		if o == skipped { // stopped (context or fatal): nothing is recorded
			return skipped, 0
		}
		e.Tried++
		t.stats.Configs++
		if t.Trace != nil {
			if o == failed { // the problem too: the trace's try lines are often filtered out
				fmt.Fprintf(t.Trace, "tune: %s [%s] invalid: %s (for %s)\n", tm.Name, ck, reason, p.Key())
			} else {
				fmt.Fprintf(t.Trace, "tune: %s [%s] timed: %v\n", tm.Name, ck, d)
			}
		}
		if o == failed {
			e.Invalid[ck] = reason
			t.stats.Invalid++
		} else {
			e.Times[ck] = d
			if bestSoFar == 0 || d < bestSoFar {
				bestSoFar = d
			}
		}
		t.progress(ctx, current)
		return o, float64(d)
	}
	// The static choices a compile without measurement would try first, then the space's
	// suggestions, are measured right after the default point.
	var first []kernels.Config
	if tm.Static != nil {
		first = tm.Static(p, t.Caps)
	}
	plan := searchPlan{Exhaustive: t.Exhaustive, Budget: t.Budget, Seed: t.Seed, First: append(first, tm.Space.Suggestions(p, t.Caps)...)}
	plan.Prefetch = func(cs []kernels.Config) {
		var builds []func() (*kernels.Launch, error)
		for _, c := range cs {
			ck := c.Key()
			if _, ok := e.Times[ck]; ok {
				continue
			}
			if _, ok := e.Invalid[ck]; ok || tm.Space.Valid(p, c, t.Caps) != nil {
				continue
			}
			builds = append(builds, func() (*kernels.Launch, error) { return tm.Build(p, c, t.Caps) })
		}
		t.pipes.Prefetch(current, true, builds)
	}
	complete := search(tm.Space.Params, plan, eval, stop)
	t.pipes.Forget(current)
	if fatal == nil && !errors.Is(ctx.Err(), context.Canceled) && !t.Guard.Abandoned() {
		if err := t.confirm(ctx, p, tm, in, e); err != nil {
			fatal = err
		}
	}
	// A search's pipelines serve no other search (shapes are baked into the modules); dropping
	// them keeps a long compile's memory flat. The device's pipeline cache keeps their code.
	// Within TunePlan they stay until it ends: the next problems' first points are among them.
	// Abandoned work may still use them.
	if !t.planning && !t.Guard.Busy() {
		t.pipes.Release()
	}
	if fatal != nil {
		return nil, fmt.Errorf("tune %s with %s: %w", key.Problem, tm.Name, fatal)
	}
	e.Complete = (complete || early) && ctx.Err() == nil && !limited && !overrun
	if early && !complete && e.Complete {
		e.Stopped = "its best can no longer move its function by more than the noise"
	}
	if !e.Complete {
		t.stats.Stopped = true
	}
	e.Best, e.Time = bestOf(e.Times)
	if !e.Complete {
		t.cut(ctx, e, overrun)
	} else {
		e.Budget = 0
		e.Updated = time.Now().UTC().Truncate(time.Second)
		if t.DB != nil {
			t.DB.Put(e)
		}
	}
	return e, nil
}

// lookahead queues, behind the running search's own, the pipelines of the first points a search
// of p would measure (the static choices and suggestions of each accepting template not already
// decided in the database), so that p's search starts on compiled pipelines.
func (t *Tuner) lookahead(p *kernels.Problem) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.init() != nil || t.choices[p.Key()] != nil || t.Guard.Abandoned() {
		return
	}
	tmpls, err := t.Templates(p, t.Caps)
	if err != nil {
		return
	}
	const perTemplate = 2
	for _, tm := range tmpls {
		if t.DB != nil {
			if e, ok := t.DB.Get(t.Key(tm, p)); ok && e.Reusable(t.CompileBudget) {
				continue
			}
		}
		var first []kernels.Config
		if tm.Static != nil {
			first = tm.Static(p, t.Caps)
		}
		var builds []func() (*kernels.Launch, error)
		for _, c := range append(first, tm.Space.Suggestions(p, t.Caps)...) {
			if len(builds) == perTemplate {
				break
			}
			if tm.Space.Valid(p, c, t.Caps) == nil {
				builds = append(builds, func() (*kernels.Launch, error) { return tm.Build(p, c, t.Caps) })
			}
		}
		if len(builds) == 0 {
			continue
		}
		if _, err := t.device(); err != nil {
			return // the search reports it
		}
		t.pipes.Prefetch(tm.Name+" "+p.Key(), false, builds)
	}
}

// cut records an incomplete search e: with the compile's budget when that budget's deadline
// (not a cancellation) ended it, or was about to (overrun: its next configuration would have
// outlasted it), so that a compile of no larger budget takes it as it stands.
func (t *Tuner) cut(ctx context.Context, e *Entry, overrun bool) {
	e.Budget = 0
	if t.CompileBudget > 0 && (overrun || errors.Is(ctx.Err(), context.DeadlineExceeded)) {
		e.Budget = t.CompileBudget
	}
	if e.Tried == 0 && e.Budget == 0 {
		return // nothing measured, nothing decided
	}
	e.Updated = time.Now().UTC().Truncate(time.Second)
	if t.DB != nil {
		t.DB.Put(e)
	}
}

// confirm times again, back to back after one warm-up measurement, the search's fastest points
// (Confirm of them), the template's default point and its static choice, and keeps the new times
// (see Confirm). It runs when a search ends, also one cut by its share of the budget: the few
// measurements cost milliseconds and make the times it stores comparable. Only a device error
// is returned.
func (t *Tuner) confirm(ctx context.Context, p *kernels.Problem, tm *kernels.Template, in *checkData, e *Entry) error {
	n := t.Confirm
	if n == 0 {
		n = 3
	}
	if n < 0 || len(e.Times) < 2 {
		return nil
	}
	keys := make([]string, 0, len(e.Times))
	for k := range e.Times {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if e.Times[keys[i]] != e.Times[keys[j]] {
			return e.Times[keys[i]] < e.Times[keys[j]]
		}
		return keys[i] < keys[j]
	})
	keys = keys[:min(n, len(keys))]
	def := kernels.Config{}
	for _, prm := range tm.Space.Params {
		def[prm.Name] = prm.Values[0]
	}
	again := []kernels.Config{def}
	if tm.Static != nil {
		// The static choice is the baseline, and the search measures it first, when the GPU
		// may still be at idle clocks: it is timed again beside the winners.
		for _, c := range tm.Static(p, t.Caps) {
			if _, ok := e.Times[c.Key()]; ok {
				again = append(again, c)
				break
			}
		}
	}
	for _, c := range again {
		if _, ok := e.Times[c.Key()]; ok && !slices.Contains(keys, c.Key()) {
			keys = append(keys, c.Key())
		}
	}
	args, _, err := in.get()
	if err != nil {
		return nil
	}
	// Each retiming is a measurement of about its time a dozen times over (warm-up and
	// repetitions), the first twice: when the deadline would come first, the search keeps the
	// times it measured (confirming is what the search's budget could not pay for).
	var need time.Duration
	for _, k := range keys {
		need += 14 * e.Times[k]
	}
	need += 14 * e.Times[keys[0]]
	if wouldOverrun(ctx, need) || ctx.Err() != nil {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	retime := func(key string) (time.Duration, error) {
		c, err := ParseConfig(key)
		if err != nil {
			return 0, nil
		}
		l, err := tm.Build(p, c, t.Caps)
		if err != nil {
			return 0, nil
		}
		b, err := NewBench(t.Device, p, l, t.pipes)
		if err != nil {
			return 0, err
		}
		defer b.Close()
		if err := b.Exec(ctx, args); err != nil {
			return 0, err
		}
		return t.timeLengths(ctx, &Candidate{Problem: p, Template: tm, Config: c, Launch: l, Bench: b}, args)
	}
	if _, err := retime(keys[0]); err != nil { // warm-up: the GPU may have been idle
		return deviceErr(err)
	}
	for _, k := range keys {
		d, err := retime(k)
		if err != nil {
			return deviceErr(err)
		}
		if d > 0 {
			e.Times[k] = d
		}
	}
	return nil
}

// deviceErr keeps the errors that end a tuning session (a lost or closed device).
func deviceErr(err error) error {
	if errors.Is(err, runtime.ErrDeviceLost) || errors.Is(err, runtime.ErrClosed) {
		return err
	}
	return nil
}

// try builds, runs, checks and times one configuration. It returns skipped when the context
// ended or a fatal device error (recorded in *fatal) stopped it: such a configuration is not
// recorded either way.
func (t *Tuner) try(ctx context.Context, p *kernels.Problem, tm *kernels.Template, c kernels.Config, in *checkData,
	sameLaunch map[string]string, e *Entry, bestSoFar time.Duration, fatal *error, first *firstRun) (outcome, time.Duration, string) {
	stopped := func(err error) bool {
		if ctx.Err() != nil {
			return true
		}
		if errors.Is(err, runtime.ErrDeviceLost) || errors.Is(err, runtime.ErrClosed) {
			*fatal = err
			return true
		}
		return false
	}
	// The trace's done line says where the time went: building the kernels, the reference,
	// creating the pipelines, the check run and the timing.
	var took [5]time.Duration
	lap := time.Now()
	mark := func(i int) { now := time.Now(); took[i] = now.Sub(lap); lap = now }
	if t.Trace != nil {
		fmt.Fprintf(t.Trace, "tune: try %s [%s] %s\n", tm.Name, c.Key(), p.Key())
		defer func() {
			fmt.Fprintf(t.Trace, "tune: done %s [%s] (build %v, reference %v, pipelines %v, check %v, timing %v)\n", tm.Name, c.Key(),
				took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), took[2].Round(time.Millisecond),
				took[3].Round(time.Millisecond), took[4].Round(time.Millisecond))
		}()
	}
	l, err := tm.Build(p, c, t.Caps)
	mark(0)
	if err != nil {
		return failed, 0, "build: " + err.Error()
	}
	sig := launchSignature(l)
	if other, ok := sameLaunch[sig]; ok {
		if d, ok := e.Times[other]; ok {
			return timed, d, ""
		}
		if r, ok := e.Invalid[other]; ok {
			return failed, 0, r
		}
	}
	args, want, err := in.get()
	mark(1)
	if err != nil {
		*fatal = err
		return skipped, 0, ""
	}
	b, err := NewBench(t.Device, p, l, t.pipes)
	mark(2)
	if err != nil {
		if stopped(err) {
			return skipped, 0, ""
		}
		if errors.Is(err, ErrSlowPipeline) {
			// Not recorded: the driver finishes it in the background, and a later search
			// finds it in the driver's cache.
			if t.Trace != nil {
				fmt.Fprintf(t.Trace, "tune: %s [%s] skipped: its pipeline took more than %v to compile\n", tm.Name, c.Key(), t.pipes.Wait)
			}
			return skipped, 0, ""
		}
		return failed, 0, "pipeline: " + err.Error()
	}
	defer b.Close()
	got, err := in.check(ctx, t.Device, l, t.pipes, b)
	mark(3)
	first.took = took[2] + took[3]
	seen := map[*codegen.Kernel]bool{}
	for _, st := range l.Steps {
		if !seen[st.Kernel] {
			seen[st.Kernel] = true
			first.words += len(st.Kernel.Words)
		}
	}
	if err != nil {
		if stopped(err) {
			return skipped, 0, ""
		}
		return failed, 0, "run: " + err.Error()
	}
	for i := range want {
		if msg := Compare(got[i], want[i], LaunchTolerance(l, p, i)); msg != "" {
			sameLaunch[sig] = c.Key()
			return failed, 0, fmt.Sprintf("wrong result %d: %s", i, msg)
		}
	}
	d, err := t.timeLengths(ctx, &Candidate{Problem: p, Template: tm, Config: c, Launch: l, Bench: b, BestSoFar: bestSoFar}, args)
	mark(4)
	if err != nil {
		if stopped(err) {
			return skipped, 0, ""
		}
		return failed, 0, "measure: " + err.Error()
	}
	sameLaunch[sig] = c.Key()
	return timed, d, ""
}

// timeLengths times candidate c (its Bench at the problem's capacity, run once) and returns the
// time its search compares: for a problem with run-time rows, LengthTime of the capacity's time
// and the time at ShortRows (a bench of its own, run once on args first, as the timing expects),
// else the capacity's time. A configuration slower at the capacity than twice the best so far
// cannot win (LengthTime is at least half the capacity's time) and is not timed again.
func (t *Tuner) timeLengths(ctx context.Context, c *Candidate, args []*ir.Tensor) (time.Duration, error) {
	d, err := t.Timing.Time(ctx, c)
	n := ShortRows(c.Problem)
	if err != nil || n == 0 || c.BestSoFar > 0 && d > 2*c.BestSoFar {
		return d, err
	}
	b, err := NewBenchAt(t.Device, c.Problem, c.Launch, t.pipes, n)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	if err := b.Exec(ctx, args); err != nil {
		return 0, err
	}
	short := *c
	short.Bench, short.BestSoFar = b, 0
	ds, err := t.Timing.Time(ctx, &short)
	if err != nil {
		return 0, err
	}
	return LengthTime(c.Problem, d, ds), nil
}

// ShortRows is the short length at which a problem with run-time rows (kernels.Rows) is timed
// beside its capacity: ShortLength, or a quarter of the capacity when that is shorter, as
// ShortAt for functions; 0 without run-time rows or below 4 rows of capacity.
func ShortRows(p *kernels.Problem) int {
	if p.Rows == nil || p.Rows.Max < 4 {
		return 0
	}
	return min(ShortLength, p.Rows.Max/4)
}

// LengthTime is the time a search compares for a configuration of a problem with run-time rows,
// from its time at the capacity (capacity) and at ShortRows (short): the mean of the two per-row
// costs, scaled to the capacity, (capacity + short·Max/ShortRows) / 2. A configuration is chosen
// for the prompts it runs, not for the capacity alone: a tile that fills the GPU at 512 rows may
// leave most of it idle at 128 (as the selection found whole graphs doing: docs/tuning.md,
// "Timing at the real length"). For a kernel whose time is proportional to its rows,
// LengthTime is its time at the capacity.
func LengthTime(p *kernels.Problem, capacity, short time.Duration) time.Duration {
	n := ShortRows(p)
	if n == 0 {
		return capacity
	}
	return (capacity + short*time.Duration(p.Rows.Max)/time.Duration(n)) / 2
}

// bestOf returns the configuration with the lowest time (ties: the smallest key).
func bestOf(times map[string]time.Duration) (kernels.Config, time.Duration) {
	bestKey, best := "", time.Duration(0)
	for k, d := range times {
		if bestKey == "" || d < best || d == best && k < bestKey {
			bestKey, best = k, d
		}
	}
	if bestKey == "" {
		return nil, 0
	}
	c, err := ParseConfig(bestKey)
	if err != nil {
		return nil, 0
	}
	return c, best
}

// ParseConfig parses Config.Key's form, "tile_m=32,wg=128" ("" is the empty configuration).
func ParseConfig(s string) (kernels.Config, error) {
	c := kernels.Config{}
	if s == "" {
		return c, nil
	}
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(part, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("configuration %q: %q is not name=value", s, part)
		}
		v, err := strconv.Atoi(val)
		if err != nil {
			return nil, fmt.Errorf("configuration %q: %s: %v", s, name, err)
		}
		c[name] = v
	}
	return c, nil
}

// launchSignature identifies what a Launch does on the device: its kernels with their
// specialization data, grids, push constants, bindings, scratch and sync sizes.
func launchSignature(l *kernels.Launch) string {
	h := sha256.New()
	for _, s := range l.Steps {
		fmt.Fprintf(h, "%s|%v|%x|%v;", kernelKey(s.Kernel, s.Spec), s.Grid, s.Push, s.Bindings)
	}
	fmt.Fprintf(h, "%v|%v", l.Scratch, l.InPlace)
	if len(l.Sync) > 0 {
		fmt.Fprintf(h, "|sync%v", l.Sync)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func hashString(s string) uint64 {
	h := sha256.Sum256([]byte(s))
	var v uint64
	for _, b := range h[:8] {
		v = v<<8 | uint64(b)
	}
	return v
}

// Cheapest returns a simple static choice: among the templates that accept a problem, the one
// whose default configuration has the lowest estimate (ties: the first by name). A nil estimate
// takes the first template that builds. The compile driver uses lower.StaticChoice instead,
// which breaks roofline ties as lowering does, so the tuner's baseline is the kernel a --no-tune
// plan runs (with this one, decode's lm_head baseline was the tiled matmul, 4x slower than the
// matrix-vector kernel lowering picks).
func Cheapest(caps kernels.Caps, estimate func(l *kernels.Launch) time.Duration) func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	return CheapestOf(caps, kernels.For, estimate)
}

// CheapestOf is Cheapest over the templates a given function lists (tests use their own).
func CheapestOf(caps kernels.Caps, templates func(p *kernels.Problem, caps kernels.Caps) ([]*kernels.Template, error),
	estimate func(l *kernels.Launch) time.Duration) func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	return func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
		ts, err := templates(p, caps)
		if err != nil {
			return nil, nil, err
		}
		var bestT *kernels.Template
		var bestC kernels.Config
		var bestE time.Duration
		var firstErr error
		for _, tm := range ts {
			l, c, err := kernels.Build(tm, p, caps)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			if estimate == nil {
				return tm, c, nil
			}
			if e := estimate(l); bestT == nil || e < bestE {
				bestT, bestC, bestE = tm, c, e
			}
		}
		if bestT == nil {
			return nil, nil, fmt.Errorf("no template builds %s: %w", p.Key(), firstErr)
		}
		return bestT, bestC, nil
	}
}
