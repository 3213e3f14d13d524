package plan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strings"
	"time"

	"github.com/vkc-project/vkc/internal/hostmem"
)

// Decode reads a plan written by Encode. It checks the magic, the format version, every checksum
// and, finally, the plan's consistency (Validate), and returns a *FormatError saying what is wrong
// and where: ErrForeign (not a plan; it names the format when it recognises one), ErrVersion (a
// newer or unknown format version), ErrTruncated, ErrCorrupt (checksum mismatch or malformed
// contents), ErrInvalid or ErrTooLarge (the declared sections exceed the host memory limit,
// internal/hostmem). Decode never panics and allocates in proportion to the input actually read,
// whatever lengths the input claims.
//
//	p, err := plan.Decode(bytes.NewReader(data))
//	if errors.Is(err, plan.ErrVersion) { /* recompile */ }
func Decode(r io.Reader) (*Plan, error) {
	size := int64(-1)
	if l, ok := r.(interface{ Len() int }); ok {
		size = int64(l.Len()) // bytes.Reader, bytes.Buffer, strings.Reader
	}
	p, err := decode(r, size)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// input reads the file front to back, knowing the total size when the caller does.
type input struct {
	r    io.Reader
	pos  uint64 // bytes read so far
	size int64  // total input size, or -1 if unknown
}

// read returns the next n bytes of the input. what names the part being read, for the message if
// the input ends early. With an unknown size, memory grows only as data actually arrives.
func (in *input) read(n uint64, what string) ([]byte, error) {
	if in.size >= 0 && n > uint64(in.size)-in.pos {
		return nil, formatErr(ErrTruncated, "%s needs %d bytes from byte %d but the input ends at byte %d",
			what, n, in.pos, in.size)
	}
	var b []byte
	const chunk = 1 << 20
	if in.size >= 0 || n <= chunk {
		b = make([]byte, n)
		got, err := io.ReadFull(in.r, b)
		if err != nil {
			return nil, in.short(what, n, uint64(got), err)
		}
	} else {
		if n > math.MaxInt64 {
			// No reader holds that much; io.CopyN would take the negative length as "copy
			// nothing" and an empty section would pass for a whole one.
			return nil, formatErr(ErrTruncated, "%s claims %d bytes, more than any input can hold", what, n)
		}
		var buf bytes.Buffer
		buf.Grow(chunk)
		got, err := io.CopyN(&buf, in.r, int64(n))
		if err != nil {
			return nil, in.short(what, n, uint64(got), err)
		}
		b = buf.Bytes()
	}
	in.pos += n
	return b, nil
}

func (in *input) short(what string, n, got uint64, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return formatErr(ErrTruncated, "%s needs %d bytes from byte %d but the input ends at byte %d",
			what, n, in.pos, in.pos+got)
	}
	return fmt.Errorf("plan: reading %s: %w", what, err)
}

type sectionEntry struct {
	length uint64
	crc    uint32
}

func decode(r io.Reader, size int64) (*Plan, error) {
	return decodeWith(r, size, nil)
}

