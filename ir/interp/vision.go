package interp

import (
	"math"

	"github.com/vkc-project/vkc/ir"
)

func init() {
	impls[ir.Conv2d] = evalConv2d
	impls[ir.MaxPool2d] = evalPool
	impls[ir.AvgPool2d] = evalPool
	impls[ir.GlobalAvgPool] = evalGlobalAvgPool
	impls[ir.BatchNorm] = evalBatchNorm
}

// evalConv2d: out[b, o, y, x] = bias[o] + Σ_{c, i, j} w[o, c, i, j] · in[b, g·cpg + c, y·sh + i·dh − pt, x·sw + j·dw − pl]
// with g = o / (cout/groups), cpg = cin/groups and the input zero outside its h × w; the same
// sum for layout nhwc, only the element order of in and out differs.
func evalConv2d(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, w, t := a[0], a[1], n.Type()
	g, err := ir.Conv2dWindow(n.Attrs, x.t, w.t)
	if err != nil {
		return nil, err
	}
	cout, cpg := w.t.Shape[0], w.t.Shape[1]
	opg := cout / n.Attrs.Int("groups", 1)
	d := make([]float64, t.Shape.NumElements())
	parallelFor(g.N*cout, len(d)*cpg*g.KH*g.KW, func(lo, hi int) {
		for bo := lo; bo < hi; bo++ {
			b, o := bo/cout, bo%cout
			grp := o / opg
			for oy := 0; oy < g.OH; oy++ {
				for ox := 0; ox < g.OW; ox++ {
					s := 0.0
					if len(a) == 3 {
						s = a[2].d[o]
					}
					for ci := 0; ci < cpg; ci++ {
						ch := grp*cpg + ci
						for i := 0; i < g.KH; i++ {
							iy := oy*g.SH + i*g.DH - g.PT
							if iy < 0 || iy >= g.H {
								continue
							}
							for j := 0; j < g.KW; j++ {
								ix := ox*g.SW + j*g.DW - g.PL
								if ix < 0 || ix >= g.W {
									continue
								}
								s += w.d[((o*cpg+ci)*g.KH+i)*g.KW+j] * x.d[g.Index(b, ch, iy, ix, g.C, g.H, g.W)]
							}
						}
					}
					d[g.Index(b, o, oy, ox, cout, g.OH, g.OW)] = s
				}
			}
		}
	})
	return newVal(t, d), nil
}

// evalPool: max_pool2d takes the largest tap inside the input (padding never wins; a NaN tap
// makes the result NaN, as reductions do); avg_pool2d divides the sum of the taps inside the
// input by their number, or with count_include_pad by the number of taps inside the padded
// input (pads included, but not the part of a ceil_mode window past the trailing pad). A window
// with no tap inside the input (possible only with dilation) gives −Inf (max) or NaN (average).
func evalPool(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, t := a[0], n.Type()
	g, err := ir.PoolWindow(n.Attrs, x.t)
	if err != nil {
		return nil, err
	}
	isMax := n.Op == ir.MaxPool2d
	incl := n.Attrs.Bool("count_include_pad", false)
	d := make([]float64, t.Shape.NumElements())
	for b := 0; b < g.N; b++ {
		for ch := 0; ch < g.C; ch++ {
			for oy := 0; oy < g.OH; oy++ {
				for ox := 0; ox < g.OW; ox++ {
					acc, cnt, padded := 0.0, 0, 0
					if isMax {
						acc = math.Inf(-1)
					}
					for i := 0; i < g.KH; i++ {
						iy := oy*g.SH + i*g.DH - g.PT
						for j := 0; j < g.KW; j++ {
							ix := ox*g.SW + j*g.DW - g.PL
							if iy >= -g.PT && iy < g.H+g.PB && ix >= -g.PL && ix < g.W+g.PR {
								padded++
							}
							if iy < 0 || iy >= g.H || ix < 0 || ix >= g.W {
								continue
							}
							v := x.d[g.Index(b, ch, iy, ix, g.C, g.H, g.W)]
							cnt++
							if isMax {
								if v > acc || math.IsNaN(v) && !math.IsNaN(acc) {
									acc = v
								}
							} else {
								acc += v
							}
						}
					}
					if !isMax {
						div := cnt
						if incl {
							div = padded
						}
						acc /= float64(div)
					}
					d[g.Index(b, ch, oy, ox, g.C, g.OH, g.OW)] = acc
				}
			}
		}
	}
	return newVal(t, d), nil
}

// evalGlobalAvgPool: the mean of each (batch, channel) plane.
func evalGlobalAvgPool(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, t := a[0], n.Type()
	g, err := ir.GlobalPoolWindow(n.Attrs, x.t)
	if err != nil {
		return nil, err
	}
	d := make([]float64, t.Shape.NumElements())
	for b := 0; b < g.N; b++ {
		for ch := 0; ch < g.C; ch++ {
			s := 0.0
			for y := 0; y < g.H; y++ {
				for xx := 0; xx < g.W; xx++ {
					s += x.d[g.Index(b, ch, y, xx, g.C, g.H, g.W)]
				}
			}
			d[g.Index(b, ch, 0, 0, g.C, 1, 1)] = s / float64(g.H*g.W)
		}
	}
	return newVal(t, d), nil
}

// evalBatchNorm: (x − mean[c]) / √(var[c] + eps) · scale[c] + bias[c] with c the element's
// channel (axis 1 for nchw, the last axis for nhwc).
func evalBatchNorm(c *ctx, n *ir.Node, a []*val) (*val, error) {
	x, t := a[0], n.Type()
	ax := ir.BatchNormChannelAxis(n.Attrs, x.t)
	_, ch, inner := split(x.t.Shape, ax)
	eps := n.Attrs.Float("eps", 1e-5)
	d := make([]float64, len(x.d))
	for i, v := range x.d {
		k := (i / inner) % ch
		d[i] = (v-a[3].d[k])/math.Sqrt(a[4].d[k]+eps)*a[1].d[k] + a[2].d[k]
	}
	return newVal(t, d), nil
}
