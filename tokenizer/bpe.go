package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// A model turns one pre-tokenized word into ids (HF's Model).
type model interface {
	tokenize(dst []int32, word string, sc *scratch) ([]int32, error)
	tokenID(tok string) (int32, bool)
	idToken(id int32) (string, bool)
	size() int // one more than the largest id
}

// bpeModel is HF's BPE model: a word starts as its characters (each a vocabulary token, or byte
// tokens <0xNN> with byte_fallback, or the unknown token), and the adjacent pair with the lowest
// merge rank is merged, leftmost first, until no pair has a merge.
type bpeModel struct {
	vocabTable
	merges       map[uint64]bpeMerge
	unk          string // the unknown token; "" for none
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	byteIDs      [256]int32 // <0xNN>, -1 where absent
	// byteChars[b] is the id of byte b's ByteLevel character; set (allByteChars) when all 256
	// are in the vocabulary and no affix applies, so a raw word's symbols are one per byte.
	byteChars    [256]int32
	allByteChars bool

	cache    wordCache // by word
	rawCache wordCache // by the unmapped text of a ByteLevel word (tokenizeRaw)
}

type bpeMerge struct{ rank, id int32 }

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// init sets the vocabulary and merges, checking that every merge's parts and result are in the
// vocabulary, as the Rust library does. merges[i] has rank i; a pair listed twice keeps its last
// rank (the Rust library collects them into a map).
func (m *bpeModel) init(vocab map[string]int32, merges [][2]string, where string) error {
	if err := m.vocabTable.init(vocab, where); err != nil {
		return err
	}
	return m.setMerges(merges, where)
}

// initList is init for a vocabulary given as a list by id (GGUF), whose strings may repeat:
// vocab maps each string to the id that encodes it.
func (m *bpeModel) initList(tokens []string, vocab map[string]int32, merges [][2]string, where string) error {
	m.vocabTable = vocabTable{vocab: vocab, tokens: tokens}
	return m.setMerges(merges, where)
}

func (m *bpeModel) setMerges(merges [][2]string, where string) error {
	m.merges = make(map[uint64]bpeMerge, len(merges))
	for i, mg := range merges {
		a, ok := m.vocab[mg[0]]
		if !ok {
			return fmt.Errorf("%s.merges[%d]: %q is not in the vocabulary", where, i, mg[0])
		}
		b, ok := m.vocab[mg[1]]
		if !ok {
			return fmt.Errorf("%s.merges[%d]: %q is not in the vocabulary", where, i, mg[1])
		}
		right := mg[1]
		if m.prefix != "" {
			right = strings.TrimPrefix(right, m.prefix)
		}
		id, ok := m.vocab[mg[0]+right]
		if !ok {
			return fmt.Errorf("%s.merges[%d]: the merge of %q and %q, %q, is not in the vocabulary", where, i, mg[0], mg[1], mg[0]+right)
		}
		m.merges[pairKey(a, b)] = bpeMerge{int32(i), id}
	}
	m.allByteChars = m.prefix == "" && m.suffix == ""
	for b := range m.byteIDs {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
		id, ok := m.vocab[byteToStr[b]]
		m.byteChars[b] = id
		m.allByteChars = m.allByteChars && ok
	}
	return nil
}

type bpeSym struct {
	id         int32
	prev, next int32
	gone       bool
}

type bpeCand struct{ rank, pos, id int32 }

func candLess(a, b bpeCand) bool { return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos }

// maxCachedWord bounds the words the cache keeps (the Rust library's MAX_LENGTH).
const maxCachedWord = 256

func (m *bpeModel) tokenize(dst []int32, w string, sc *scratch) ([]int32, error) {
	if w == "" {
		return dst, nil
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[w]; ok {
			return append(dst, id), nil
		}
	}
	if len(w) < maxCachedWord {
		if ids, ok := m.cache.get(w); ok {
			return append(dst, ids...), nil
		}
	}
	mark := len(dst)
	syms, err := m.initialSymbols(sc.syms[:0], w)
	if err != nil {
		return dst, err
	}
	dst = m.merge(dst, syms, sc)
	if len(w) < maxCachedWord {
		m.cache.put(strings.Clone(w), dst[mark:])
	}
	return dst, nil
}

