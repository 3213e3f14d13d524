package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"unicode/utf8"
)

// unigramModel is HF's Unigram model (SentencePiece's unigram language model): a word is cut
// into the pieces whose scores (log probabilities) sum highest, found by Viterbi over the
// word's bytes as the Rust library's encode_optimized does:
//   - at each character boundary, every piece that starts there (a prefix search over all the
//     vocabulary's strings, special ones included) extends the best path ending there; a
//     candidate replaces the best path into its end only with a strictly higher score, so of
//     equal scores the one found first (the earliest start, i.e. the longest last piece) stays;
//   - where no piece is exactly the next character, the unknown token covers that character
//     with the score min_score - 10 (min_score is the lowest in the vocabulary);
//   - scores add in float64;
//   - going back along the best path, consecutive unknown pieces are fused into one (fuse_unk,
//     always on for Unigram); a fused piece, not being in the vocabulary, becomes the byte
//     tokens <0xNN> of its bytes with byte_fallback (when all exist), else the unknown token.
type unigramModel struct {
	vocabTable
	scores       []float64
	unk          int32 // -1: none
	byteFallback bool
	minScore     float64
	trie         pieceTrie
}

// unigramUnkPenalty is kUnkPenalty of SentencePiece (and the Rust library): the unknown
// token's score is this much below the lowest piece score.
const unigramUnkPenalty = 10.0

// newUnigram builds the model from pieces and scores in id order; unk is the unknown token's
// id (-1: none).
func newUnigram(pieces []string, scores []float64, unk int32, byteFallback bool, where string) (*unigramModel, error) {
	if len(pieces) == 0 {
		return nil, fmt.Errorf("%s.vocab: empty", where)
	}
	if unk >= int32(len(pieces)) || unk < -1 {
		return nil, fmt.Errorf("%s.unk_id: %d is outside the %d pieces", where, unk, len(pieces))
	}
	m := &unigramModel{scores: scores, unk: unk, byteFallback: byteFallback, minScore: math.Inf(1)}
	m.vocabTable = vocabTable{vocab: make(map[string]int32, len(pieces)), tokens: pieces}
	for i, p := range pieces {
		if !utf8.ValidString(p) {
			return nil, fmt.Errorf("%s.vocab[%d]: %q is not valid UTF-8", where, i, p)
		}
		if math.IsNaN(scores[i]) || math.IsInf(scores[i], 0) {
			return nil, fmt.Errorf("%s.vocab[%d]: score %v", where, i, scores[i])
		}
		m.vocab[p] = int32(i) // a repeated piece keeps its last id, as the Rust library's map does
		m.minScore = math.Min(m.minScore, scores[i])
	}
	m.trie = buildPieceTrie(m.vocab)
	return m, nil
}

// parseUnigram reads a Unigram model of tokenizer.json: vocab [[piece, score], ...], unk_id
// (null: none) and byte_fallback.
func parseUnigram(c *modelJSON, where string) (*unigramModel, error) {
	if !c.Vocab.isList {
		return nil, fmt.Errorf("%s.vocab: want a list of [piece, score] for Unigram", where)
	}
	var list [][2]json.RawMessage
	if err := json.Unmarshal(c.Vocab.raw, &list); err != nil {
		return nil, fmt.Errorf("%s.vocab: want a list of [piece, score]: %v", where, err)
	}
	pieces := make([]string, len(list))
	scores := make([]float64, len(list))
	for i, e := range list {
		if err := json.Unmarshal(e[0], &pieces[i]); err != nil {
			return nil, fmt.Errorf("%s.vocab[%d]: piece: %v", where, i, err)
		}
		if err := json.Unmarshal(e[1], &scores[i]); err != nil {
			return nil, fmt.Errorf("%s.vocab[%d]: score: %v", where, i, err)
		}
	}
	unk := int32(-1)
	if c.UnkID != nil {
		unk = int32(*c.UnkID)
		if *c.UnkID < 0 || *c.UnkID >= len(pieces) {
			return nil, fmt.Errorf("%s.unk_id: %d is outside the %d pieces", where, *c.UnkID, len(pieces))
		}
	}
	return newUnigram(pieces, scores, unk, c.ByteFallback, where)
}

// unigramNode is the best path ending at a byte position.
type unigramNode struct {
	score float64
	start int32 // -1: not reached yet
	id    int32
}

