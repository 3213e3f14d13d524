package ir

import "fmt"

// The vision ops: conv2d, max_pool2d, avg_pool2d, global_avg_pool and batch_norm. Activations are
// rank 4, [n, c, h, w] with layout=nchw (the default, PyTorch's and ONNX's) or [n, h, w, c] with
// layout=nhwc; weights are always [cout, cin/groups, kh, kw] (OIHW), whatever the activation
// layout, so a layout change (a rewrite rule) never touches the weights.
//
// Window attributes follow ONNX: strides [sh, sw], dilations [dh, dw], pads [top, left, bottom,
// right] (ONNX's [x1_begin, x2_begin, x1_end, x2_end]); asymmetric pads express auto_pad
// SAME_UPPER and SAME_LOWER, which an importer resolves to explicit pads.

// Window2d is the geometry of a 2-D window op (convolution or pooling) over one input: what
// inference computes from the attributes and the input's shape. Kernels and the interpreter
// read their loop bounds from it.
type Window2d struct {
	N, C, H, W     int // input batch, channels, height, width
	KH, KW         int // kernel
	SH, SW         int // strides
	DH, DW         int // dilations
	PT, PL, PB, PR int // pads: top, left, bottom, right
	OH, OW         int // output height and width
	NHWC           bool
	CeilMode       bool // pooling: the output size rounds up (see PoolOutSize)
}

// Index is the element index of (n, c, y, x) in a tensor of this layout with c channels and
// spatial size h × w.
func (g *Window2d) Index(n, c, y, x, channels, h, w int) int {
	if g.NHWC {
		return ((n*h+y)*w+x)*channels + c
	}
	return ((n*channels+c)*h+y)*w + x
}

// Layout axes of a rank-4 activation.
func layoutAxes(layout string) (c, h, w int, err error) {
	switch layout {
	case "nchw":
		return 1, 2, 3, nil
	case "nhwc":
		return 3, 1, 2, nil
	}
	return 0, 0, 0, fmt.Errorf("layout must be nchw or nhwc, got %q", layout)
}

// ActivationShape is the shape of an activation with the given sizes in layout ("nchw" or
// "nhwc").
func ActivationShape(layout string, n, c, h, w int) Shape {
	if layout == "nhwc" {
		return Shape{n, h, w, c}
	}
	return Shape{n, c, h, w}
}

func pairAttr(a Attrs, name string, def int) ([2]int, error) {
	v := a.Ints(name)
	if v == nil {
		return [2]int{def, def}, nil
	}
	if len(v) != 2 {
		return [2]int{}, fmt.Errorf("%s must have 2 entries (height, width), got %v", name, v)
	}
	return [2]int{v[0], v[1]}, nil
}

// window reads the common window attributes of x (rank 4) with kernel (kh, kw).
func window(a Attrs, x Type, kh, kw int) (*Window2d, error) {
	if x.Shape.Rank() != 4 {
		return nil, fmt.Errorf("x must have rank 4 ([n, c, h, w] or [n, h, w, c]), got %s", x)
	}
	layout := a.String("layout", "nchw")
	ca, ha, wa, err := layoutAxes(layout)
	if err != nil {
		return nil, err
	}
	g := &Window2d{N: x.Shape[0], C: x.Shape[ca], H: x.Shape[ha], W: x.Shape[wa], KH: kh, KW: kw, NHWC: layout == "nhwc"}
	st, err := pairAttr(a, "strides", 1)
	if err != nil {
		return nil, err
	}
	dl, err := pairAttr(a, "dilations", 1)
	if err != nil {
		return nil, err
	}
	g.SH, g.SW, g.DH, g.DW = st[0], st[1], dl[0], dl[1]
	if g.SH <= 0 || g.SW <= 0 || g.DH <= 0 || g.DW <= 0 {
		return nil, fmt.Errorf("strides %v and dilations %v must be positive", st, dl)
	}
	if p := a.Ints("pads"); p != nil {
		if len(p) != 4 {
			return nil, fmt.Errorf("pads must have 4 entries (top, left, bottom, right), got %v", p)
		}
		g.PT, g.PL, g.PB, g.PR = p[0], p[1], p[2], p[3]
		if g.PT < 0 || g.PL < 0 || g.PB < 0 || g.PR < 0 {
			return nil, fmt.Errorf("pads %v must be ≥ 0", p)
		}
	}
	if kh <= 0 || kw <= 0 {
		return nil, fmt.Errorf("kernel %dx%d must be positive", kh, kw)
	}
	return g, nil
}

