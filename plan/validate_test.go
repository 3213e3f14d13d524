package plan

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestValidateAcceptsFixtures(t *testing.T) {
	for name, p := range map[string]*Plan{"empty": {}, "small": smallPlan(), "external": externalPlan(make([]byte, 200)), "large": largePlan()} {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(p *Plan)
		want   string
	}{
		{"module index", func(p *Plan) { p.Functions[0].Dispatches[0].Module = 7 },
			`function "decode": dispatch 0: module 7 does not exist (the plan has 2)`},
		{"binding past region", func(p *Plan) { p.Functions[0].Dispatches[0].Bindings[0].Buffer.Offset = 40 },
			"binding 0: weights bytes 40..40+64 lie outside the 96-byte region"},
		{"binding offset overflow", func(p *Plan) { p.Functions[0].Dispatches[0].Bindings[0].Buffer.Offset = 1<<64 - 8 },
			"lie outside the 96-byte region"},
		{"empty range", func(p *Plan) { p.Functions[0].Dispatches[0].Bindings[0].Buffer.Range = 0 }, "binding 0: empty range"},
		{"undeclared binding", func(p *Plan) { p.Functions[0].Dispatches[0].Bindings[0].Binding = 5 },
			"binding 5: the module declares no such binding"},
		{"unbound binding", func(p *Plan) {
			d := &p.Functions[0].Dispatches[0]
			d.Bindings = d.Bindings[:2]
		}, "bindings [2] are declared by the module but not bound"},
		{"bound twice", func(p *Plan) { p.Functions[0].Dispatches[0].Bindings[1].Binding = 0 }, "binding 0: bound twice"},
		{"input index", func(p *Plan) { p.Functions[0].Dispatches[0].Bindings[1].Buffer.Region.Index = 5 },
			"input 5 does not exist (the function has 2)"},
		{"arena input as staging region", func(p *Plan) {
			p.Functions[0].Dispatches[0].Bindings[2].Buffer = BufferRef{Region{RegionOutput, 0}, 0, 16}
		}, "output 0 (y) is in the arena, not a staging slot"},
		{"unknown region", func(p *Plan) { p.Functions[0].Dispatches[0].Bindings[0].Buffer.Region.Kind = 9 },
			"unknown region kind 9"},
		{"write to weights", func(p *Plan) {
			p.Functions[0].Dispatches[0].Bindings[2].Buffer = BufferRef{Region{RegionWeights, 0}, 64, 16}
		}, "writes the read-only weight region"},
		{"push size", func(p *Plan) { p.Functions[0].Dispatches[0].Push = []byte{1, 2, 3, 4} },
			"4 push-constant bytes, the module takes 8"},
		{"scalar slot past push", func(p *Plan) { p.Functions[0].Dispatches[0].Scalars[0].Offset = 8 },
			"scalar slot at byte 8 is not an aligned word of the 8 push-constant bytes"},
		{"scalar slot unaligned", func(p *Plan) { p.Functions[0].Dispatches[0].Scalars[0].Offset = 2 }, "not an aligned word"},
		{"scalar slot twice", func(p *Plan) {
			d := &p.Functions[0].Dispatches[0]
			d.Scalars = append(d.Scalars, d.Scalars[0])
		}, "two scalar slots at byte 4"},
		{"scalar of a tensor", func(p *Plan) { p.Functions[0].Dispatches[0].Scalars[0].Input = 0 },
			`reads input "x", which is f32[4], not an i32 or u32 scalar`},
		{"scalar input index", func(p *Plan) { p.Functions[0].Dispatches[0].Scalars[0].Input = 3 },
			"reads input 3, but the function has 2"},
		{"zero grid", func(p *Plan) { p.Functions[0].Dispatches[1].Grid[2] = 0 }, "grid [1 1 0] has a zero dimension"},
		{"length bounds", func(p *Plan) { p.Functions[2].Length.Min = 5 }, "run-time length seq has bounds 5..4"},
		{"bounded without length", func(p *Plan) { p.Functions[0].Inputs[0].Bounded = true }, "bounded, but the function has no run-time length"},
		{"bounded not a multiple", func(p *Plan) { p.Functions[2].Length.Max = 3 }, "is not a multiple of the capacity 3"},
		{"length region without length", func(p *Plan) {
			p.Functions[0].Dispatches[0].Bindings[1].Buffer = BufferRef{Region{RegionLength, 0}, 0, 4}
		}, "the length region, but the function has no run-time length"},
		{"length region range", func(p *Plan) { p.Functions[2].Dispatches[0].Bindings[1].Buffer.Range = 8 },
			"length bytes 0..0+8 lie outside the 4-byte region"},
		{"write to length", func(p *Plan) {
			d := &p.Functions[2].Dispatches[0]
			d.Bindings[1].Buffer, d.Bindings[2].Buffer = d.Bindings[2].Buffer, d.Bindings[1].Buffer
		}, "writes the read-only length region"},
		{"scale without length", func(p *Plan) { p.Functions[0].Dispatches[0].Scale = &GridScale{Num: 1, Den: 1} },
			"a grid scale, but the function has no run-time length"},
		{"scale axis", func(p *Plan) { p.Functions[2].Dispatches[0].Scale.Axis = 4 }, "grid scale axis 4"},
		{"plus length without length", func(p *Plan) { p.Functions[0].Ranges[0].PlusLength = true },
			"adds the run-time length, but the function has none"},
		{"split not increasing", func(p *Plan) { p.Arena.Split = Split{32, 32} }, "arena: buffer 2 begins at byte 32, not after the one before it (32)"},
		{"split outside", func(p *Plan) { p.StateSplit = Split{128} }, "state region: buffer 1 begins at byte 128, not inside the 128-byte region"},
		{"split unaligned", func(p *Plan) { p.Arena.Split = Split{40} }, "arena: buffer 1 begins at byte 40, not a multiple of the plan's alignment 16"},
		{"binding across buffers", func(p *Plan) { p.Weights.Split = Split{32} },
			"binding 0: weights bytes 0..0+64 cross from one of the region's buffers into the next"},
		{"weight across buffers", func(p *Plan) { p.Weights.Split = Split{80} }, "weight 1 (b): bytes 64..64+32 cross from one weight buffer into the next"},
		{"state across buffers", func(p *Plan) { p.StateSplit = Split{64} }, "state 0 (k_cache.0): bytes 0..0+128 cross from one state buffer into the next"},
		{"arena value across buffers", func(p *Plan) { p.Arena.Split = Split{32}; p.Functions[0].Outputs[0].Shape = []int64{8} },
			"output 0 (y): arena bytes 16..16+32 cross from one arena buffer into the next"},
		{"variant name", func(p *Plan) { p.Functions[2].Variants[0].Name = "other" }, `variant 0 is named "other"`},
		{"variant range", func(p *Plan) { p.Functions[2].Variants[0].Length.Max = 4 }, "lengths 1..4, want a range within 1..4 below its maximum"},
		{"variant overlap", func(p *Plan) {
			f := &p.Functions[2]
			f.Variants = append(f.Variants, f.Variants[0])
		}, "lengths 1..1 overlap variant 0's 1..1"},
		{"variant shape", func(p *Plan) { p.Functions[2].Variants[0].Inputs[0].Shape = []int64{2} }, "input 0 is x f32[2] (bounded true)"},
		{"variant without length", func(p *Plan) { p.Functions[0].Variants = []Function{{Name: "decode"}} }, "1 variants, but no run-time length"},
		{"variant dispatch", func(p *Plan) { p.Functions[2].Variants[0].Dispatches[0].Module = 9 }, "module 9 does not exist"},
		{"scale ratio", func(p *Plan) { p.Functions[2].Dispatches[0].Scale.Den = 0 }, "a positive ratio"},
		{"missing barrier", func(p *Plan) { p.Functions[0].Dispatches[1].BarrierBefore = false },
			"dispatch 0 (binding 2) and dispatch 1 (binding 0) use overlapping arena bytes 16..32 and 16..32 in one barrier interval, and dispatch 0 writes; a barrier is missing"},
		{"duplicate function", func(p *Plan) { p.Functions[1].Name = "decode" }, `duplicate name "decode"`},
		{"empty function name", func(p *Plan) { p.Functions[1].Name = "" }, "function 1: empty name"},
		{"duplicate input", func(p *Plan) { p.Functions[0].Inputs[1].Name = "x" }, `input 1 (x): duplicate name "x"`},
		{"input dtype", func(p *Plan) { p.Functions[0].Inputs[0].DType = 0 }, "input 0 (x): unknown dtype 0"},
		{"negative dim", func(p *Plan) { p.Functions[0].Inputs[0].Shape = []int64{-4} }, "dimension 0 is negative"},
		{"placement", func(p *Plan) { p.Functions[0].Outputs[0].Place = 0 }, "unknown placement 0"},
		{"arena output outside", func(p *Plan) { p.Functions[0].Outputs[0].Offset = 56 },
			"output 0 (y): arena bytes 56..56+16 lie outside the 64-byte arena"},
		{"arena inputs overlap", func(p *Plan) {
			p.Functions[0].Inputs[0] = Value{Name: "x", DType: F32, Shape: []int64{4}, Place: InArena, Offset: 0}
			p.Functions[0].Inputs = append(p.Functions[0].Inputs, Value{Name: "z", DType: F32, Shape: []int64{2}, Place: InArena, Offset: 8})
			p.Functions[0].Dispatches[0].Bindings[1].Buffer = BufferRef{Region{RegionArena, 0}, 0, 16}
		}, `function "decode": inputs 0 (x) and 2 (z) overlap in the arena`},
		{"staging with offset", func(p *Plan) { p.Functions[0].Inputs[0].Offset = 8 }, "offset 8 but it is in a staging slot"},
		{"weight outside", func(p *Plan) { p.Weights.Tensors[1].Offset = 80 },
			"weight 1 (b): bytes 80..80+32 lie outside the 96-byte weight region"},
		{"weight too small", func(p *Plan) { p.Weights.Tensors[0].Size = 32 }, "size 32 is less than the 64 bytes of f32[4 4]"},
		{"duplicate weight", func(p *Plan) { p.Weights.Tensors[1].Name = "w" }, `duplicate name "w"`},
		{"inline data size", func(p *Plan) { p.Weights.Data = p.Weights.Data[:10] }, "inline data has 10 bytes, the region 96"},
		{"chosen by", func(p *Plan) { p.Record.ChosenBy = "guessed" }, `record: chosen by "guessed"`},
		{"quantized shape", func(p *Plan) {
			p.Weights.Tensors[1].DType = Q8_0
		}, "q8_0 needs a multiple of 32 elements"},
		{"state outside", func(p *Plan) { p.State[0].Offset = 8 }, "state 0 (k_cache.0): bytes 8..8+128 lie outside the 128-byte state region"},
		{"arena align", func(p *Plan) { p.Arena.Align = 24 }, "alignment 24 is not a power of two"},
		{"spirv magic", func(p *Plan) { p.Modules[0].SPIRV[0] = 0x03022307 }, "SPIR-V starts with 0x03022307, not the magic number 0x07230203"},
		{"spirv short", func(p *Plan) { p.Modules[1].SPIRV = nil }, "SPIR-V has 0 words"},
		{"entry", func(p *Plan) { p.Modules[0].Entry = "" }, "empty entry point name"},
		{"binding declared twice", func(p *Plan) { p.Modules[0].Bindings[1].Binding = 0 }, "binding 0 declared twice"},
		{"access", func(p *Plan) { p.Modules[0].Bindings[0].Access = 0 }, "binding 0: unknown access 0"},
		{"push size multiple", func(p *Plan) { p.Modules[1].PushConstantSize = 6 }, "push-constant size 6 is not a multiple of 4"},
		{"spec twice", func(p *Plan) { p.Modules[0].SpecConstants[1].ID = 0 }, "specialization constant 0 given twice"},
		{"workgroup", func(p *Plan) { p.Modules[0].Workgroup[1] = 0 }, "workgroup size [64 0 1] has a zero dimension"},
		{"config key", func(p *Plan) { p.Modules[0].Config[""] = 1 }, "empty parameter name"},
		{"rule name", func(p *Plan) { p.Record.Rules[0].Name = "" }, "record: rule 0 has an empty name"},
		{"negative time", func(p *Plan) { p.Record.Candidates[0].Measured = -1 }, "candidate 0: negative time"},
		{"long string", func(p *Plan) { p.Model = strings.Repeat("m", maxString+1) }, "model: 65537 bytes long"},
		{"external with data", func(p *Plan) {
			*p = *externalPlan(make([]byte, 200))
			p.Weights.Data = []byte{1}
		}, "both inline data and an external source"},
		{"external outside source", func(p *Plan) {
			*p = *externalPlan(make([]byte, 120))
		}, "weight 0 (w): source bytes 100..100+64 lie outside the 120-byte file weights.bin"},
		{"external layout", func(p *Plan) {
			*p = *externalPlan(make([]byte, 200))
			p.Weights.Tensors[0].Layout = "tiled"
		}, "external weights are copied verbatim"},
		{"source offset inline", func(p *Plan) { p.Weights.Tensors[0].SourceOffset = 4 }, "source offset 4 but the weights are inline"},
		{"range input index", func(p *Plan) { p.Functions[0].Ranges[0].Input = 2 }, "range 0: input 2 does not exist (the function has 2)"},
		{"range of a float", func(p *Plan) { p.Functions[0].Ranges[0].Input = 0 }, `range 0: input "x" is f32, not an i32 or u32 tensor`},
		{"range empty", func(p *Plan) { p.Functions[0].Ranges[0].Min = 8 }, "range 0 (input pos): minimum 8 exceeds maximum 7"},
		{"range plus self", func(p *Plan) { p.Functions[0].Ranges[0].Plus = []uint32{1} }, "input pos added twice"},
		{"range plus tensor", func(p *Plan) {
			f := &p.Functions[0]
			f.Inputs = append(f.Inputs, Value{Name: "ids", DType: I32, Shape: []int64{3}, Place: Staging})
			f.Ranges[0].Plus = []uint32{2}
		}, "added input ids is i32[3], not an i32 or u32 scalar"},
		{"range plus missing", func(p *Plan) { p.Functions[0].Ranges[0].Plus = []uint32{9} }, "added input 9 does not exist"},
		{"range plus many", func(p *Plan) { p.Functions[0].Ranges[0].Plus = make([]uint32, 9) }, "9 scalars added, more than 8"},
		{"work NaN", func(p *Plan) { p.Functions[0].Dispatches[0].Work.FLOPs = math.NaN() }, "dispatch 0: work NaN FLOPs, 96 bytes is not finite"},
		{"work negative", func(p *Plan) { p.Functions[0].Dispatches[0].Work.Bytes = -1 },
			"dispatch 0: negative work at length 0, count 0 (32 FLOPs, -1 bytes)"},
		{"work count input", func(p *Plan) { p.Functions[0].Dispatches[1].Work.Count.Inputs = []uint32{0} },
			"dispatch 1: work count reads input x (f32[4]), not an i32 or u32 scalar"},
		{"work count missing input", func(p *Plan) { p.Functions[0].Dispatches[1].Work.Count.Inputs = []uint32{4} },
			"work count reads input 4 (the function has 2)"},
		{"work count empty", func(p *Plan) { p.Functions[0].Dispatches[1].Work.Count.Min = 9 }, "work count [9, 8] is empty"},
		{"work negative at min", func(p *Plan) { p.Functions[0].Dispatches[1].Work.Count.Min = 0 },
			"dispatch 1: negative work at length 0, count 0 (-2 FLOPs, 32 bytes)"},
		{"work term without count", func(p *Plan) { p.Functions[0].Dispatches[1].Work.Count = nil },
			"dispatch 1: work term 0 follows a count, but the work defines none"},
		{"work term of length", func(p *Plan) { p.Functions[0].Dispatches[1].Work.Terms[0].Length = 1 },
			"dispatch 1: work term 0 follows the run-time length, but the function has none"},
		{"work term cubic", func(p *Plan) { p.Functions[0].Dispatches[1].Work.Terms[0].Length = 3 }, "to the power 3 (at most 2)"},
		{"work count plus length", func(p *Plan) { p.Functions[0].Dispatches[1].Work.Count.PlusLength = true },
			"work count adds the run-time length, but the function has none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := smallPlan()
			tc.mutate(p)
			err := p.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant ErrInvalid containing %q", err, tc.want)
			}
			// Encode refuses what Validate rejects.
			if err := p.Encode(&strings.Builder{}); !errors.Is(err, ErrInvalid) {
				t.Errorf("Encode: got %v, want ErrInvalid", err)
			}
		})
	}
}

