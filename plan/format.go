package plan

// The plan file format, version 4. All integers are little-endian.
//
//	offset  size  field
//	0       8     magic "\x89vkc\r\n\x1a\n"
//	8       4     format version (u32)
//	12      4     header length H (u32): the bytes that follow, up to and including the header CRC
//	16      H-4   header body:
//	                compiler version (str), model (str),
//	                device fingerprint: vendor id (u32), device id (u32), driver version (u32),
//	                  pipeline-cache UUID (16 bytes), device name (str),
//	                section count (u32), then per section: id (u32), length (u64), CRC-32C (u32)
//	12+H    4     header CRC-32C over bytes [0, 12+H)
//	16+H    ...   the sections' payloads, back to back in table order; then end of file.
//
// str is a u32 byte length and the bytes; a list is a u32 count and its elements; a shape is a list
// of i64; a map (a tuning configuration) is a list of (str, i64) sorted by key with no duplicates;
// a bool is one byte, 0 or 1; a duration is an i64 of nanoseconds.
//
// Sections, each present exactly once and in this order:
//
//	1 modules     the SPIR-V modules with their interfaces
//	2 memory      weight tensors and source, state tensors, arena
//	3 functions   inputs, outputs, dispatches, input ranges
//	4 record      rules applied, candidates, notes, the path that chose (static or measured)
//	5 tokenizer   the language model's tokenizer, BOS/EOS and chat template, when recorded
//	6 weightdata  the inline weight region's bytes (empty when the weights are external)
//
// Version 2 added each function's input ranges (Range) after its dispatches: a list of (input
// u32, plus list of u32, min i64, max i64, min reason str, max reason str); and each dispatch's
// Work after its measured time: FLOPs f64, bytes f64, a list of terms (length power u8, count
// bool, FLOPs f64, bytes f64), a bool for a count and, when set, the count's inputs (list of
// u32), plus-length bool, add i64, min i64, max i64 (an f64 is its IEEE 754 bits as a u64). Version 1 files are
// rejected with ErrVersion: their functions carry no ranges, so running them would skip the checks
// that keep kernels inside their buffers. Version 2 also added run-time lengths: a function's
// length after its outputs (a bool, then name str, min u32, max u32), a value's bounded flag (a
// bool after its offset), the length region (kind 6) and a dispatch's grid scale (a bool after
// its grid, then axis u8, num u32, den u32), a range's PlusLength (a bool after its plus list), and
// after each function its variants (a list of functions encoded alike, without variants).
// Version 2 also added the tokenizer section (see encodeTokenizer), before weightdata.
// Version 3 cut regions into device buffers (Split): the memory section gains, after the weight
// tensors, after the state tensors and after the arena's alignment, each a list of u64: the
// offsets at which that region's buffers after the first begin. Version 2 files are rejected
// with ErrVersion: they were written by a compiler that did not check a region against the
// device's allocation limit the way version 3's loader relies on, and recompiling is cheap.
// Version 4 added, at the end of the tokenizer section, the other ids that end a generation
// (Tokenizer.EOG: a list of i64). Version 3 files are rejected with ErrVersion like older ones: read
// as version 4 they would lose those ids without a word (a model would run past its end of turn).
//
// The bulky weight data comes last so that a reader that needs only the description can stop early.
//
// The magic follows PNG's: a byte with the high bit set catches 7-bit transports, and CR LF, ^Z, LF
// catch line-ending conversion and stop a `type` on Windows. The version follows the magic so a
// future layout can change everything after it. Any change to the layout bumps the version: the
// decoder accepts exactly the versions it knows and says which it found otherwise.
//
// Checksums are CRC-32C (Castagnoli), one for the header and one per section. The point is to catch
// accidental damage (a truncated copy, a flipped bit on disk): CRC-32C detects every single-bit and
// every burst error up to 32 bits, and Go computes it with the CPU's CRC32 instruction at many GB/s,
// which matters for gigabytes of inline weights. A cryptographic hash would not add protection
// against deliberate tampering, since whoever edits the file can recompute any checksum stored in
// it; a plan is trusted like an executable. SHA-256 is used where the question is identity, not
// damage: naming an external weight file's content.
//
// Every decoded length is checked against the bytes actually remaining before anything is
// allocated, and a payload is read only as far as the input really extends, so a small hostile file
// cannot make the decoder allocate much more than its own size.

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"sort"
	"time"
)

// Magic is the first 8 bytes of every plan file.
const Magic = "\x89vkc\r\n\x1a\n"

// FormatVersion is the version of the file format this package writes and reads.
const FormatVersion = 4