// tokenizeRaw tokenizes the ByteLevel mapping of raw. Mapping here rather than in the
// pre-tokenizer lets the cache be keyed by the input's own text, so that a cached word costs no
// allocation.
func (m *bpeModel) tokenizeRaw(dst []int32, raw string, sc *scratch) ([]int32, error) {
	if raw == "" {
		return dst, nil
	}
	if len(raw) < maxCachedWord {
		if ids, ok := m.rawCache.get(raw); ok {
			return append(dst, ids...), nil
		}
	}
	mark := len(dst)
	sc.buf = appendByteLevel(sc.buf[:0], raw)
	id, whole := int32(0), false
	if m.ignoreMerges {
		id, whole = m.vocab[string(sc.buf)]
	}
	switch {
	case whole:
		dst = append(dst, id)
	case m.allByteChars:
		syms := sc.syms[:0]
		for i := 0; i < len(raw); i++ {
			n := int32(len(syms))
			syms = append(syms, bpeSym{id: m.byteChars[raw[i]], prev: n - 1, next: n + 1})
		}
		syms[len(syms)-1].next = -1
		dst = m.merge(dst, syms, sc)
	default:
		syms, err := m.initialSymbols(sc.syms[:0], string(sc.buf))
		if err != nil {
			return dst, err
		}
		dst = m.merge(dst, syms, sc)
	}
	if len(raw) < maxCachedWord {
		m.rawCache.put(strings.Clone(raw), dst[mark:])
	}
	return dst, nil
}

// merge merges syms and appends the ids that remain.
func (m *bpeModel) merge(dst []int32, syms []bpeSym, sc *scratch) []int32 {
	syms = m.mergeAll(syms, sc)
	for i := range syms {
		if !syms[i].gone {
			dst = append(dst, syms[i].id)
		}
	}
	sc.syms = syms[:0]
	return dst
}

// initialSymbols splits w into its characters' ids (HF's merge_word before merging).
func (m *bpeModel) initialSymbols(syms []bpeSym, w string) ([]bpeSym, error) {
	add := func(id int32) {
		n := int32(len(syms))
		syms = append(syms, bpeSym{id: id, prev: n - 1, next: n + 1})
	}
	unkID := int32(-1) // a pending unknown token (fused over its unknown neighbours with fuse_unk)
	var buf []byte
	for i := 0; i < len(w); {
		_, size := utf8.DecodeRuneInString(w[i:])
		s := w[i : i+size]
		if i > 0 && m.prefix != "" || i+size == len(w) && m.suffix != "" {
			buf = buf[:0]
			if i > 0 {
				buf = append(buf, m.prefix...)
			}
			buf = append(buf, s...)
			if i+size == len(w) {
				buf = append(buf, m.suffix...)
			}
			s = string(buf)
		}
		i += size
		if id, ok := m.vocab[s]; ok {
			if unkID >= 0 {
				add(unkID)
				unkID = -1
			}
			add(id)
			continue
		}
		if m.byteFallback {
			all := true
			for j := 0; j < len(s); j++ {
				if m.byteIDs[s[j]] < 0 {
					all = false
					break
				}
			}
			if all {
				for j := 0; j < len(s); j++ {
					add(m.byteIDs[s[j]])
				}
				continue
			}
		}
		if m.unk == "" {
			continue // no unknown token: the Rust library drops the character
		}
		id, ok := m.vocab[m.unk]
		if !ok {
			return nil, fmt.Errorf("unknown token %q is not in the vocabulary", m.unk)
		}
		if unkID >= 0 && !m.fuseUnk {
			add(unkID)
		}
		unkID = id
	}
	if unkID >= 0 {
		add(unkID)
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	return syms, nil
}

// mergeAll applies the merges with a priority queue of candidate pairs, as HF's Word::merge_all
// does: a popped candidate that no longer matches the pair at its position is stale and skipped.
func (m *bpeModel) mergeAll(syms []bpeSym, sc *scratch) []bpeSym {
	if len(syms) < 2 {
		return syms
	}
	h := sc.heap[:0]
	push := func(c bpeCand) {
		h = append(h, c)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !candLess(h[i], h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	pop := func() bpeCand {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for i := 0; ; {
			l, r, s := 2*i+1, 2*i+2, i
			if l < len(h) && candLess(h[l], h[s]) {
				s = l
			}
			if r < len(h) && candLess(h[r], h[s]) {
				s = r
			}
			if s == i {
				break
			}
			h[i], h[s] = h[s], h[i]
			i = s
		}
		return top
	}
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			push(bpeCand{mg.rank, int32(i), mg.id})
		}
	}
	for len(h) > 0 {
		top := pop()
		cur := &syms[top.pos]
		if cur.gone || cur.next < 0 {
			continue
		}
		right := &syms[cur.next]
		mg, ok := m.merges[pairKey(cur.id, right.id)]
		if !ok || mg.id != top.id {
			continue // stale
		}
		cur.id = top.id
		right.gone = true
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mg, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				push(bpeCand{mg.rank, cur.prev, mg.id})
			}
		}
		if cur.next >= 0 {
			if mg, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				push(bpeCand{mg.rank, top.pos, mg.id})
			}
		}
	}
	sc.heap = h[:0]
	return syms
}

// wordCache remembers the ids of words already merged. It stops growing at maxCacheWords
// entries (as the Rust library's cache does) rather than evicting.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const maxCacheWords = 1 << 17

func (c *wordCache) get(w string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[w]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string][]int32{}
	}
	if len(c.m) < maxCacheWords {
		c.m[w] = append([]int32(nil), ids...)
	}
	c.mu.Unlock()
}