// PoolOutSize is the output length of a window of k taps dilated by d and moved by stride s over
// n elements padded by pb before and pe after. Rounding down (ceil=false) keeps only windows that
// end inside the padded input; rounding up adds a last partial window, except one that would start
// past the input and its leading pad (PyTorch's rule, which ONNX's reference follows since 1.22:
// test_averagepool_2d_ceil_last_window_starts_on_pad). It returns 0 when no window fits.
func PoolOutSize(n, k, s, d, pb, pe int, ceil bool) int {
	span := n + pb + pe - d*(k-1) - 1
	if span < 0 {
		return 0
	}
	if !ceil {
		return span/s + 1
	}
	o := (span+s-1)/s + 1
	if (o-1)*s >= n+pb {
		o--
	}
	return o
}

func conv2dInfer(a Attrs, args []Type) ([]Type, error) {
	g, err := Conv2dWindow(a, args[0], args[1])
	if err != nil {
		return nil, err
	}
	cout := args[1].Shape[0]
	if len(args) == 3 {
		if b := args[2]; b.Shape.Rank() != 1 || b.Shape[0] != cout || !b.DType.IsFloat() {
			return nil, fmt.Errorf("bias must be a float [%d], got %s", cout, b)
		}
	}
	return one(Type{args[0].DType, ActivationShape(a.String("layout", "nchw"), g.N, cout, g.OH, g.OW)}), nil
}

// Conv2dWindow returns the geometry of conv2d(x, w) with attributes a: C is the input's
// channels; the output has w's first dimension as its channels.
func Conv2dWindow(a Attrs, x, w Type) (*Window2d, error) {
	if w.Shape.Rank() != 4 {
		return nil, fmt.Errorf("w must be [cout, cin/groups, kh, kw], got %s", w)
	}
	g, err := window(a, x, w.Shape[2], w.Shape[3])
	if err != nil {
		return nil, err
	}
	if !x.DType.IsFloat() || x.DType != w.DType {
		return nil, fmt.Errorf("x and w must share a float dtype, got %s and %s", x, w)
	}
	groups := a.Int("groups", 1)
	cout, cpg := w.Shape[0], w.Shape[1]
	if groups <= 0 || g.C%groups != 0 || cout%groups != 0 || cpg != g.C/groups {
		return nil, fmt.Errorf("w %s does not fit %d input channels in %d groups", w, g.C, groups)
	}
	g.OH = PoolOutSize(g.H, g.KH, g.SH, g.DH, g.PT, g.PB, false)
	g.OW = PoolOutSize(g.W, g.KW, g.SW, g.DW, g.PL, g.PR, false)
	if g.OH <= 0 || g.OW <= 0 {
		return nil, fmt.Errorf("input %dx%d (padded by %d,%d,%d,%d) is smaller than the dilated kernel %dx%d",
			g.H, g.W, g.PT, g.PL, g.PB, g.PR, g.DH*(g.KH-1)+1, g.DW*(g.KW-1)+1)
	}
	return g, nil
}

func poolInfer(a Attrs, args []Type) ([]Type, error) {
	g, err := PoolWindow(a, args[0])
	if err != nil {
		return nil, err
	}
	return one(Type{args[0].DType, ActivationShape(a.String("layout", "nchw"), g.N, g.C, g.OH, g.OW)}), nil
}

// PoolWindow returns the geometry of a max_pool2d or avg_pool2d over x.
func PoolWindow(a Attrs, x Type) (*Window2d, error) {
	k := a.Ints("kernel")
	if len(k) != 2 {
		return nil, fmt.Errorf("kernel must have 2 entries (height, width), got %v", k)
	}
	g, err := window(a, x, k[0], k[1])
	if err != nil {
		return nil, err
	}
	if !x.DType.IsFloat() {
		return nil, fmt.Errorf("x must be float, got %s", x)
	}
	g.CeilMode = a.Bool("ceil_mode", false)
	// A pad as wide as the dilated kernel would give windows that see only padding.
	eh, ew := g.DH*(g.KH-1)+1, g.DW*(g.KW-1)+1
	if g.PT >= eh || g.PB >= eh || g.PL >= ew || g.PR >= ew {
		return nil, fmt.Errorf("pads [%d,%d,%d,%d] must be smaller than the dilated kernel %dx%d", g.PT, g.PL, g.PB, g.PR, eh, ew)
	}
	g.OH = PoolOutSize(g.H, g.KH, g.SH, g.DH, g.PT, g.PB, g.CeilMode)
	g.OW = PoolOutSize(g.W, g.KW, g.SW, g.DW, g.PL, g.PR, g.CeilMode)
	if g.OH <= 0 || g.OW <= 0 {
		return nil, fmt.Errorf("input %dx%d (padded by %d,%d,%d,%d) is smaller than the dilated kernel %dx%d",
			g.H, g.W, g.PT, g.PL, g.PB, g.PR, eh, ew)
	}
	return g, nil
}

