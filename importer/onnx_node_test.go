package importer_test

import (
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/importer/onnxnode"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// TestONNXNodeInterpreter runs every test of ONNX's backend node suite
// (../shared/oracles/onnx-node) through the importer and the reference interpreter and compares
// at ONNX's runner tolerances. A test vkc cannot express fails unless its manifest flags put it
// in a category vkc's design excludes (onnxnode.Why); the counts are logged per dtype category.
func TestONNXNodeInterpreter(t *testing.T) {
	dir, why := onnxnode.Dir()
	if dir == "" {
		t.Skip(why)
	}
	es, err := onnxnode.Manifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	tally := onnxnode.NewTally()
	for _, e := range es {
		cat := onnxnode.Category(e)
		excused := onnxnode.Why(e)
		c, err := onnxnode.Load(dir, e)
		if err == nil {
			var outs map[string]*ir.Tensor
			outs, _, err = interp.Run(c.Import.Model, importer.FunctionName, c.Inputs, nil)
			if err == nil {
				err = c.Check(outs)
			} else {
				t.Errorf("%s: %v", e.Test, err)
				tally.Failed[cat]++
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", e.Test, err)
				tally.Failed[cat]++
				continue
			}
			tally.Passed[cat]++
			continue
		}
		tally.Unsupported[cat]++
		if excused == "" {
			t.Errorf("%s: unsupported: %v", e.Test, err)
			tally.Reasons["(not excused) "+e.Op]++
			continue
		}
		tally.Reasons[excused]++
	}
	t.Logf("ONNX node tests through the interpreter: %s", tally)
}