// decodeWith is decode; when weights is set (a file of known size), the weight data section is
// not read: weights(offset, length) gives the region's bytes as a piece read on demand, and its
// checksum is not checked (ReadDescription).
func decodeWith(r io.Reader, size int64, weights func(off, n uint64) WeightPiece) (*Plan, error) {
	lazy := weights != nil && size >= 0
	in := &input{r: r, size: size}

	// Magic, version and header length, checked in that order so that a foreign or newer file is
	// reported as such rather than as corrupt.
	var pre [prefixSize]byte
	got, err := io.ReadFull(r, pre[:])
	in.pos = uint64(got)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("plan: reading header: %w", err)
	}
	if m := min(got, len(Magic)); string(pre[:m]) != Magic[:m] {
		return nil, formatErr(ErrForeign, "%s", sniff(pre[:got]))
	}
	if got == 0 {
		return nil, formatErr(ErrTruncated, "the input is empty")
	}
	if got < prefixSize {
		return nil, formatErr(ErrTruncated, "the input ends at byte %d, inside the %d-byte file prefix", got, prefixSize)
	}
	version := binary.LittleEndian.Uint32(pre[8:])
	if version != FormatVersion {
		if version > FormatVersion {
			return nil, formatErr(ErrVersion, "format version %d is newer than this vkc reads (version %d); use a newer vkc or recompile the model", version, FormatVersion)
		}
		return nil, formatErr(ErrVersion, "format version %d is not one this vkc reads (version %d); recompile the model", version, FormatVersion)
	}
	hlen := binary.LittleEndian.Uint32(pre[12:])
	if hlen < 4 || hlen > maxHeader {
		return nil, formatErr(ErrCorrupt, "header length %d is outside 4..%d", hlen, maxHeader)
	}
	rest, err := in.read(uint64(hlen), "the header")
	if err != nil {
		return nil, err
	}
	hdr := append(pre[:], rest[:len(rest)-4]...)
	stored := binary.LittleEndian.Uint32(rest[len(rest)-4:])
	if sum := crc32.Checksum(hdr, castagnoli); sum != stored {
		return nil, formatErr(ErrCorrupt, "header checksum mismatch (stored %08x, computed %08x)", stored, sum)
	}

	p := &Plan{}
	d := &dec{b: hdr, pos: prefixSize, name: "header"}
	p.CompilerVersion = d.str()
	p.Model = d.str()
	p.Device.VendorID = d.u32()
	p.Device.DeviceID = d.u32()
	p.Device.DriverVersion = d.u32()
	copy(p.Device.PipelineCacheUUID[:], d.raw(16))
	p.Device.DeviceName = d.str()
	if n := d.u32(); d.err == nil && n != numSections {
		d.fail("section table has %d entries, want %d", n, numSections)
	}
	var table [numSections]sectionEntry
	for i := range table {
		if id := d.u32(); d.err == nil && id != uint32(i+1) {
			d.fail("section table entry %d has id %d, want %d", i, id, i+1)
		}
		table[i] = sectionEntry{d.u64(), d.u32()}
	}
	if err := d.end(); err != nil {
		return nil, err
	}

	// Everything the header declares is read into memory: refuse more than the host memory
	// limit before reading any of it (a pipe claiming terabytes, a sparse file with a valid
	// header). Bytes past the input's end are not counted: they are a truncation, reported as
	// such below.
	var total uint64
	for i, s := range table {
		if lazy && i == secWeightData-1 {
			continue
		}
		if total += s.length; total < s.length {
			total = math.MaxUint64
		}
	}
	if size >= 0 {
		total = min(total, uint64(size))
	}
	if err := hostmem.Check("the plan's sections", total); err != nil {
		return nil, formatErr(ErrTooLarge, "%v", err)
	}

	// Read and check every section before interpreting any of them.
	var payload [numSections][]byte
	var lazyPiece *WeightPiece
	for i, s := range table {
		name := sectionNames[i+1]
		start := in.pos
		if lazy && i == secWeightData-1 {
			// The last section: the file's size says whether it is all there.
			if s.length > uint64(size)-in.pos {
				return nil, formatErr(ErrTruncated, "section %s needs %d bytes from byte %d but the input ends at byte %d", name, s.length, in.pos, size)
			}
			if end := in.pos + s.length; end < uint64(size) {
				return nil, formatErr(ErrCorrupt, "%d bytes follow the last section at byte %d", uint64(size)-end, end)
			}
			pc := weights(in.pos, s.length)
			lazyPiece = &pc
			in.pos += s.length
			break
		}
		b, err := in.read(s.length, "section "+name)
		if err != nil {
			return nil, err
		}
		if sum := crc32.Checksum(b, castagnoli); sum != s.crc {
			return nil, formatErr(ErrCorrupt, "section %s (bytes %d..%d): checksum mismatch (stored %08x, computed %08x)",
				name, start, start+s.length, s.crc, sum)
		}
		payload[i] = b
	}
	var one [1]byte
	if lazy {
		// checked against the size above
	} else if n, _ := io.ReadFull(r, one[:]); n > 0 {
		extra := "more"
		if size >= 0 {
			extra = fmt.Sprint(uint64(size) - in.pos)
		}
		return nil, formatErr(ErrCorrupt, "%s bytes follow the last section at byte %d", extra, in.pos)
	}

	off := uint64(prefixSize) + uint64(hlen)
	for i, parse := range [...]func(*dec, *Plan){decodeModules, decodeMemory, decodeFunctions, decodeRecord, decodeTokenizer} {
		d := &dec{b: payload[i], name: "section " + sectionNames[i+1], base: off}
		parse(d, p)
		if err := d.end(); err != nil {
			return nil, err
		}
		off += table[i].length
	}
	if lazyPiece != nil && lazyPiece.Size > 0 {
		if p.Weights.Source != nil {
			return nil, formatErr(ErrCorrupt, "section weightdata holds %d bytes but the weights are external (%s)", lazyPiece.Size, p.Weights.Source.Path)
		}
		p.Weights.Pieces = []WeightPiece{*lazyPiece}
	} else if data := payload[secWeightData-1]; len(data) > 0 {
		if p.Weights.Source != nil {
			return nil, formatErr(ErrCorrupt, "section weightdata holds %d bytes but the weights are external (%s)", len(data), p.Weights.Source.Path)
		}
		p.Weights.Data = data
	}

	if err := p.Validate(); err != nil {
		detail := err.Error()
		var ve *ValidationError
		if errors.As(err, &ve) {
			detail = strings.TrimPrefix(detail, "invalid plan: ") // the Kind says it
		}
		return nil, &FormatError{Kind: ErrInvalid, Detail: detail}
	}
	return p, nil
}

