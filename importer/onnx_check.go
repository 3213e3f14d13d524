package importer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vkc-project/vkc/ir/onnx"
)

// Checks of an ONNX node that hold for every op: its attributes (each once, of the type the op
// reads, and only those ONNX defines for the op) and its outputs (each written once in the graph,
// never over a graph input or an initializer). A model that breaks them is an error naming the
// node, not a graph that computes something else.

// MaxOpset is the newest default-domain opset vkc knows (ONNX 1.22): a newer one may have
// changed what an op means.
const MaxOpset = 25

// attr returns n's attribute name (nil when absent); an attribute of another type than want (axis
// given as a string, say) is the node's error, reported when its translation ends (the helpers
// that call attr return plain values).
func (im *importer) attr(n *onnx.Node, name string, want onnx.AttrType) *onnx.Attribute {
	a := n.Attr(name)
	if a == nil {
		return nil
	}
	// An attribute without a type (written before AttributeProto had one) is taken as the op
	// wants it.
	if a.Type != want && a.Type != onnx.AttrUndefined {
		if im.attrErr == nil {
			im.attrErr = fmt.Errorf("attribute %s is %s; %s takes %s", name, describeAttr(a), n.OpType, want)
		}
		return nil
	}
	return a
}

// describeAttr names an attribute's type and value for a message.
func describeAttr(a *onnx.Attribute) string {
	switch a.Type {
	case onnx.AttrString:
		return fmt.Sprintf("the string %q", a.S)
	case onnx.AttrInt:
		return fmt.Sprintf("the int %d", a.I)
	case onnx.AttrFloat:
		return fmt.Sprintf("the float %v", a.F)
	case onnx.AttrInts:
		return fmt.Sprintf("the ints %v", a.Ints)
	}
	return "of type " + a.Type.String()
}

// onnxAttrs are the attributes ONNX defines for each op vkc imports (opsets 13 to 25, the older
// spellings of those opsets included): an attribute that is not the op's is an error, not ignored.
var onnxAttrs = map[string][]string{
	"ArgMax":             {"axis", "keepdims", "select_last_index"},
	"AveragePool":        {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"},
	"BatchNormalization": {"epsilon", "momentum", "training_mode"},
	"Cast":               {"to", "saturate", "round_mode"},
	"Concat":             {"axis"},
	"Constant":           {"value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings", "sparse_value"},
	"ConstantOfShape":    {"value"},
	"Conv":               {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"},
	"Flatten":            {"axis"},
	"Gather":             {"axis"},
	"Gelu":               {"approximate"},
	"Gemm":               {"alpha", "beta", "transA", "transB"},
	"HardSigmoid":        {"alpha", "beta"},
	"LayerNormalization": {"axis", "epsilon", "stash_type"},
	"LeakyRelu":          {"alpha"},
	"MaxPool":            {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"},
	"RMSNormalization":   {"axis", "epsilon", "stash_type"},
	"ReduceMax":          {"axes", "keepdims", "noop_with_empty_axes"},
	"ReduceMean":         {"axes", "keepdims", "noop_with_empty_axes"},
	"ReduceMin":          {"axes", "keepdims", "noop_with_empty_axes"},
	"ReduceSum":          {"axes", "keepdims", "noop_with_empty_axes"},
	"Reshape":            {"allowzero"},
	"Shape":              {"start", "end"},
	"Softmax":            {"axis"},
	"Split":              {"axis", "num_outputs", "split"},
	"Squeeze":            {"axes"},
	"Transpose":          {"perm"},
	"Unsqueeze":          {"axes"},
	// The others (elementwise ops, MatMul, Where, Expand, Slice, Clip, Identity, …) have none.
}

// checkNodeBefore checks n's attributes and outputs before it is translated.
func (im *importer) checkNodeBefore(n *onnx.Node) error {
	seen := map[string]bool{}
	known := onnxAttrs[n.OpType]
	for _, a := range n.Attrs {
		if seen[a.Name] {
			return fmt.Errorf("attribute %s appears twice", a.Name)
		}
		seen[a.Name] = true
		if !slices.Contains(known, a.Name) {
			if len(known) == 0 {
				return fmt.Errorf("attribute %s: ONNX's %s has no attributes", a.Name, n.OpType)
			}
			return fmt.Errorf("attribute %s is not one of ONNX's %s (%s)", a.Name, n.OpType, strings.Join(known, ", "))
		}
	}
	outs := map[string]bool{}
	for i, o := range n.Outputs {
		if o == "" {
			continue
		}
		if outs[o] {
			return fmt.Errorf("output %d: %q is written twice by the node", i, o)
		}
		outs[o] = true
		if _, ok := im.vals[o]; ok {
			what := "an earlier node's output"
			switch {
			case im.graphInputs[o]:
				what = "a graph input"
			case im.initializers[o]:
				what = "an initializer"
			}
			return fmt.Errorf("output %d: %q is %s: each value is written once (SSA)", i, o, what)
		}
	}
	im.attrErr = nil
	return nil
}

// checkNodeAfter reports an attribute of the wrong type that the translation read.
func (im *importer) checkNodeAfter(*onnx.Node) error {
	err := im.attrErr
	im.attrErr = nil
	return err
}
