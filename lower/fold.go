package lower

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"
	"sync"

	"github.com/vkc-project/vkc/ir"
)

// FoldCache keeps the values of folded constant subgraphs by structure, so that lowering the
// same weights again (the other functions of a model, or the candidate graphs measured by a
// tuned compile) does not evaluate them again. Folding a model's weight casts, merged
// projections and transposes in the interpreter is most of a static compile's time; with the
// cache a second function or candidate pays only for subgraphs it alone has.
//
// A key covers the subgraph down to its parameters (by name) and constants (by value), so a
// cache is valid for one model's weights: share it only between lowerings of the same ir.Model.
// It is safe for concurrent use.
type FoldCache struct {
	mu     sync.Mutex
	vals   map[[32]byte]*blob
	hits   int
	seed   maphash.Seed
	hashes map[string]hashed // quickHash by the identity of a blob's pieces (see lowerer.quickHash)
}

// hashed is a cached hash with the pieces it is of: holding them keeps their memory from being
// reused by other bytes at the same address while the cache lives.
type hashed struct {
	h      uint64
	pieces [][]byte
}

// NewFoldCache returns an empty cache.
func NewFoldCache() *FoldCache {
	return &FoldCache{vals: map[[32]byte]*blob{}, seed: maphash.MakeSeed(), hashes: map[string]hashed{}}
}

// hash returns the cached hash of the blob whose type and pieces make up key, computing it with
// compute on a miss. Blobs are never written to and the cache keeps their pieces alive, so the
// identity of the bytes (address and length) stands for their content while it lives.
func (c *FoldCache) hash(key string, pieces [][]byte, compute func() uint64) uint64 {
	c.mu.Lock()
	e, ok := c.hashes[key]
	c.mu.Unlock()
	if ok {
		return e.h
	}
	h := compute()
	c.mu.Lock()
	c.hashes[key] = hashed{h, pieces}
	c.mu.Unlock()
	return h
}

func (c *FoldCache) get(k [32]byte) (*blob, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.vals[k]
	if ok {
		c.hits++
	}
	return v, ok
}

func (c *FoldCache) put(k [32]byte, v *blob) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vals[k] = v
}

// Hits counts the folded values taken from the cache.
func (c *FoldCache) Hits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

// structKeys hashes nodes by what they compute: op, attributes, result types and the keys of
// their arguments; a parameter by its name and type, a constant by its value. Other sources
// (inputs, state) are keyed by name too, though folded subgraphs never reach them.
type structKeys map[*ir.Node][32]byte

func (s structKeys) key(n *ir.Node) [32]byte {
	if k, ok := s[n]; ok {
		return k
	}
	h := sha256.New()
	h.Write([]byte(n.Op.String()))
	h.Write([]byte{0})
	h.Write([]byte(n.Attrs.Key()))
	h.Write([]byte{0})
	for _, t := range n.Outs {
		h.Write([]byte(t.String()))
		h.Write([]byte{0})
	}
	switch {
	case n.Op == ir.Const && n.Value != nil:
		h.Write(n.Value.Data)
	case n.Op.Info().Kind == ir.KindSource:
		h.Write([]byte(n.Name))
	}
	var b [8]byte
	for _, a := range n.Args {
		k := s.key(a.Node)
		h.Write(k[:])
		binary.LittleEndian.PutUint64(b[:], uint64(a.Out))
		h.Write(b[:])
	}
	var k [32]byte
	h.Sum(k[:0])
	s[n] = k
	return k
}