// sniff says what a non-plan file looks like, from its first bytes.
func sniff(b []byte) string {
	has := func(s string) bool { return bytes.HasPrefix(b, []byte(s)) }
	var what string
	switch {
	case has("\x7fELF"):
		what = "an ELF executable or library"
	case len(b) >= 9 && b[8] == '{' && binary.LittleEndian.Uint64(b) < 1<<32:
		what = "a safetensors file"
	case has("GGUF"):
		what = "a GGUF file"
	case has("\x93NUMPY"):
		what = "a NumPy .npy file"
	case has("PK\x03\x04"):
		what = "a zip archive (a PyTorch checkpoint or .npz?)"
	case has("\x1f\x8b"):
		what = "a gzip file"
	case has("\x03\x02\x23\x07"):
		what = "a SPIR-V module"
	case has("digraph") || has("graph"):
		what = "a DOT graph"
	}
	if what != "" {
		return "the input is " + what
	}
	n := min(len(b), len(Magic))
	return fmt.Sprintf("bad magic %q (want %q)", b[:n], Magic)
}

// dec reads little-endian values from one section's payload. The first error sticks; after it,
// every read returns a zero value, so parsing code needs no error checks of its own.
type dec struct {
	b    []byte
	pos  int
	name string // "section functions", for messages
	base uint64 // file offset of b[0]
	err  error
}

func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = formatErr(ErrCorrupt, "%s at byte %d: %s", d.name, d.base+uint64(d.pos), fmt.Sprintf(format, args...))
	}
}

// end reports the first error, or an error if bytes are left over.
func (d *dec) end() error {
	if d.err == nil && d.pos != len(d.b) {
		d.fail("%d unread bytes at the end", len(d.b)-d.pos)
	}
	if d.err != nil {
		return d.err
	}
	return nil
}

func (d *dec) raw(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b)-d.pos {
		d.fail("needs %d bytes, %d remain", n, len(d.b)-d.pos)
		return nil
	}
	b := d.b[d.pos : d.pos+n]
	d.pos += n
	return b
}