const (
	secModules    = 1
	secMemory     = 2
	secFunctions  = 3
	secRecord     = 4
	secTokenizer  = 5
	secWeightData = 6
	numSections   = 6
)

var sectionNames = [...]string{"", "modules", "memory", "functions", "record", "tokenizer", "weightdata"}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// prefixSize is magic + version + header length.
const prefixSize = 16

// maxHeader bounds the header length field; a real header is a few hundred bytes.
const maxHeader = 1 << 20

// enc appends little-endian values to a byte slice.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) i64(v int64)  { e.u64(uint64(v)) }
func (e *enc) dur(d time.Duration) {
	e.i64(int64(d))
}
func (e *enc) f64(v float64) { e.u64(math.Float64bits(v)) }
func (e *enc) work(w *Work) {
	e.f64(w.FLOPs)
	e.f64(w.Bytes)
	e.count(len(w.Terms))
	for _, t := range w.Terms {
		e.u8(t.Length)
		e.bool(t.Count)
		e.f64(t.FLOPs)
		e.f64(t.Bytes)
	}
	e.bool(w.Count != nil)
	if c := w.Count; c != nil {
		e.count(len(c.Inputs))
		for _, i := range c.Inputs {
			e.u32(i)
		}
		e.bool(c.PlusLength)
		e.i64(c.Add)
		e.i64(c.Min)
		e.i64(c.Max)
	}
}
func (e *enc) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}
func (e *enc) count(n int) {
	if n > math.MaxUint32 {
		// Validate rejects such plans before encoding starts.
		panic("plan: list too long to encode")
	}
	e.u32(uint32(n))
}
func (e *enc) str(s string) { e.count(len(s)); e.b = append(e.b, s...) }
func (e *enc) bytes(b []byte) {
	e.count(len(b))
	e.b = append(e.b, b...)
}
func (e *enc) shape(s []int64) {
	e.count(len(s))
	for _, d := range s {
		e.i64(d)
	}
}
func (e *enc) split(s Split) {
	e.count(len(s))
	for _, x := range s {
		e.u64(x)
	}
}
func (e *enc) strs(ss []string) {
	e.count(len(ss))
	for _, s := range ss {
		e.str(s)
	}
}
func (e *enc) config(m map[string]int64) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.count(len(keys))
	for _, k := range keys {
		e.str(k)
		e.i64(m[k])
	}
}

func encodeModules(p *Plan) []byte {
	var e enc
	e.count(len(p.Modules))
	for i := range p.Modules {
		m := &p.Modules[i]
		e.str(m.Key)
		e.config(m.Config)
		e.str(m.Entry)
		e.count(len(m.SPIRV))
		for _, w := range m.SPIRV {
			e.u32(w)
		}
		e.count(len(m.Bindings))
		for _, b := range m.Bindings {
			e.u32(b.Binding)
			e.u8(uint8(b.Access))
		}
		e.u32(m.PushConstantSize)
		e.count(len(m.SpecConstants))
		for _, s := range m.SpecConstants {
			e.u32(s.ID)
			e.u32(s.Value)
		}
		for _, w := range m.Workgroup {
			e.u32(w)
		}
	}
	return e.b
}

func encodeMemory(p *Plan) []byte {
	var e enc
	w := &p.Weights
	e.u64(w.Size)
	e.bool(w.Source != nil)
	if w.Source != nil {
		e.str(w.Source.Path)
		e.u64(w.Source.Size)
		e.b = append(e.b, w.Source.SHA256[:]...)
	}
	e.count(len(w.Tensors))
	for _, t := range w.Tensors {
		e.str(t.Name)
		e.u8(uint8(t.DType))
		e.shape(t.Shape)
		e.str(t.Layout)
		e.u64(t.Offset)
		e.u64(t.Size)
		e.u64(t.SourceOffset)
	}
	e.split(w.Split)
	e.u64(p.StateSize)
	e.count(len(p.State))
	for _, t := range p.State {
		e.str(t.Name)
		e.u8(uint8(t.DType))
		e.shape(t.Shape)
		e.u64(t.Offset)
	}
	e.split(p.StateSplit)
	e.u64(p.Arena.Size)
	e.u64(p.Arena.Align)
	e.split(p.Arena.Split)
	return e.b
}

func (e *enc) values(vs []Value) {
	e.count(len(vs))
	for _, v := range vs {
		e.str(v.Name)
		e.u8(uint8(v.DType))
		e.shape(v.Shape)
		e.u8(uint8(v.Place))
		e.u64(v.Offset)
		e.bool(v.Bounded)
	}
}