func (m *unigramModel) tokenize(dst []int32, word string, _ *scratch) ([]int32, error) {
	if word == "" {
		return dst, nil
	}
	n := len(word)
	best := make([]unigramNode, n+1)
	for i := range best {
		best[i].start = -1
	}
	best[0].start = 0
	unkScore := m.minScore - unigramUnkPenalty
	for start := 0; start < n; {
		_, mblen := utf8.DecodeRuneInString(word[start:])
		here := best[start].score
		single := false
		m.trie.prefixes(word[start:], func(length int, id int32) {
			end := start + length
			s := m.scores[id] + here
			if best[end].start < 0 || s > best[end].score {
				best[end] = unigramNode{s, int32(start), id}
			}
			if length == mblen {
				single = true
			}
		})
		if !single {
			if m.unk < 0 {
				return dst, fmt.Errorf("Unigram: %q has no piece and the model has no unknown token", word[start:start+mblen])
			}
			end := start + mblen
			s := unkScore + here
			if best[end].start < 0 || s > best[end].score {
				best[end] = unigramNode{s, int32(start), m.unk}
			}
		}
		start += mblen
	}
	// Back along the best path: pieces in reverse, consecutive unknowns fused.
	type piece struct{ start, end int }
	var pieces []piece
	for end := n; end > 0; {
		nd := best[end]
		start := int(nd.start)
		if nd.id == m.unk && len(pieces) > 0 && pieces[len(pieces)-1].start == end && best[pieces[len(pieces)-1].end].id == m.unk {
			pieces[len(pieces)-1].start = start
		} else {
			pieces = append(pieces, piece{start, end})
		}
		end = start
	}
	for i := len(pieces) - 1; i >= 0; i-- {
		s := word[pieces[i].start:pieces[i].end]
		if id, ok := m.vocab[s]; ok {
			dst = append(dst, id)
			continue
		}
		if m.byteFallback {
			mark := len(dst)
			ok := true
			for j := 0; j < len(s); j++ {
				id, found := m.vocab[byteTokenName[s[j]]]
				if !found {
					ok = false
					break
				}
				dst = append(dst, id)
			}
			if ok {
				continue
			}
			dst = dst[:mark]
		}
		if m.unk < 0 {
			return dst, fmt.Errorf("Unigram: %q is not in the vocabulary and the model has no unknown token", s)
		}
		dst = append(dst, m.unk)
	}
	return dst, nil
}

// byteTokenName[b] is "<0xNN>", the byte token of b.
var byteTokenName = func() (n [256]string) {
	for b := range n {
		n[b] = fmt.Sprintf("<0x%02X>", b)
	}
	return
}()

// pieceTrie finds every vocabulary string that is a prefix of a text: a byte trie flattened
// into arrays, each node's children sorted by byte.
type pieceTrie struct {
	first, count []int32 // a node's children: edges[first : first+count]
	id           []int32 // the piece ending at the node, -1 for none
	label        []byte  // the edge byte into a node
	child        []int32 // edges: child node ids, sorted by label within a node
}

func buildPieceTrie(vocab map[string]int32) pieceTrie {
	type tmpNode struct {
		kids map[byte]int32
		id   int32
	}
	nodes := []tmpNode{{id: -1}}
	for s, id := range vocab {
		cur := int32(0)
		for i := 0; i < len(s); i++ {
			if nodes[cur].kids == nil {
				nodes[cur].kids = map[byte]int32{}
			}
			nxt, ok := nodes[cur].kids[s[i]]
			if !ok {
				nxt = int32(len(nodes))
				nodes = append(nodes, tmpNode{id: -1})
				nodes[cur].kids[s[i]] = nxt
			}
			cur = nxt
		}
		if s != "" {
			nodes[cur].id = id
		}
	}
	t := pieceTrie{first: make([]int32, len(nodes)), count: make([]int32, len(nodes)), id: make([]int32, len(nodes)), label: make([]byte, len(nodes))}
	for i, nd := range nodes {
		t.id[i] = nd.id
		t.first[i] = int32(len(t.child))
		t.count[i] = int32(len(nd.kids))
		keys := make([]int, 0, len(nd.kids))
		for b := range nd.kids {
			keys = append(keys, int(b))
		}
		sort.Ints(keys)
		for _, b := range keys {
			c := nd.kids[byte(b)]
			t.child = append(t.child, c)
			t.label[c] = byte(b)
		}
	}
	return t
}

// prefixes calls f(length, id) for every piece that is a prefix of s, shortest first.
func (t *pieceTrie) prefixes(s string, f func(length int, id int32)) {
	cur := int32(0)
	for i := 0; i < len(s); i++ {
		lo, hi := t.first[cur], t.first[cur]+t.count[cur]
		next := int32(-1)
		for lo < hi {
			mid := (lo + hi) / 2
			c := t.child[mid]
			switch l := t.label[c]; {
			case l == s[i]:
				next = c
				lo = hi
			case l < s[i]:
				lo = mid + 1
			default:
				hi = mid
			}
		}
		if next < 0 {
			return
		}
		cur = next
		if t.id[cur] >= 0 {
			f(i+1, t.id[cur])
		}
	}
}
