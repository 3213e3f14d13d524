package importer_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/importer/onnxnode"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// TestONNXNodeInterpreter runs every test of ONNX's backend node suite
// (../shared/oracles/onnx-node) through the importer and the reference interpreter and compares
// at ONNX's runner tolerances. A test vkc cannot express fails unless its manifest flags put it
// in a category vkc's design excludes (onnxnode.Why); the counts are logged per dtype category.
func TestONNXNodeInterpreter(t *testing.T) {
	dir := oracles.Dir(t, "onnx-node")
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

// TestONNXNodeYAMLRoundTrip writes every imported node-test model as model.yaml (with its
// weights file) and parses it back: the parsed model computes bit for bit what the import does.
func TestONNXNodeYAMLRoundTrip(t *testing.T) {
	dir := oracles.Dir(t, "onnx-node")
	es, err := onnxnode.Manifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	n := 0
	for _, e := range es {
		c, err := onnxnode.Load(dir, e)
		if err != nil {
			continue // TestONNXNodeInterpreter accounts for these
		}
		path := filepath.Join(out, e.Test+".yaml")
		if _, err := importer.WriteModelYAML(context.Background(), c.Import.Model, path, importer.YAMLOptions{Header: []string{"imported from " + e.Test}}); err != nil {
			t.Errorf("%s: write: %v", e.Test, err)
			continue
		}
		m, err := ir.ParseModel(path)
		if err != nil {
			src, _ := os.ReadFile(path)
			t.Errorf("%s: parse: %v\n%s", e.Test, err, src)
			continue
		}
		want, _, err := interp.Run(c.Import.Model, importer.FunctionName, c.Inputs, nil)
		if err != nil {
			t.Errorf("%s: %v", e.Test, err)
			continue
		}
		got, _, err := interp.Run(m, importer.FunctionName, c.Inputs, nil)
		if err != nil {
			t.Errorf("%s: parsed model: %v", e.Test, err)
			continue
		}
		for name, w := range want {
			g := got[name]
			if g == nil || !g.Type.Equal(w.Type) || !bytes.Equal(g.Data, w.Data) {
				t.Errorf("%s: output %s differs after model.yaml", e.Test, name)
			}
		}
		n++
	}
	t.Logf("%d models round-tripped through model.yaml", n)
}