func encodeFunctions(p *Plan) []byte {
	var e enc
	e.count(len(p.Functions))
	for i := range p.Functions {
		f := &p.Functions[i]
		e.function(f)
		e.count(len(f.Variants))
		for j := range f.Variants {
			e.function(&f.Variants[j])
		}
	}
	return e.b
}

// function encodes one function (its variants apart).
func (e *enc) function(f *Function) {
	e.str(f.Name)
	e.values(f.Inputs)
	e.values(f.Outputs)
	e.bool(f.Length != nil)
	if l := f.Length; l != nil {
		e.str(l.Name)
		e.u32(l.Min)
		e.u32(l.Max)
	}
	e.count(len(f.Dispatches))
	for j := range f.Dispatches {
		d := &f.Dispatches[j]
		e.u32(d.Module)
		e.count(len(d.Bindings))
		for _, b := range d.Bindings {
			e.u32(b.Binding)
			e.u8(uint8(b.Buffer.Region.Kind))
			e.u32(b.Buffer.Region.Index)
			e.u64(b.Buffer.Offset)
			e.u64(b.Buffer.Range)
		}
		e.bytes(d.Push)
		e.count(len(d.Scalars))
		for _, s := range d.Scalars {
			e.u32(s.Offset)
			e.u32(s.Input)
			e.u32(uint32(s.Add))
		}
		for _, g := range d.Grid {
			e.u32(g)
		}
		e.bool(d.Scale != nil)
		if s := d.Scale; s != nil {
			e.u8(s.Axis)
			e.u32(s.Num)
			e.u32(s.Den)
		}
		e.bool(d.BarrierBefore)
		e.strs(d.Ops)
		e.str(d.Label)
		e.dur(d.Estimated)
		e.dur(d.Measured)
		e.work(&d.Work)
	}
	e.count(len(f.Ranges))
	for _, r := range f.Ranges {
		e.u32(r.Input)
		e.count(len(r.Plus))
		for _, x := range r.Plus {
			e.u32(x)
		}
		e.bool(r.PlusLength)
		e.i64(r.Min)
		e.i64(r.Max)
		e.str(r.MinWhy)
		e.str(r.MaxWhy)
	}
}

func encodeRecord(p *Plan) []byte {
	var e enc
	r := &p.Record
	e.count(len(r.Rules))
	for _, rc := range r.Rules {
		e.str(rc.Name)
		e.u64(rc.Count)
	}
	e.count(len(r.Candidates))
	for _, c := range r.Candidates {
		e.str(c.Subject)
		e.str(c.Kernel)
		e.config(c.Config)
		e.dur(c.Estimated)
		e.dur(c.Measured)
		e.bool(c.Chosen)
		e.str(c.Note)
	}
	e.strs(r.Notes)
	e.str(r.ChosenBy)
	return e.b
}

// sections returns the payloads in file order; index 0 is section id 1. The weight data is not
// among them: it may be gigabytes, held in pieces (see Weights.stream).
func (p *Plan) sections() [numSections - 1][]byte {
	return [numSections - 1][]byte{encodeModules(p), encodeMemory(p), encodeFunctions(p), encodeRecord(p), encodeTokenizer(p)}
}

// sectionSum is a section's length and CRC-32C.
type sectionSum struct {
	length uint64
	crc    uint32
}

// sums returns the length and CRC of every section, the weight data's by one streaming pass.
func (p *Plan) sums(secs [numSections - 1][]byte) ([numSections]sectionSum, error) {
	var out [numSections]sectionSum
	for i, s := range secs {
		out[i] = sectionSum{uint64(len(s)), crc32.Checksum(s, castagnoli)}
	}
	if p.Weights.Source == nil {
		w := &out[secWeightData-1]
		err := p.Weights.stream(func(b []byte) error {
			w.length += uint64(len(b))
			w.crc = crc32.Update(w.crc, castagnoli, b)
			return nil
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// header returns the prefix, header body and header CRC for the given section sums.
func (p *Plan) header(secs [numSections]sectionSum) []byte {
	var body enc
	body.str(p.CompilerVersion)
	body.str(p.Model)
	fp := &p.Device
	body.u32(fp.VendorID)
	body.u32(fp.DeviceID)
	body.u32(fp.DriverVersion)
	body.b = append(body.b, fp.PipelineCacheUUID[:]...)
	body.str(fp.DeviceName)
	body.u32(numSections)
	for i, s := range secs {
		body.u32(uint32(i + 1))
		body.u64(s.length)
		body.u32(s.crc)
	}
	var h enc
	h.b = append(h.b, Magic...)
	h.u32(FormatVersion)
	h.u32(uint32(len(body.b) + 4))
	h.b = append(h.b, body.b...)
	h.u32(crc32.Checksum(h.b, castagnoli))
	return h.b
}