func (d *dec) u8() uint8 {
	if b := d.raw(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *dec) u32() uint32 {
	if b := d.raw(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if b := d.raw(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *dec) i64() int64          { return int64(d.u64()) }
func (d *dec) dur() time.Duration  { return time.Duration(d.i64()) }
func (d *dec) dtype() DType        { return DType(d.u8()) }
func (d *dec) place() Placement    { return Placement(d.u8()) }
func (d *dec) access() Access      { return Access(d.u8()) }
func (d *dec) regionK() RegionKind { return RegionKind(d.u8()) }

func (d *dec) f64() float64 { return math.Float64frombits(d.u64()) }
func (d *dec) work(w *Work) {
	w.FLOPs, w.Bytes = d.f64(), d.f64()
	if n := d.count(1 + 1 + 8 + 8); n > 0 {
		w.Terms = make([]WorkTerm, n)
		for i := range w.Terms {
			w.Terms[i] = WorkTerm{Length: d.u8(), Count: d.bool(), FLOPs: d.f64(), Bytes: d.f64()}
		}
	}
	if !d.bool() {
		return
	}
	c := &WorkCount{}
	if n := d.count(4); n > 0 {
		c.Inputs = make([]uint32, n)
		for i := range c.Inputs {
			c.Inputs[i] = d.u32()
		}
	}
	c.PlusLength = d.bool()
	c.Add, c.Min, c.Max = d.i64(), d.i64(), d.i64()
	w.Count = c
}

func (d *dec) bool() bool {
	switch v := d.u8(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("boolean byte is %d, want 0 or 1", v)
		return false
	}
}

// count reads a list length and checks that the list can fit in what remains, given that each
// element takes at least minSize bytes. This is what bounds every allocation by the input's size.
func (d *dec) count(minSize int) int {
	n := d.u32()
	if d.err != nil {
		return 0
	}
	if uint64(n)*uint64(minSize) > uint64(len(d.b)-d.pos) {
		d.fail("a list of %d elements cannot fit in the %d remaining bytes", n, len(d.b)-d.pos)
		return 0
	}
	return int(n)
}

func (d *dec) str() string {
	n := d.count(1)
	return string(d.raw(n))
}

func (d *dec) bytes() []byte {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	return bytes.Clone(d.raw(n))
}

func (d *dec) shape() []int64 {
	n := d.count(8)
	if n == 0 {
		return nil
	}
	s := make([]int64, n)
	for i := range s {
		s[i] = d.i64()
	}
	return s
}

func (d *dec) strs() []string {
	n := d.count(4)
	if n == 0 {
		return nil
	}
	s := make([]string, n)
	for i := range s {
		s[i] = d.str()
	}
	return s
}

// config reads a map written in key order; unsorted or repeated keys are an error, so that every
// accepted file is the one encoding of its plan.
func (d *dec) config() map[string]int64 {
	n := d.count(12)
	if n == 0 {
		return nil
	}
	m := make(map[string]int64, n)
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str()
		if i > 0 && k <= prev {
			d.fail("configuration key %q is out of order or repeated after %q", k, prev)
		}
		prev = k
		m[k] = d.i64()
	}
	return m
}

func decodeModules(d *dec, p *Plan) {
	n := d.count(4 + 4 + 4 + 4 + 4 + 4 + 4 + 12)
	if n == 0 {
		return
	}
	p.Modules = make([]Module, n)
	for i := range p.Modules {
		m := &p.Modules[i]
		m.Key = d.str()
		m.Config = d.config()
		m.Entry = d.str()
		if nw := d.count(4); nw > 0 {
			m.SPIRV = make([]uint32, nw)
			for j := range m.SPIRV {
				m.SPIRV[j] = d.u32()
			}
		}
		if nb := d.count(5); nb > 0 {
			m.Bindings = make([]BindingDecl, nb)
			for j := range m.Bindings {
				m.Bindings[j] = BindingDecl{d.u32(), d.access()}
			}
		}
		m.PushConstantSize = d.u32()
		if ns := d.count(8); ns > 0 {
			m.SpecConstants = make([]SpecConstant, ns)
			for j := range m.SpecConstants {
				m.SpecConstants[j] = SpecConstant{d.u32(), d.u32()}
			}
		}
		for j := range m.Workgroup {
			m.Workgroup[j] = d.u32()
		}
		if d.err != nil {
			return
		}
	}
}

func decodeMemory(d *dec, p *Plan) {
	w := &p.Weights
	w.Size = d.u64()
	if d.bool() {
		w.Source = &Source{Path: d.str(), Size: d.u64()}
		copy(w.Source.SHA256[:], d.raw(32))
	}
	if n := d.count(4 + 1 + 4 + 4 + 24); n > 0 {
		w.Tensors = make([]WeightTensor, n)
		for i := range w.Tensors {
			w.Tensors[i] = WeightTensor{Name: d.str(), DType: d.dtype(), Shape: d.shape(), Layout: d.str(),
				Offset: d.u64(), Size: d.u64(), SourceOffset: d.u64()}
		}
	}
	w.Split = d.split()
	p.StateSize = d.u64()
	if n := d.count(4 + 1 + 4 + 8); n > 0 {
		p.State = make([]StateTensor, n)
		for i := range p.State {
			p.State[i] = StateTensor{Name: d.str(), DType: d.dtype(), Shape: d.shape(), Offset: d.u64()}
		}
	}
	p.StateSplit = d.split()
	p.Arena = Arena{Size: d.u64(), Align: d.u64()}
	p.Arena.Split = d.split()
}

// split reads a region's split (nil when empty, as the plan had it).
func (d *dec) split() Split {
	n := d.count(8)
	if n == 0 {
		return nil
	}
	s := make(Split, n)
	for i := range s {
		s[i] = d.u64()
	}
	return s
}

func (d *dec) values() []Value {
	n := d.count(4 + 1 + 4 + 1 + 8 + 1)
	if n == 0 {
		return nil
	}
	vs := make([]Value, n)
	for i := range vs {
		vs[i] = Value{Name: d.str(), DType: d.dtype(), Shape: d.shape(), Place: d.place(), Offset: d.u64(), Bounded: d.bool()}
	}
	return vs
}

// minDispatch is the encoded size of a dispatch with empty lists.
const minDispatch = 4 + 4 + 4 + 4 + 12 + 1 + 1 + 4 + 4 + 8 + 8 + 8 + 8 + 4 + 1

func decodeFunctions(d *dec, p *Plan) {
	n := d.count(minFunction + 4)
	if n == 0 {
		return
	}
	p.Functions = make([]Function, n)
	for i := range p.Functions {
		f := &p.Functions[i]
		d.function(f)
		if d.err != nil {
			return
		}
		if nv := d.count(minFunction); nv > 0 {
			f.Variants = make([]Function, nv)
			for j := range f.Variants {
				d.function(&f.Variants[j])
				if d.err != nil {
					return
				}
			}
		}
	}
}

// minFunction is the encoded size of a function with empty lists.
const minFunction = 4 + 4 + 4 + 1 + 4 + 4

// function decodes one function (its variants apart).
func (d *dec) function(f *Function) {
	f.Name = d.str()
	f.Inputs = d.values()
	f.Outputs = d.values()
	if d.bool() {
		f.Length = &Length{Name: d.str(), Min: d.u32(), Max: d.u32()}
	}
	nd := d.count(minDispatch)
	if nd > 0 {
		f.Dispatches = make([]Dispatch, nd)
	}
	for j := range f.Dispatches {
		x := &f.Dispatches[j]
		x.Module = d.u32()
		if nb := d.count(4 + 1 + 4 + 16); nb > 0 {
			x.Bindings = make([]Binding, nb)
			for k := range x.Bindings {
				b := &x.Bindings[k]
				b.Binding = d.u32()
				b.Buffer.Region = Region{d.regionK(), d.u32()}
				b.Buffer.Offset = d.u64()
				b.Buffer.Range = d.u64()
			}
		}
		x.Push = d.bytes()
		if ns := d.count(12); ns > 0 {
			x.Scalars = make([]ScalarSlot, ns)
			for k := range x.Scalars {
				x.Scalars[k] = ScalarSlot{d.u32(), d.u32(), int32(d.u32())}
			}
		}
		for k := range x.Grid {
			x.Grid[k] = d.u32()
		}
		if d.bool() {
			x.Scale = &GridScale{Axis: d.u8(), Num: d.u32(), Den: d.u32()}
		}
		x.BarrierBefore = d.bool()
		x.Ops = d.strs()
		x.Label = d.str()
		x.Estimated = d.dur()
		x.Measured = d.dur()
		d.work(&x.Work)
		if d.err != nil {
			return
		}
	}
	if nr := d.count(4 + 4 + 1 + 8 + 8 + 4 + 4); nr > 0 {
		f.Ranges = make([]Range, nr)
		for k := range f.Ranges {
			r := &f.Ranges[k]
			r.Input = d.u32()
			if np := d.count(4); np > 0 {
				r.Plus = make([]uint32, np)
				for l := range r.Plus {
					r.Plus[l] = d.u32()
				}
			}
			r.PlusLength = d.bool()
			r.Min, r.Max = d.i64(), d.i64()
			r.MinWhy, r.MaxWhy = d.str(), d.str()
			if d.err != nil {
				return
			}
		}
	}
}

func decodeRecord(d *dec, p *Plan) {
	r := &p.Record
	if n := d.count(4 + 8); n > 0 {
		r.Rules = make([]RuleCount, n)
		for i := range r.Rules {
			r.Rules[i] = RuleCount{d.str(), d.u64()}
		}
	}
	if n := d.count(4 + 4 + 4 + 8 + 8 + 1 + 4); n > 0 {
		r.Candidates = make([]Candidate, n)
		for i := range r.Candidates {
			r.Candidates[i] = Candidate{Subject: d.str(), Kernel: d.str(), Config: d.config(),
				Estimated: d.dur(), Measured: d.dur(), Chosen: d.bool(), Note: d.str()}
		}
	}
	r.Notes = d.strs()
	r.ChosenBy = d.str()
}
