package importer

import (
	"sort"

	"github.com/vkc-project/vkc/ir/onnx"
)

// onnxOps translates each supported ONNX op (default domain, opset 13 and later) onto vkc's
// ops. Each translation reads the node's inputs with im.in (tensors) or im.ints (constant
// shape and axes operands) and binds its outputs with im.set (onnx_helpers.go). The ops live by
// family, as kernels/ and ir/ are split: onnx_elementwise.go, onnx_reduce.go, onnx_norm.go,
// onnx_matmul.go, onnx_shape.go, onnx_conv.go and onnx_const.go (with the folds); the checks
// every node passes are in onnx_check.go.
var onnxOps map[string]func(im *importer, n *onnx.Node) error

// onnxFolds evaluate ops whose inputs are all constants at import time, so that the shapes and
// axes they compute can feed Reshape, Slice and the like; a fold returns false when it leaves
// the node to its translation.
var onnxFolds map[string]func(im *importer, n *onnx.Node) (bool, error)

// SupportedONNXOps lists the op types ImportONNX translates, sorted.
func SupportedONNXOps() []string {
	var s []string
	for k := range onnxOps {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

func init() {
	onnxOps = map[string]func(im *importer, n *onnx.Node) error{}
	registerElementwiseOps()
	registerReduceOps()
	registerNormOps()
	registerMatmulOps()
	registerShapeOps()
	registerConvOps()
	registerConstOps()

	onnxFolds = map[string]func(im *importer, n *onnx.Node) (bool, error){
		"ConstantOfShape": foldConstantOfShape,
		"Identity": func(im *importer, n *onnx.Node) (bool, error) {
			return false, nil
		},
		"Cast":      foldIntCast,
		"Unsqueeze": foldIntReshape,
		"Squeeze":   foldIntReshape,
		"Concat":    foldIntConcat,
		"Gather":    foldIntGather,
		"Add":       foldIntArith,
		"Sub":       foldIntArith,
		"Mul":       foldIntArith,
		"Div":       foldIntArith,
	}
}
