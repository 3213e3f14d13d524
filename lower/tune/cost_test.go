package tune

import (
	"context"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// OpCost prices an elementwise e-node by tuning the registered elementwise template on its
// one-node problem; a reshape (a view) and an op without a template are left to the static cost.
// Record lists the decision for the plan.
func TestOpCostAndRecord(t *testing.T) {
	d := testDevice(t)
	clock := &fakeClock{timeOf: func(tmpl string, c kernels.Config) time.Duration {
		return time.Duration(c["wg"]+c["per_thread"]) * time.Microsecond
	}}
	tu := &Tuner{Device: d, Compiler: "vkc test", Timing: clock}
	defer tu.Close()
	price := tu.OpCost(context.Background())
	x := ir.T(ir.F32, 3, 37)
	got, ok := price(ir.Neg, nil, []ir.Type{x}, []ir.Type{x})
	if !ok || got != 65*time.Microsecond {
		t.Errorf("neg priced %v, %v; want the clock's best, 65µs (wg=64, per_thread=1), true", got, ok)
	}
	if _, ok := price(ir.Reshape, ir.Attrs{"shape": []int{37, 3}}, []ir.Type{x}, []ir.Type{ir.T(ir.F32, 37, 3)}); ok {
		t.Error("a reshape was priced by measurement; it is a view")
	}
	n := clock.count()
	if _, ok := price(ir.Neg, nil, []ir.Type{x}, []ir.Type{x}); !ok || clock.count() != n {
		t.Errorf("pricing the same e-node again timed %d more configurations", clock.count()-n)
	}
	p, _ := ProblemOf(ir.Neg, nil, []ir.Type{x}, []ir.Type{x})
	if p.Op != kernels.FusedElementwise || p.Expr == nil || len(p.Expr.Nodes) != 2 || p.Expr.Nodes[1].Op != ir.Neg {
		t.Errorf("problem %s: want a fused elementwise problem of one neg node", p.Key())
	}
	rec := tu.Record()
	chosen := 0
	for _, c := range rec {
		if c.Chosen {
			chosen++
			if c.Kernel != "elementwise" || c.Measured != 65*time.Microsecond || c.Config["wg"] != 64 {
				t.Errorf("record %+v", c)
			}
		}
	}
	if chosen != 1 {
		t.Errorf("record %+v: want one chosen candidate", rec)
	}
}
