package vkc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/runtime"
)

// TestRunChecksInputRanges compiles tinyllama (vocab 256, KV caches of 128 rows, prefill of 1 to
// 64 tokens, here 16) and runs its plan through the library API with token ids and positions the interpreter
// rejects: each run fails with ErrInputRange naming the input, the value and the bound, where
// the kernels would have read past the embedding table or written past the caches.
func TestRunChecksInputRanges(t *testing.T) {
	d := device(t)
	m := parseExample(t, "tinyllama")
	p, _ := compileExample(t, m, Options{Target: targetOf(d)})
	exe := roundTrip(t, d, p)
	ctx := context.Background()
	tokens := func(v ...int32) []byte {
		for len(v) < 16 {
			v = append(v, 1)
		}
		return engine.Int32Bytes(v...)
	}
	for _, tc := range []struct {
		fn          string
		tokens, pos []byte
		want        string // "" runs
	}{
		{"prefill", tokens(1, 2, 255), engine.Int32Bytes(0), ""},
		{"prefill", tokens(), engine.Int32Bytes(112), ""},
		{"decode", engine.Int32Bytes(7), engine.Int32Bytes(127), ""},
		{"prefill", tokens(1, 256), engine.Int32Bytes(0), "input tokens[1] is 256: it must be at most 255"},
		{"prefill", tokens(-5), engine.Int32Bytes(0), "input tokens[0] is -5: it must be at least 0"},
		{"prefill", tokens(), engine.Int32Bytes(-1), "input pos is -1: it must be at least 0"},
		{"prefill", tokens(), engine.Int32Bytes(113), "input pos is 113, seq is 16: pos + seq = 129 must be at most 128"},
		{"prefill", engine.Int32Bytes(1, 2, 3), engine.Int32Bytes(125), ""},
		{"prefill", engine.Int32Bytes(1, 2, 3), engine.Int32Bytes(126), "input pos is 126, seq is 3: pos + seq = 129 must be at most 128"},
		{"decode", engine.Int32Bytes(7), engine.Int32Bytes(128), "input pos is 128: it must be at most 127"},
		{"decode", engine.Int32Bytes(1 << 30), engine.Int32Bytes(0), "input tokens[0] is 1073741824"},
	} {
		_, err := exe.Run(ctx, tc.fn, map[string][]byte{"tokens": tc.tokens, "pos": tc.pos})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %v at %v: %v", tc.fn, engine.Int32s(tc.tokens), engine.Int32s(tc.pos), err)
		case tc.want != "" && (!errors.Is(err, runtime.ErrInputRange) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %v at %v: got %v, want ErrInputRange with %q", tc.fn, engine.Int32s(tc.tokens), engine.Int32s(tc.pos), err, tc.want)
		}
	}
}
