package runtime

import (
	"context"
	"os"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// loadVariants opens the test device and loads lengthVariantPlan on it, closed with the test.
func loadVariants(t *testing.T) (*Device, *Executable) {
	t.Helper()
	d := openTest(t, Options{})
	e, err := d.Load(lengthVariantPlan(t, d), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return d, e
}

// TestPrepare: Prepare readies the pipelines of what it is asked for (a function at a length
// runs one variant's), counts what earlier calls did, reports progress up to its total, and runs
// afterwards give the results they give without it.
func TestPrepare(t *testing.T) {
	_, e := loadVariants(t)
	ctx := context.Background()
	var calls [][2]int
	progress := func(done, total int) { calls = append(calls, [2]int{done, total}) }
	// f at length 2 runs the variant (module add_1000n): one pipeline.
	st, err := e.Prepare(ctx, PrepareOptions{Functions: []FunctionLength{{"f", 2}}, Progress: progress})
	if err != nil || st.Pipelines != 1 || st.Before != 0 {
		t.Fatalf("prepare f at 2: %+v, %v", st, err)
	}
	if len(calls) != 2 || calls[0] != [2]int{0, 1} || calls[1] != [2]int{1, 1} {
		t.Errorf("progress %v, want 0/1 then 1/1", calls)
	}
	// Everything: the other pipeline now, the variant's counted as before.
	calls = nil
	n := len(e.ownPipes)
	st, err = e.Prepare(ctx, PrepareOptions{Progress: progress})
	if err != nil || st.Pipelines != n-1 || st.Before != 1 || n < 2 {
		t.Fatalf("prepare all of %d: %+v, %v", n, st, err)
	}
	if last := calls[len(calls)-1]; last != [2]int{n - 1, n - 1} {
		t.Errorf("progress ended at %v", last)
	}
	if st, err = e.Prepare(ctx, PrepareOptions{}); err != nil || st.Pipelines != 0 || st.Before != n {
		t.Fatalf("prepare all again: %+v, %v", st, err)
	}
	if _, err := e.Prepare(ctx, PrepareOptions{Functions: []FunctionLength{{"g", 0}}}); err == nil {
		t.Errorf("an unknown function: no error")
	}
	checkLengthVariants(t, ctx, e)
}

// TestPrepareHelpers: with helper devices forced (as on a CPU implementation with processors to
// spare), Prepare still prepares every pipeline once, its progress ends at its total, and runs
// give the results they give without it; on a fresh Mesa disk cache, so that the helpers'
// compiles are what the device then finds.
func TestPrepareHelpers(t *testing.T) {
	t.Setenv("MESA_SHADER_CACHE_DIR", t.TempDir())
	t.Setenv("LP_NUM_THREADS", "2") // what a user set: the helpers open with 1, then it is back
	_, e := loadVariants(t)
	ctx := context.Background()
	var mu sync.Mutex
	var calls [][2]int
	progress := func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, [2]int{done, total})
	}
	n := len(e.ownPipes)
	st, err := e.Prepare(ctx, PrepareOptions{Helpers: 3, Progress: progress})
	if err != nil || st.Pipelines != n || st.Helped > st.Pipelines {
		t.Fatalf("prepare all of %d with helpers: %+v, %v", n, st, err)
	}
	for i, c := range calls {
		if c != [2]int{i, n} {
			t.Fatalf("progress %v, want 0/%d, 1/%d, … %d/%d", calls, n, n, n, n)
		}
	}
	if len(calls) != n+1 {
		t.Errorf("progress %v: %d calls, want %d", calls, len(calls), n+1)
	}
	if v := os.Getenv("LP_NUM_THREADS"); v != "2" {
		t.Errorf("LP_NUM_THREADS is %q after Prepare, want the 2 set before", v)
	}
	checkLengthVariants(t, ctx, e)
}

// TestHelperThreads: LP_NUM_THREADS is 1 while helper devices open, and afterwards as it was,
// set or not.
func TestHelperThreads(t *testing.T) {
	t.Setenv("LP_NUM_THREADS", "")
	os.Unsetenv("LP_NUM_THREADS")
	restore := helperThreads()
	if v := os.Getenv("LP_NUM_THREADS"); v != "1" {
		t.Errorf("while helpers open: %q, want 1", v)
	}
	restore()
	if v, ok := os.LookupEnv("LP_NUM_THREADS"); ok {
		t.Errorf("unset before, %q after", v)
	}
	os.Setenv("LP_NUM_THREADS", "5")
	helperThreads()()
	if v := os.Getenv("LP_NUM_THREADS"); v != "5" {
		t.Errorf("5 before, %q after", v)
	}
}

