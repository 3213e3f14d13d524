package tokenizer

import "unicode/utf8"

// GPT-2's byte-to-character table (bytes_to_unicode): every byte becomes a printable character so
// that a byte-level vocabulary can be written as text. The printable bytes '!'..'~', '¡'..'¬' and
// '®'..'ÿ' stand for themselves; the other 68 take U+0100 onwards, in byte order.
var (
	byteToRune [256]rune
	byteToStr  [256]string // byteToRune as UTF-8
	runeToByte = map[rune]byte{}
)

func init() {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		byteToStr[b] = string(byteToRune[b])
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// appendByteLevel appends s with every byte replaced by its character.
func appendByteLevel(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = utf8.AppendRune(dst, byteToRune[s[i]])
	}
	return dst
}

// byteLevelDecode maps the characters of token back to bytes; a token with a character outside
// the table stands for its own UTF-8 bytes (as HF's ByteLevel decoder does).
func byteLevelDecode(dst []byte, token string) []byte {
	mark := len(dst)
	for _, r := range token {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:mark], token...)
		}
		dst = append(dst, b)
	}
	return dst
}

// gpt2Pattern is the split of the ByteLevel pre-tokenizer when use_regex is set (the Rust
// library's built-in GPT-2 pattern).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

var gpt2Regex = mustCompileRegex(gpt2Pattern)
