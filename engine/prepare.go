package engine

import (
	"context"

	"github.com/vkc-project/vkc/runtime"
)

// GenerationFunctions lists the functions, at their run-time lengths, that a generation of
// maxTokens tokens (0: no limit) from a prompt of promptTokens tokens runs on a plan with lm's
// functions: the prefill at the lengths of its chunks, then the decode step (for the prompt's
// tail that fills no chunk, and the tokens after the first). promptTokens 0 (not known yet)
// lists the prefill at every length it has a variant for.
func GenerationFunctions(lm *LM, promptTokens, maxTokens int) []runtime.FunctionLength {
	var out []runtime.FunctionLength
	seen := map[runtime.FunctionLength]bool{}
	add := func(name string, n int) {
		fl := runtime.FunctionLength{Name: name, Length: n}
		if !seen[fl] {
			seen[fl] = true
			out = append(out, fl)
		}
	}
	pos := 0
	if p := lm.Prefill; p != nil {
		if promptTokens <= 0 {
			add(p.Function.Name, 0)
		}
		// As generate takes the prompt: chunks of at most Seq tokens while they fill the
		// function (or any number from MinSeq when its length is a run-time one).
		for promptTokens-pos >= p.MinSeq && (p.Bounded() || promptTokens-pos >= p.Seq) {
			n := min(promptTokens-pos, p.Seq)
			add(p.Function.Name, n)
			pos += n
		}
	}
	if pos < promptTokens || promptTokens <= 0 || maxTokens != 1 {
		add(lm.Decode.Function.Name, 1)
	}
	return out
}

// PromptTokens is the number of tokens Generate feeds for prompt with opts (the chat template
// applied when opts.Chat, BOS added as the tokenizer does): what PrepareGeneration wants to
// know before the generation starts.
func (m *Model) PromptTokens(prompt string, opts GenerateOptions) (int, error) {
	tok, err := m.tokenizerFor(opts)
	if err != nil {
		return 0, err
	}
	ids, _, err := encodePrompt(tok, prompt, opts)
	return len(ids), err
}

// PrepareGeneration makes ready the pipelines a generation of maxTokens tokens from a prompt of
// promptTokens tokens runs (GenerationFunctions; 0: not known), calling progress as it goes (see
// runtime.Executable.Prepare). A generation then spends its time on the prompt and the tokens,
// not on a driver compiling shaders at their first dispatch (Mesa's lavapipe does).
func (m *Model) PrepareGeneration(ctx context.Context, promptTokens, maxTokens int, progress func(done, total int)) (runtime.PrepareStats, error) {
	lm, err := CausalLM(m.Plan())
	if err != nil {
		return runtime.PrepareStats{}, err
	}
	return m.Executable.Prepare(ctx, runtime.PrepareOptions{Functions: GenerationFunctions(lm, promptTokens, maxTokens), Progress: progress})
}
