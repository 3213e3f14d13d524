package importer_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir/onnx"
)

// Issue 25's hostile inputs: each is a clear error naming the input, within seconds, and
// nothing is read outside the model's folder.

// within fails the test if f takes longer than a few seconds (it runs f in the test goroutine
// after a watchdog is set: a hang ends the test binary with the stacks, at the test timeout).
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	t0 := time.Now()
	err := f()
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("%s: took %v", what, d)
	}
	return err
}

// TestGGUFHostileMetadata: metadata that disagrees with the file's tensors, or a float that is not
// a usable number, is an error naming the key before a model.yaml is written (severe case 1:
// block_count 2^31-1 crashed the process allocating 2^31 names).
func TestGGUFHostileMetadata(t *testing.T) {
	src, _ := oracles.LlamaCpp(t, "llama-tiny/llama-tiny-F16")
	for _, c := range []struct {
		name string
		kv   map[string]any
		want string
	}{
		{"block_count 2^31-1", map[string]any{"llama.block_count": uint32(math.MaxInt32)}, "llama.block_count is 2147483647, but the tensors hold 2 layers"},
		{"block_count 3", map[string]any{"llama.block_count": uint32(3)}, "llama.block_count is 3, but the tensors hold 2 layers"},
		{"embedding_length", map[string]any{"llama.embedding_length": uint32(1 << 30)}, "llama.embedding_length 1073741824"},
		{"feed_forward_length", map[string]any{"llama.feed_forward_length": uint32(7)}, "feed_forward_length 7"},
		{"head_count", map[string]any{"llama.attention.head_count": uint32(8), "llama.attention.head_count_kv": uint32(8)}, "llama.attention.head_count 8"},
		{"vocab_size", map[string]any{"llama.vocab_size": uint32(999)}, "llama.vocab_size 999"},
		{"negative eps", map[string]any{"llama.attention.layer_norm_rms_epsilon": float32(-1e-5)}, "layer_norm_rms_epsilon is -9.999999747378752e-06; want a positive number"},
		{"theta +Inf", map[string]any{"llama.rope.freq_base": float32(math.Inf(1))}, "llama.rope.freq_base is +Inf; want a positive number"},
		{"theta NaN", map[string]any{"llama.rope.freq_base": float32(math.NaN())}, "llama.rope.freq_base is NaN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := ggufWith(t, src, c.kv, nil)
			err := within(t, c.name, func() error {
				_, err := importer.ImportGGUF(p, importer.GGUFOptions{SkipWeights: true})
				return err
			})
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "does not load") {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestGGUFContextOverflow: a context whose KV cache no tensor can hold is an error naming the
// context, not "the generated model.yaml does not load".
func TestGGUFContextOverflow(t *testing.T) {
	src, _ := oracles.LlamaCpp(t, "llama-tiny/llama-tiny-F16")
	_, err := importer.ImportGGUF(src, importer.GGUFOptions{Ctx: math.MaxInt32, Prefill: 1, SkipWeights: true})
	if err == nil || !strings.Contains(err.Error(), "context 2147483647: a KV cache of [2147483647, 2, 64] is more than a tensor may hold") {
		t.Errorf("error %v", err)
	}
}

// TestHFHostileConfig: severe case 2 (num_hidden_layers 10^7 grew to 11 GB) and the config
// values the tensors contradict.
func TestHFHostileConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(cfg map[string]any)
		want string
	}{
		{"layers 10^7", func(cfg map[string]any) { cfg["num_hidden_layers"] = 10_000_000 }, "num_hidden_layers is 10000000, but the tensors hold 2 layers"},
		{"layers 2^31-1", func(cfg map[string]any) { cfg["num_hidden_layers"] = math.MaxInt32 }, "num_hidden_layers is 2147483647"},
		{"hidden_size", func(cfg map[string]any) { cfg["hidden_size"] = 1 << 20 }, "hidden_size 1048576"},
		{"vocab_size", func(cfg map[string]any) { cfg["vocab_size"] = 41 }, "vocab_size 41"},
		{"negative eps", func(cfg map[string]any) { cfg["rms_norm_eps"] = -1e-6 }, "rms_norm_eps is -1e-06; want a positive number"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, ts := randomCheckpoint("LlamaForCausalLM", 2, 9)
			c.edit(cfg)
			dir := filepath.Join(t.TempDir(), "m")
			writeCheckpoint(t, dir, cfg, ts, 1)
			err := within(t, c.name, func() error {
				_, err := importer.ImportHF(dir, importer.HFOptions{SkipWeights: true})
				return err
			})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestHFSpecialFiles: severe case 5: a FIFO as model.safetensors, as a shard or as
// tokenizer.json is refused at once, naming it (it blocked forever).
func TestHFSpecialFiles(t *testing.T) {
	for _, c := range []struct {
		name   string
		shards int
		fifo   string
	}{
		{"model.safetensors", 1, "model.safetensors"},
		{"shard", 2, "model-00002-of-00002.safetensors"},
		{"tokenizer.json", 1, "tokenizer.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, ts := randomCheckpoint("LlamaForCausalLM", 2, 9)
			dir := filepath.Join(t.TempDir(), "m")
			writeCheckpoint(t, dir, cfg, ts, c.shards)
			p := filepath.Join(dir, c.fifo)
			os.Remove(p)
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Skipf("needs mkfifo: %v", err)
			}
			err := within(t, c.name, func() error {
				_, err := importer.ImportHF(dir, importer.HFOptions{SkipWeights: true})
				return err
			})
			if err == nil || !strings.Contains(err.Error(), p+" is a named pipe (FIFO), not a regular file") {
				t.Errorf("error %v, want one naming %s as a FIFO", err, p)
			}
		})
	}
	// A shard may be a link to a regular file elsewhere (the Hugging Face cache links a
	// snapshot's files to its blobs).
	cfg, ts := randomCheckpoint("LlamaForCausalLM", 2, 9)
	root := t.TempDir()
	dir := filepath.Join(root, "snapshot")
	writeCheckpoint(t, dir, cfg, ts, 2)
	blob := filepath.Join(root, "blobs", "abc123")
	os.MkdirAll(filepath.Dir(blob), 0o755)
	shard := filepath.Join(dir, "model-00001-of-00002.safetensors")
	if err := os.Rename(shard, blob); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(blob, shard); err != nil {
		t.Fatal(err)
	}
	if _, err := importer.ImportHF(dir, importer.HFOptions{}); err != nil {
		t.Errorf("a shard linked into a cache folder: %v", err)
	}
}

// externalModel writes an ONNX model y = x + w whose initializer w (f32[4]) is external data at
// location (relative to the model's folder, dir), and returns the model's path.
func externalModel(t *testing.T, dir, location string) string {
	t.Helper()
	w := &onnx.Tensor{Name: "w", Dims: []int64{4}, DataType: onnx.Float, DataLocation: 1,
		External: []onnx.KeyValue{{Key: "location", Value: location}, {Key: "offset", Value: "0"}, {Key: "length", Value: "16"}}}
	g := &onnx.Graph{Inputs: []*onnx.ValueInfo{tensorInfo("x", onnx.Float, 4)}, Outputs: []*onnx.ValueInfo{{Name: "y"}},
		Initializers: []*onnx.Tensor{w},
		Nodes:        []*onnx.Node{{Name: "a", OpType: "Add", Inputs: []string{"x", "w"}, Outputs: []string{"y"}}}}
	p := filepath.Join(dir, "m.onnx")
	if err := os.WriteFile(p, onnx.Marshal(&onnx.Model{IRVersion: 8, Opsets: []onnx.OpsetID{{Version: 13}}, Graph: g}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestONNXExternalDataConfined: severe cases 3 and 4: external data through a symbolic link that
// leads out of the model's folder is refused (it was read and written into the weights), and so
// is a FIFO (it blocked forever); a link that stays inside the folder, and a folder reached
// through a link, are read.
func TestONNXExternalDataConfined(t *testing.T) {
	root := t.TempDir()
	secret := filepath.Join(root, "secret.bin")
	if err := os.WriteFile(secret, make([]byte, 16), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "model")
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	if err := os.Symlink(secret, filepath.Join(dir, "out.bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../secret.bin", filepath.Join(dir, "data", "rel.bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../..", filepath.Join(dir, "data", "up")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "data", "w.bin"), make([]byte, 16), 0o644)
	os.Symlink("data/w.bin", filepath.Join(dir, "in.bin"))
	fifo := filepath.Join(dir, "fifo.bin")
	haveFIFO := syscall.Mkfifo(fifo, 0o644) == nil
	for _, c := range []struct{ loc, want string }{
		{"out.bin", "outside the model's folder"},
		{"data/rel.bin", "outside the model's folder"},
		{"../secret.bin", "leaves the model's folder"},
		{"data/up/secret.bin", "outside the model's folder"},
		{"fifo.bin", "is a named pipe (FIFO), not a regular file"},
		{"in.bin", ""},
		{"data/w.bin", ""},
	} {
		if c.loc == "fifo.bin" && !haveFIFO {
			continue
		}
		p := externalModel(t, dir, c.loc)
		err := within(t, c.loc, func() error {
			_, err := importer.ImportONNX(p, importer.ONNXOptions{})
			return err
		})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.loc, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.loc, err, c.want)
		}
	}
	// The whole model folder reached through a link: its files are inside it.
	linked := filepath.Join(root, "linked")
	os.Symlink(dir, linked)
	if _, err := importer.ImportONNX(externalModel(t, dir, "in.bin"), importer.ONNXOptions{}); err != nil {
		t.Errorf("through a linked folder: %v", err)
	}
}

// TestONNXNodeChecks: issue 25's ONNX cases, each an error naming the node: two nodes writing
// one value (the last won silently), a node writing a graph input, an attribute of the wrong
// type (Softmax's axis as a string read as 0), duplicate and unknown attributes (ignored), an
// opset newer than vkc knows (accepted).
func TestONNXNodeChecks(t *testing.T) {
	x := tensorInfo("x", onnx.Float, 2, 3)
	relu := func(in, out string, attrs ...*onnx.Attribute) *onnx.Node {
		return &onnx.Node{OpType: "Relu", Inputs: []string{in}, Outputs: []string{out}, Attrs: attrs}
	}
	axis := func(a *onnx.Attribute) *onnx.Node {
		return &onnx.Node{Name: "sm", OpType: "Softmax", Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: []*onnx.Attribute{a}}
	}
	for _, c := range []struct {
		name  string
		opset int64
		nodes []*onnx.Node
		want  string
	}{
		{"two writers", 13, []*onnx.Node{relu("x", "y"), relu("x", "y")}, `node 1 "" (Relu, opset 13): output 0: "y" is an earlier node's output`},
		{"writes an input", 13, []*onnx.Node{relu("x", "x"), relu("x", "y")}, `node 0 "" (Relu, opset 13): output 0: "x" is a graph input`},
		{"axis a string", 13, []*onnx.Node{axis(&onnx.Attribute{Name: "axis", Type: onnx.AttrString, S: []byte("1")})},
			`node 0 "sm" (Softmax, opset 13): attribute axis is the string "1"; Softmax takes int`},
		{"duplicate attribute", 13, []*onnx.Node{{OpType: "Softmax", Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: []*onnx.Attribute{
			{Name: "axis", Type: onnx.AttrInt, I: 0}, {Name: "axis", Type: onnx.AttrInt, I: 1}}}}, "attribute axis appears twice"},
		{"unknown attribute", 13, []*onnx.Node{relu("x", "y", &onnx.Attribute{Name: "alpha", Type: onnx.AttrFloat, F: 0.1})},
			"attribute alpha: ONNX's Relu has no attributes"},
		{"misspelt attribute", 13, []*onnx.Node{axis(&onnx.Attribute{Name: "axes", Type: onnx.AttrInt, I: 0})},
			"attribute axes is not one of ONNX's Softmax (axis)"},
		{"opset 99", 99, []*onnx.Node{relu("x", "y")}, "opset 99 is newer than vkc knows (it imports opsets 13 to 25)"},
	} {
		g := &onnx.Graph{Inputs: []*onnx.ValueInfo{x}, Outputs: []*onnx.ValueInfo{{Name: "y"}}, Nodes: c.nodes}
		_, err := importer.ImportONNX(writeModel(t, c.opset, g), importer.ONNXOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
