package tune

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
)

// Two compiles of an example through lower.Lower with the tuner as Options.Choose: the first
// tunes every kernel and the plan uses the tuned configurations; the second, over the saved
// database, measures nothing, reuses every search and gives the same plan.
func TestLowerWithTunerTwice(t *testing.T) {
	d := testDevice(t)
	m, err := ir.ParseModel("../../examples/mlp/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tune.json")
	// A clock whose best point is never a template's default: the largest workgroup, then the
	// most elements per invocation.
	timeOf := func(tmpl string, c kernels.Config) time.Duration {
		d := time.Millisecond
		for _, v := range c {
			d -= time.Duration(v) * time.Nanosecond
		}
		return d
	}
	compile := func() (*Tuner, *fakeClock, *lower.Report) {
		db, err := OpenDB(path)
		if err != nil {
			t.Fatal(err)
		}
		clock := &fakeClock{timeOf: timeOf}
		tu := &Tuner{Device: d, DB: db, Compiler: "vkc test", Timing: clock, Exhaustive: 2, Budget: 2}
		t.Cleanup(tu.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, rep, err := lower.Lower(m, m.Functions, lower.Options{Caps: CapsOf(&d.Info), Device: d.DeviceFingerprint(),
			CompilerVersion: "vkc test", Choose: tu.Choose(ctx)})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Save(); err != nil {
			t.Fatal(err)
		}
		return tu, clock, rep
	}
	tu1, clock1, rep1 := compile()
	s1 := tu1.Stats()
	t.Log(tu1.Summary())
	if s1.Kernels == 0 || s1.Searches == 0 || clock1.count() == 0 || s1.Reused != 0 || s1.Static != 0 {
		t.Fatalf("first compile: %+v", s1)
	}
	for _, f := range rep1.Functions {
		for _, k := range f.Kernels {
			p := findChoice(tu1, k.Problem)
			if p == nil {
				t.Errorf("kernel %s (%s) was not chosen by the tuner", k.Label, k.Problem)
				continue
			}
			if k.Template != p.Template.Name || k.Config.Key() != p.Config.Key() {
				t.Errorf("kernel %s: plan has %s [%s], the tuner chose %s [%s]", k.Label, k.Template, k.Config.Key(), p.Template.Name, p.Config.Key())
			}
		}
	}
	tu2, clock2, rep2 := compile()
	s2 := tu2.Stats()
	t.Log(tu2.Summary())
	if clock2.count() != 0 || s2.Configs != 0 || s2.Searches != 0 || s2.Reused != s1.Searches || s2.Kernels != s1.Kernels {
		t.Errorf("second compile: %+v (first %+v); want every search reused, nothing tried", s2, s1)
	}
	for i, f := range rep2.Functions {
		for j, k := range f.Kernels {
			k1 := rep1.Functions[i].Kernels[j]
			if k.Template != k1.Template || k.Config.Key() != k1.Config.Key() {
				t.Errorf("kernel %s: second compile chose %s [%s], first %s [%s]", k.Label, k.Template, k.Config.Key(), k1.Template, k1.Config.Key())
			}
		}
	}
}

func findChoice(t *Tuner, problem string) *Choice {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.choices[problem]
}