func TestValidateHazards(t *testing.T) {
	// Reads of the same bytes from one interval are fine; a dispatch may update in place through its
	// own bindings; disjoint writes are fine.
	p := smallPlan()
	p.Arena.Split = nil // the ranges below use the whole arena
	p.Modules[1].Bindings = []BindingDecl{{0, ReadWrite}, {1, ReadWrite}}
	f := &p.Functions[0]
	f.Dispatches[1].BarrierBefore = false
	f.Dispatches[1].Bindings = []Binding{
		{0, BufferRef{Region{RegionArena, 0}, 32, 16}},
		{1, BufferRef{Region{RegionArena, 0}, 40, 16}}, // overlaps its own binding 0
	}
	extra := f.Dispatches[1]
	extra.Module = 0
	extra.Bindings = []Binding{
		{0, BufferRef{Region{RegionWeights, 0}, 0, 64}}, // read by dispatch 0 too
		{1, BufferRef{Region{RegionInput, 0}, 0, 16}},
		{2, BufferRef{Region{RegionArena, 0}, 0, 16}},
	}
	extra.Push = make([]byte, 8)
	f.Dispatches = append(f.Dispatches, extra)
	if err := p.Validate(); err != nil {
		t.Fatalf("no hazard expected: %v", err)
	}
	// Two writers of overlapping bytes.
	f.Dispatches[2].Bindings[2].Buffer.Offset = 8
	err := p.Validate()
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "dispatch 0 (binding 2) and dispatch 2 (binding 2) use overlapping arena bytes 16..32 and 8..24 in one barrier interval, and both write") {
		t.Fatalf("got %v", err)
	}
	// A barrier before dispatch 2 resolves it.
	f.Dispatches[2].BarrierBefore = true
	if err := p.Validate(); err != nil {
		t.Fatalf("barrier should resolve the hazard: %v", err)
	}
}

