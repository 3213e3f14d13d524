package tokenizer

import (
	"encoding/json"
	"fmt"
)

// A postProcessor adds the special tokens of a single sequence (HF's PostProcessor with
// add_special_tokens; without it no post-processor changes the ids). Pairs of sequences are not
// supported: this package encodes one text at a time.
type postProcessor interface {
	process(ids []int32) []int32
}

type (
	// templatePost is TemplateProcessing's "single" template: special ids before and after $A.
	templatePost struct{ before, after []int32 }
	identityPost struct{} // ByteLevel: it only trims offsets
	sequencePost []postProcessor
)

func (p templatePost) process(ids []int32) []int32 {
	out := make([]int32, 0, len(p.before)+len(ids)+len(p.after))
	out = append(out, p.before...)
	out = append(out, ids...)
	return append(out, p.after...)
}

func (identityPost) process(ids []int32) []int32 { return ids }

func (s sequencePost) process(ids []int32) []int32 {
	for _, p := range s {
		ids = p.process(ids)
	}
	return ids
}

// tokenPair reads Bert/RobertaProcessing's ["[SEP]", 102].
func tokenPair(raw json.RawMessage, what, where string) (int32, error) {
	var pair []json.RawMessage
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return 0, fmt.Errorf("%s: %s: want [token, id], got %s", where, what, raw)
	}
	var id int32
	if err := json.Unmarshal(pair[1], &id); err != nil {
		return 0, fmt.Errorf("%s: %s: id: %v", where, what, err)
	}
	return id, nil
}

func parsePostProcessor(raw json.RawMessage, where string) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := stageType(raw, where)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		return identityPost{}, nil
	case "TemplateProcessing":
		var c struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				}
				Sequence *struct {
					ID string `json:"id"`
				}
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		var p templatePost
		seen := false
		for i, piece := range c.Single {
			switch {
			case piece.Sequence != nil && piece.SpecialToken == nil:
				if piece.Sequence.ID != "A" {
					return nil, fmt.Errorf("%s.single[%d]: sequence %q in the single template (only A exists)", where, i, piece.Sequence.ID)
				}
				if seen {
					return nil, fmt.Errorf("%s.single[%d]: $A appears twice", where, i)
				}
				seen = true
			case piece.SpecialToken != nil && piece.Sequence == nil:
				st, ok := c.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("%s.single[%d]: special token %q is not in special_tokens", where, i, piece.SpecialToken.ID)
				}
				if seen {
					p.after = append(p.after, st.IDs...)
				} else {
					p.before = append(p.before, st.IDs...)
				}
			default:
				return nil, fmt.Errorf("%s.single[%d]: want one of SpecialToken and Sequence", where, i)
			}
		}
		if !seen {
			return nil, fmt.Errorf("%s.single: the template has no $A", where)
		}
		return p, nil
	case "BertProcessing", "RobertaProcessing":
		var c struct {
			Sep json.RawMessage `json:"sep"`
			Cls json.RawMessage `json:"cls"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		sep, err := tokenPair(c.Sep, "sep", where)
		if err != nil {
			return nil, err
		}
		cls, err := tokenPair(c.Cls, "cls", where)
		if err != nil {
			return nil, err
		}
		return templatePost{before: []int32{cls}, after: []int32{sep}}, nil
	case "Sequence":
		var c struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := unmarshalStage(raw, where, &c); err != nil {
			return nil, err
		}
		var seq sequencePost
		for i, r := range c.Processors {
			p, err := parsePostProcessor(r, fmt.Sprintf("%s.processors[%d]", where, i))
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("%s: unknown post-processor type %q", where, typ)
}
