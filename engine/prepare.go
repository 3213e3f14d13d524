package engine

import (
	"context"

	"github.com/vkc-project/vkc/runtime"
)

// GenerationFunctions lists the functions, at their run-time lengths, that a generation from a
// prompt of promptTokens tokens runs on a plan with lm's functions: the prefill at the lengths
// of its chunks, then the decode step. promptTokens 0 (not known yet) lists the prefill at every
// length it has a variant for.
func GenerationFunctions(lm *LM, promptTokens int) []runtime.FunctionLength {
	var out []runtime.FunctionLength
	seen := map[runtime.FunctionLength]bool{}
	add := func(name string, n int) {
		fl := runtime.FunctionLength{Name: name, Length: n}
		if !seen[fl] {
			seen[fl] = true
			out = append(out, fl)
		}
	}
	if p := lm.Prefill; p != nil {
		if promptTokens <= 0 {
			add(p.Function.Name, 0)
		}
		// As generate takes the prompt: chunks of at most Seq tokens while they fill the
		// function (or any number from MinSeq when its length is a run-time one).
		for pos := 0; promptTokens-pos >= p.MinSeq && (p.Bounded() || promptTokens-pos >= p.Seq); {
			n := min(promptTokens-pos, p.Seq)
			add(p.Function.Name, n)
			pos += n
		}
	}
	add(lm.Decode.Function.Name, 1)
	return out
}

// PrepareGeneration makes ready the pipelines a generation from a prompt of promptTokens tokens
// runs (GenerationFunctions; 0: the prompt's length is not known yet), calling progress as it
// goes (see runtime.Executable.Prepare). A generation then spends its time on the prompt and the
// tokens, not on a driver compiling shaders at their first dispatch (Mesa's lavapipe does).
func (m *Model) PrepareGeneration(ctx context.Context, promptTokens int, progress func(done, total int)) (runtime.PrepareStats, error) {
	lm, err := CausalLM(m.Plan())
	if err != nil {
		return runtime.PrepareStats{}, err
	}
	return m.Executable.Prepare(ctx, runtime.PrepareOptions{Functions: GenerationFunctions(lm, promptTokens), Progress: progress})
}
