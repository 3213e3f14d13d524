package ir

import (
	"fmt"
	"io"

	"github.com/vkc-project/vkc/internal/regular"
	"github.com/vkc-project/vkc/ir/gguf"
)

// weightFile is a file of named tensors the model loader reads parameters from: safetensors or
// GGUF (told apart by their first bytes, not their names).
type weightFile interface {
	Name() string
	Has(name string) bool
	Read(name string) (*Tensor, error)
	// Map memory-maps the file for View (nil where mmap is not available); View returns a
	// tensor aliasing the mapping, or read into memory when there is none.
	Map() (*Mapping, error)
	View(name string) (*Tensor, error)
	Similar(name string) string
	Close() error
}

func (f *SafetensorsFile) Name() string { return f.Path }

// Has reports whether the file has a tensor of that name.
func (f *SafetensorsFile) Has(name string) bool { _, ok := f.Entries[name]; return ok }

// openWeightFile opens a safetensors or GGUF file.
func openWeightFile(path string) (weightFile, error) {
	isGGUF, err := IsGGUF(path)
	if err != nil {
		return nil, err
	}
	if isGGUF {
		g, err := gguf.Open(path)
		if err != nil {
			return nil, err
		}
		return &ggufWeights{f: g}, nil
	}
	return OpenSafetensors(path)
}

// IsGGUF reports whether the file at path starts with GGUF's magic.
func IsGGUF(path string) (bool, error) {
	f, err := regular.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var b [4]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		return false, nil
	}
	return string(b[:]) == gguf.Magic, nil
}

// ggufWeights reads parameters from a GGUF file: a tensor's dtype is its ggml type (f32, f16,
// bf16 or a block format, kept as ggml's blocks) and its shape ggml's ne reversed.
type ggufWeights struct {
	f  *gguf.File
	mp *Mapping // a mapping of the file of the loader's own, which the model keeps (Map)
}

func (g *ggufWeights) Name() string         { return g.f.Path }
func (g *ggufWeights) Has(name string) bool { _, ok := g.f.Tensor(name); return ok }
func (g *ggufWeights) Close() error         { return g.f.Close() }

func (g *ggufWeights) Read(name string) (*Tensor, error) {
	return ReadGGUFTensor(g.f, name)
}

// Map maps the file once more, for the model to keep: the gguf.File's own mapping ends with
// Close, when loading is done.
func (g *ggufWeights) Map() (*Mapping, error) {
	f, err := regular.Open(g.f.Path)
	if err != nil {
		return nil, err
	}
	mp, err := mapFile(f)
	if err != nil || mp == nil {
		f.Close()
		return nil, err
	}
	g.mp = mp
	return mp, nil
}

// View is Read without the copy when the file is mapped (Map).
func (g *ggufWeights) View(name string) (*Tensor, error) {
	if g.mp == nil {
		return g.Read(name)
	}
	b, err := g.f.Data(name)
	if err != nil {
		return nil, err
	}
	t, err := ggufType(g.f, name, len(b))
	if err != nil {
		return nil, err
	}
	ti, _ := g.f.Tensor(name)
	if ti.Offset < 0 || ti.Offset+ti.Size > int64(len(g.mp.Data)) {
		return nil, fmt.Errorf("%s: tensor %s lies outside the file", g.f.Path, name)
	}
	return &Tensor{Type: t, Data: g.mp.Data[ti.Offset : ti.Offset+ti.Size : ti.Offset+ti.Size]}, nil
}

// ReadGGUFTensor copies the named tensor of a GGUF file into a Tensor (block formats stay
// blocks; shape ne reversed, outermost first).
func ReadGGUFTensor(f *gguf.File, name string) (*Tensor, error) {
	b, err := f.Data(name)
	if err != nil {
		return nil, err
	}
	t, err := ggufType(f, name, len(b))
	if err != nil {
		return nil, err
	}
	return &Tensor{Type: t, Data: append([]byte(nil), b...)}, nil
}

// ggufType is the ir type of a GGUF tensor of n bytes.
func ggufType(f *gguf.File, name string, n int) (Type, error) {
	ti, _ := f.Tensor(name)
	d, ok := DTypeOfFormat(ti.Format)
	if !ok {
		return Type{}, fmt.Errorf("%s: tensor %s has type %s, which has no ir dtype", f.Path, name, ti.TypeName())
	}
	t := Type{DType: d, Shape: Shape(ti.Shape())}
	if len(t.Shape) == 0 {
		t.Shape = Shape{}
	}
	if t.Bytes() != n {
		return Type{}, fmt.Errorf("%s: tensor %s: %s needs %d bytes, the file gives %d", f.Path, name, t, t.Bytes(), n)
	}
	return t, nil
}

func (g *ggufWeights) Similar(name string) string {
	best, bestN := "", 0
	for _, k := range g.f.Names() {
		n := 0
		for n < len(k) && n < len(name) && k[len(k)-1-n] == name[len(name)-1-n] {
			n++
		}
		if n > bestN {
			best, bestN = k, n
		}
	}
	if bestN < 4 {
		return ""
	}
	return fmt.Sprintf(" (it has %q)", best)
}