func TestValidateCapsProblems(t *testing.T) {
	p := smallPlan()
	for i := range p.Modules {
		p.Modules[i].Entry = ""
		p.Modules[i].Workgroup = [3]uint32{}
		p.Modules[i].SPIRV = nil
		p.Modules[i].PushConstantSize = 3
	}
	p.Arena.Align = 3
	p.Model = strings.Repeat("m", maxString+1)
	var ve *ValidationError
	if err := p.Validate(); !errors.As(err, &ve) || len(ve.Problems) != maxProblems || !ve.More || !strings.HasSuffix(err.Error(), "; ...") {
		t.Fatalf("got %v", err)
	}
}

func TestGridScaleGroups(t *testing.T) {
	for _, tc := range []struct {
		s    *GridScale
		grid [3]uint32
		n    uint32
		want [3]uint32
	}{
		{nil, [3]uint32{8, 2, 1}, 3, [3]uint32{8, 2, 1}},
		{&GridScale{Axis: 1, Num: 1, Den: 32}, [3]uint32{9, 16, 1}, 1, [3]uint32{9, 1, 1}},
		{&GridScale{Axis: 1, Num: 1, Den: 32}, [3]uint32{9, 16, 1}, 33, [3]uint32{9, 2, 1}},
		{&GridScale{Axis: 1, Num: 1, Den: 32}, [3]uint32{9, 16, 1}, 512, [3]uint32{9, 16, 1}},
		{&GridScale{Axis: 0, Num: 2, Den: 32}, [3]uint32{32, 2, 1}, 300, [3]uint32{19, 2, 1}},
		{&GridScale{Axis: 0, Num: 1, Den: 1}, [3]uint32{4, 1, 1}, 9, [3]uint32{4, 1, 1}}, // never more than the grid
		{&GridScale{Axis: LinearAxis, Num: 576, Den: 256}, [3]uint32{1152, 1, 1}, 7, [3]uint32{16, 1, 1}},
		// A split linear grid: 100000 groups as 50000 × 2; 70000 of them need both rows.
		{&GridScale{Axis: LinearAxis, Num: 1, Den: 1}, [3]uint32{50000, 2, 1}, 70000, [3]uint32{50000, 2, 1}},
		{&GridScale{Axis: LinearAxis, Num: 1, Den: 1}, [3]uint32{50000, 2, 1}, 30000, [3]uint32{30000, 1, 1}},
	} {
		if got := tc.s.Groups(tc.grid, tc.n); got != tc.want {
			t.Errorf("%+v.Groups(%v, %d) = %v, want %v", tc.s, tc.grid, tc.n, got, tc.want)
		}
	}
}