// GlobalPoolWindow returns the geometry of global_avg_pool over x: one window of the whole
// height and width.
func GlobalPoolWindow(a Attrs, x Type) (*Window2d, error) {
	if x.Shape.Rank() != 4 {
		return nil, fmt.Errorf("x must have rank 4 ([n, c, h, w] or [n, h, w, c]), got %s", x)
	}
	ca, ha, wa, err := layoutAxes(a.String("layout", "nchw"))
	if err != nil {
		return nil, err
	}
	s := x.Shape
	return &Window2d{N: s[0], C: s[ca], H: s[ha], W: s[wa], KH: s[ha], KW: s[wa], SH: 1, SW: 1, DH: 1, DW: 1,
		OH: 1, OW: 1, NHWC: a.String("layout", "nchw") == "nhwc"}, nil
}

// BatchNormChannelAxis is the channel axis of batch_norm's x: 1 for nchw (any rank ≥ 2, as ONNX's
// [n, c, d1, …]), the last for nhwc.
func BatchNormChannelAxis(a Attrs, x Type) int {
	if a.String("layout", "nchw") == "nhwc" {
		return x.Shape.Rank() - 1
	}
	return 1
}

func init() {
	layout := AttrSpec{Name: "layout", Kind: AttrString, Default: "nchw"}
	win := []AttrSpec{{Name: "strides", Kind: AttrInts, Default: []int{1, 1}}, {Name: "pads", Kind: AttrInts, Default: []int{0, 0, 0, 0}},
		{Name: "dilations", Kind: AttrInts, Default: []int{1, 1}}}
	def(Conv2d, OpInfo{Name: "conv2d", Kind: KindOther, MinArgs: 2, MaxArgs: 3,
		Attrs: append(append([]AttrSpec(nil), win...), AttrSpec{Name: "groups", Kind: AttrInt, Default: 1}, layout),
		infer: conv2dInfer})
	pool := append([]AttrSpec{{Name: "kernel", Kind: AttrInts, Required: true}}, win...)
	pool = append(pool, AttrSpec{Name: "ceil_mode", Kind: AttrBool, Default: false}, layout)
	def(MaxPool2d, OpInfo{Name: "max_pool2d", Kind: KindOther, MinArgs: 1, MaxArgs: 1, Attrs: pool, infer: poolInfer})
	avg := append(append([]AttrSpec(nil), pool...), AttrSpec{Name: "count_include_pad", Kind: AttrBool, Default: false})
	def(AvgPool2d, OpInfo{Name: "avg_pool2d", Kind: KindOther, MinArgs: 1, MaxArgs: 1, Attrs: avg, infer: poolInfer})
	def(GlobalAvgPool, OpInfo{Name: "global_avg_pool", Kind: KindOther, MinArgs: 1, MaxArgs: 1, Attrs: []AttrSpec{layout},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			g, err := GlobalPoolWindow(a, args[0])
			if err != nil {
				return nil, err
			}
			if !args[0].DType.IsFloat() {
				return nil, fmt.Errorf("x must be float, got %s", args[0])
			}
			return one(Type{args[0].DType, ActivationShape(a.String("layout", "nchw"), g.N, g.C, 1, 1)}), nil
		}})
	def(BatchNorm, OpInfo{Name: "batch_norm", Kind: KindOther, MinArgs: 5, MaxArgs: 5, Composite: true,
		Attrs: []AttrSpec{{Name: "eps", Kind: AttrFloat, Default: 1e-5}, layout},
		infer: func(a Attrs, args []Type) ([]Type, error) {
			x := args[0]
			if _, _, _, err := layoutAxes(a.String("layout", "nchw")); err != nil {
				return nil, err
			}
			if !x.DType.IsFloat() || x.Shape.Rank() < 2 {
				return nil, fmt.Errorf("x must be a float tensor of rank ≥ 2, got %s", x)
			}
			c := x.Shape[BatchNormChannelAxis(a, x)]
			for i, name := range []string{"scale", "bias", "mean", "var"} {
				p := args[i+1]
				if p.Shape.Rank() != 1 || p.Shape[0] != c || !p.DType.IsFloat() {
					return nil, fmt.Errorf("%s must be a float [%d] (one per channel of %s), got %s", name, c, x, p)
				}
			}
			return one(x), nil
		}})
}
