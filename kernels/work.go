package kernels

import "github.com/vkc-project/vkc/ir"

// WorkModel is a problem's arithmetic and memory traffic (see Launch.Flops and Launch.Bytes) as an
// affine function of a count n that only a run knows, for MinN ≤ n ≤ MaxN:
//
//	Flops(n) = Flops + n·FlopsPerN,  Bytes(n) = Bytes + n·BytesPerN
//
// CountArg is the operand holding n (attention's kv_len, Args[3]), or -1 when the work is fixed
// (FlopsPerN and BytesPerN are then 0). vkc bench reads it, through the plan, to give achieved
// FLOP/s and bandwidth for what a run really computed.
type WorkModel struct {
	Flops, Bytes         float64
	CountArg             int
	MinN, MaxN           int
	FlopsPerN, BytesPerN float64
}

// Work is the work of problem p as launch l realises it: the launch's figures, except for
// attention, whose useful work follows the keys its queries see. The launch's figure counts every
// key of the cache for every query; a run sees kv_len keys, and with a causal mask query i only
// kv_len − sq + i + 1 of them: n·sq − sq·(sq−1)/2 query-key pairs for n = kv_len, each 2·(d + dv)
// FLOPs per query head (scores and values; the softmax's exp and sums are not counted, as in the
// launch's figure). Its bytes read the first n rows of the keys and values. A windowed attention
// sees at most window keys per query; that is not affine in n, so its work is the bound at the
// cache's capacity, fixed.
func Work(p *Problem, l *Launch) WorkModel {
	w := WorkModel{Flops: l.Flops, Bytes: l.Bytes, CountArg: -1}
	if p.Op != ir.Attention {
		return w
	}
	a, err := readAttn(p)
	if err != nil {
		return w
	}
	perPair := 2 * float64(a.hq) * float64(a.d+a.dv)
	epi := float64(a.hq * a.sq * a.dv * epilogueFlops(p))
	perKey := (float64(p.Args[1].Bytes()) + float64(p.Args[2].Bytes())) / float64(a.skv)
	keysFixed := problemBytes(p) - float64(a.skv)*perKey
	sq := float64(a.sq)
	switch {
	case a.window > 0 && a.window < a.skv:
		return WorkModel{Flops: perPair*sq*float64(a.window) + epi, Bytes: problemBytes(p), CountArg: -1}
	case a.causal:
		w = WorkModel{Flops: epi - perPair*sq*(sq-1)/2, FlopsPerN: perPair * sq, MinN: a.sq}
	default:
		w = WorkModel{Flops: epi, FlopsPerN: perPair * sq, MinN: 1}
	}
	w.Bytes, w.BytesPerN, w.MaxN = keysFixed, perKey, a.skv
	if !a.kvLen {
		// kv_len is the whole cache, known at compile time.
		n := float64(a.skv)
		return WorkModel{Flops: w.Flops + n*w.FlopsPerN, Bytes: w.Bytes + n*w.BytesPerN, CountArg: -1}
	}
	w.CountArg = 3
	return w
}
