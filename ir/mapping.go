package ir

import (
	"errors"
	"os"
	"unsafe"
)

// Mapping is a weight file memory-mapped read-only, whose bytes a model's weight tensors alias
// (Tensor.Data is a slice of Data): loading a model then costs no copy, and the operating system
// pages the weights in as they are read. File is the same file open for reading by offset: a
// writer that streams the weights elsewhere (a plan) reads them through it, so the bytes pass
// through a small buffer and the page cache instead of becoming resident in the process.
type Mapping struct {
	Data   []byte
	File   *os.File
	Offset int64 // the file offset of Data[0]
	unmap  func() error
}

// Close unmaps the file and closes it. Tensors aliasing the mapping must not be used after it
// (reading one faults).
func (mp *Mapping) Close() error {
	var err error
	if mp.unmap != nil {
		err = mp.unmap()
		mp.unmap = nil
	}
	if mp.File != nil {
		err = errors.Join(err, mp.File.Close())
		mp.File = nil
	}
	mp.Data = nil
	return err
}

// contains reports where b lies in the mapping, if it does.
func (mp *Mapping) contains(b []byte) (int64, bool) {
	if len(b) == 0 || len(mp.Data) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mp.Data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p-base > uintptr(len(mp.Data)) || uintptr(len(b)) > uintptr(len(mp.Data))-(p-base) {
		return 0, false
	}
	return mp.Offset + int64(p-base), true
}

// AddMapping records a mapping whose bytes the model's weights alias, so that Close releases it
// and WeightFile finds it (importers that map a file of their own use it).
func (m *Model) AddMapping(mp *Mapping) { m.mappings = append(m.mappings, mp) }

// WeightFile reports whether b (a weight tensor's bytes, or part of them) lies in a file mapped
// for this model's weights, and where: the open file and the offset of b[0] in it. Lowering
// uses it to write such bytes into a plan by reading the file, not the mapping.
func (m *Model) WeightFile(b []byte) (*os.File, int64, bool) {
	for _, mp := range m.mappings {
		if off, ok := mp.contains(b); ok && mp.File != nil {
			return mp.File, off, true
		}
	}
	return nil, 0, false
}

// Close releases the files the model's weights are mapped from (see Mapping). A model whose
// weights were generated or read into memory holds none, and Close does nothing. Without Close
// the mappings live as long as the process; after it the weights, and any plan compiled from
// them that was not yet written, must not be used.
func (m *Model) Close() error {
	var err error
	for _, mp := range m.mappings {
		err = errors.Join(err, mp.Close())
	}
	m.mappings = nil
	return err
}