// TestWarmHelpers: helper devices compile every pipeline they are given, each reported once,
// and the device then prepares them.
func TestWarmHelpers(t *testing.T) {
	t.Setenv("MESA_SHADER_CACHE_DIR", t.TempDir())
	d, e := loadVariants(t)
	var mu sync.Mutex
	todo := append([]*Pipeline(nil), e.ownPipes...)
	given := 0
	take := func() (*Pipeline, bool) {
		mu.Lock()
		defer mu.Unlock()
		if given == len(todo) {
			return nil, false
		}
		given++
		return todo[given-1], true
	}
	seen := map[*Pipeline]int{}
	stop := d.warmHelpers(context.Background(), 2, take, func(pl *Pipeline, compiled bool) {
		mu.Lock()
		defer mu.Unlock()
		if !compiled {
			t.Errorf("a helper failed to compile %s", pl.Kernel.Name)
		}
		seen[pl]++
	})
	if got := stop(); got != len(todo) {
		t.Fatalf("helpers compiled %d pipelines, want %d", got, len(todo))
	}
	for _, pl := range todo {
		if seen[pl] != 1 {
			t.Errorf("pipeline %s reported %d times", pl.Kernel.Name, seen[pl])
		}
	}
	if st, err := e.Prepare(context.Background(), PrepareOptions{Helpers: -1}); err != nil || st.Pipelines != len(todo) {
		t.Fatalf("prepare after the helpers: %+v, %v", st, err)
	}
	checkLengthVariants(t, context.Background(), e)
}

// TestHelperCount: how many helper devices Prepare opens: one a further processor on a CPU
// implementation, fewer where the pipelines are fewer, none when Mesa's disk cache is off or an
// earlier Prepare found the helpers' compiles did not reach the device, as many as asked when
// asked (VKC_PREPARE_HELPERS, PrepareOptions.Helpers).
func TestHelperCount(t *testing.T) {
	d := openTest(t, Options{})
	if d.Info.Type != CPU {
		t.Skipf("missing capability: %s is not a CPU implementation (helpers are for lavapipe)", d.Info.Name)
	}
	t.Setenv("VKC_PREPARE_HELPERS", "")
	t.Setenv("MESA_SHADER_CACHE_DISABLE", "")
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(4))
	for _, c := range []struct {
		name    string
		env     [2]string // VKC_PREPARE_HELPERS, MESA_SHADER_CACHE_DISABLE
		helpers int
		n       int
		off     bool // d.noHelpers
		want    int
	}{
		{"one a further processor", [2]string{}, 0, 100, false, 3},
		{"fewer pipelines", [2]string{}, 0, 3, false, 2},
		{"one pipeline", [2]string{}, 0, 1, false, 0},
		{"environment", [2]string{"7"}, 0, 100, false, 7},
		{"environment none", [2]string{"0"}, 0, 100, false, 0},
		{"at most maxHelpers", [2]string{"99"}, 0, 100, false, maxHelpers},
		{"Mesa's cache off", [2]string{"", "true"}, 0, 100, false, 0},
		{"found ineffective", [2]string{}, 0, 100, true, 0},
		{"asked", [2]string{"0", "1"}, 5, 100, true, 5},
		{"asked none", [2]string{}, -1, 100, false, 0},
	} {
		t.Setenv("VKC_PREPARE_HELPERS", c.env[0])
		t.Setenv("MESA_SHADER_CACHE_DISABLE", c.env[1])
		d.noHelpers.Store(c.off)
		if got := helperCount(d, PrepareOptions{Helpers: c.helpers}, c.n); got != c.want {
			t.Errorf("%s: %d helpers, want %d", c.name, got, c.want)
		}
	}
	d.noHelpers.Store(false)
}

// Load says where its time went, step by step in the order it takes them.
func TestLoadPhases(t *testing.T) {
	_, e := loadVariants(t)
	var steps []string
	for _, ph := range e.LoadPhases() {
		if ph.Time < 0 {
			t.Errorf("step %s: %v", ph.Step, ph.Time)
		}
		steps = append(steps, ph.Step)
	}
	want := []string{"checks", "state and arena", "weights", "zeros", "pipelines", "functions"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
}

// TestCountDeviceTime: after CountDeviceTime each run adds its device time (on a device with
// timestamps: more than nothing, and no more than the run's wall time), and the next
// CountDeviceTime starts again from zero; runs before the first are not counted.
func TestCountDeviceTime(t *testing.T) {
	d, e := loadVariants(t)
	ctx := context.Background()
	run := func() time.Duration {
		t.Helper()
		t0 := time.Now()
		if _, err := e.Run(ctx, "f", map[string][]byte{"x": bytesOf([]float32{1, 2, 3}), "pos": u32(0)}); err != nil {
			t.Fatal(err)
		}
		return time.Since(t0)
	}
	run()
	if got := e.DeviceTime(); got != 0 {
		t.Errorf("before CountDeviceTime: %v", got)
	}
	e.CountDeviceTime()
	wall := run() + run()
	got := e.DeviceTime()
	if d.Info.Caps.Timestamps && got <= 0 || got > wall+wall/20 {
		t.Errorf("two runs of %v wall time: %v on the device (timestamps: %v)", wall, got, d.Info.Caps.Timestamps)
	}
	e.CountDeviceTime()
	if got := e.DeviceTime(); got != 0 {
		t.Errorf("counting again: %v", got)
	}
}
