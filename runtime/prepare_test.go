package runtime

import (
	"context"
	"testing"
)

// TestPrepare: Prepare readies the pipelines of what it is asked for (a function at a length
// runs one variant's), counts what earlier calls did, reports progress up to its total, and runs
// afterwards give the results they give without it.
func TestPrepare(t *testing.T) {
	d := openTest(t, Options{})
	ctx := context.Background()
	e, err := d.Load(lengthVariantPlan(t, d), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
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
