package vkc

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/importer/onnxnode"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

// planExcuse says why a test that the interpreter runs cannot run as a compiled plan, or "":
// kernels store f32, f16, i32, u32 and bool, not bf16 (lavapipe and the kernels have no bf16
// storage; the interpreter has bf16).
func planExcuse(c *onnxnode.Case) string {
	for _, p := range append(append([]importer.Port(nil), c.Import.Inputs...), c.Import.Outputs...) {
		if p.Type.DType == ir.BF16 {
			return "bf16: kernels have no bf16 storage"
		}
	}
	return ""
}

// TestONNXNodePlans runs every test of ONNX's node suite (../shared/oracles/onnx-node) that
// the importer takes through a compiled plan on the device (lavapipe in CI) and compares with
// the expected outputs at ONNX's runner tolerances. Tests are compiled one after another for
// one device (the kernel and fold caches of one process), each loaded, run once and closed. The
// counts are logged per dtype category, with the time spent.
func TestONNXNodePlans(t *testing.T) {
	dir := oracles.Dir(t, "onnx-node")
	d := device(t)
	es, err := onnxnode.Manifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	target := targetOf(d)
	tally := onnxnode.NewTally()
	start := time.Now()
	var compileTime, loadTime, runTime time.Duration
	for _, e := range es {
		cat := onnxnode.Category(e)
		c, err := onnxnode.Load(dir, e)
		if err != nil {
			tally.Unsupported[cat]++
			if excuse := onnxnode.Why(e); excuse != "" {
				tally.Reasons[excuse]++
			} else {
				t.Errorf("%s: unsupported: %v", e.Test, err)
				tally.Reasons["(not excused) "+e.Op]++
			}
			continue
		}
		if excuse := planExcuse(c); excuse != "" {
			tally.Unsupported[cat]++
			tally.Reasons[excuse]++
			continue
		}
		t0 := time.Now()
		p, _, err := Compile(context.Background(), c.Import.Model, Options{Target: target})
		compileTime += time.Since(t0)
		if err != nil {
			var nt *lower.NoTemplateError
			if errors.As(err, &nt) {
				t.Errorf("%s: no kernel template for %s (node %s)", e.Test, nt.Op, nt.Node)
			} else {
				t.Errorf("%s: compile: %v", e.Test, err)
			}
			tally.Failed[cat]++
			continue
		}
		t0 = time.Now()
		exe, err := d.Load(p, runtime.LoadOptions{})
		loadTime += time.Since(t0)
		if err != nil {
			t.Errorf("%s: load: %v", e.Test, err)
			tally.Failed[cat]++
			continue
		}
		t0 = time.Now()
		got, err := runPlan(exe, p.Function(importer.FunctionName), c)
		runTime += time.Since(t0)
		exe.Close()
		if err == nil {
			err = c.Check(got)
		}
		if err != nil {
			t.Errorf("%s: %v", e.Test, err)
			tally.Failed[cat]++
			continue
		}
		tally.Passed[cat]++
	}
	t.Logf("ONNX node tests through compiled plans on %s in %v (compile %v, load %v, run %v): %s",
		d.Info.Name, time.Since(start).Round(time.Millisecond), compileTime.Round(time.Millisecond),
		loadTime.Round(time.Millisecond), runTime.Round(time.Millisecond), tally)
}

// runPlan runs f once with the case's inputs (bool as the plan's u32) and returns the outputs
// in the function's dtypes (u32 results of bool outputs as bool).
func runPlan(exe *runtime.Executable, f *plan.Function, c *onnxnode.Case) (map[string]*ir.Tensor, error) {
	if f == nil {
		return nil, fmt.Errorf("the plan has no function %s", importer.FunctionName)
	}
	in := map[string]*ir.Tensor{}
	for name, x := range c.Inputs {
		if x.Type.DType == ir.Bool {
			x = x.Convert(ir.U32)
		}
		in[name] = x
	}
	bin, err := Inputs(f, in)
	if err != nil {
		return nil, err
	}
	res, err := exe.Run(context.Background(), f.Name, bin)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	got, err := Outputs(f, res)
	if err != nil {
		return nil, err
	}
	for _, p := range c.Import.Outputs {
		if g := got[p.Name]; g != nil && p.Type.DType == ir.Bool && g.Type.DType != ir.Bool {
			got[p.Name] = g.Convert(ir.Bool)
		}
	}
	return got, nil
}
