package engine

import (
	"fmt"
	"strings"

	"github.com/vkc-project/vkc/tokenizer"
)

// renderChat renders msgs with tok's chat template and the generation prompt, and returns the
// text of the token that ends the assistant's turn.
//
// The template is recognised (tokenizer.ParseChatTemplate), not run: ChatML and Llama 3 render
// any number of turns as their templates write plain-text messages; Llama 2 renders one turn.
func renderChat(tok *tokenizer.Tokenizer, msgs []Message) (string, string, error) {
	cf, err := tok.ChatFormat()
	if err != nil {
		return "", "", err
	}
	system := ""
	rest := msgs
	if msgs[0].Role == "system" {
		system, rest = msgs[0].Content, msgs[1:]
	}
	for i, m := range rest {
		want := "user"
		if i%2 == 1 {
			want = "assistant"
		}
		if m.Role != want {
			return "", "", fmt.Errorf("message %d has role %q, want %q (an optional system message, then user and assistant in turn, ending with the user's)", i+len(msgs)-len(rest), m.Role, want)
		}
	}
	if len(rest) == 0 || len(rest)%2 == 0 {
		return "", "", fmt.Errorf("the conversation must end with a user message (it has %d messages after the system message)", len(rest))
	}
	// The first turn as the format renders it, then each further pair.
	var b strings.Builder
	first := cf.Render(system, rest[0].Content)
	if len(rest) == 1 {
		return first, cf.EndOfTurn, nil
	}
	switch cf.Kind {
	case tokenizer.ChatML:
		b.WriteString(first)
		for i := 1; i < len(rest); i += 2 {
			b.WriteString(rest[i].Content + "<|im_end|>\n<|im_start|>user\n" + rest[i+1].Content + "<|im_end|>\n<|im_start|>assistant\n")
		}
	case tokenizer.Llama3:
		b.WriteString(first)
		for i := 1; i < len(rest); i += 2 {
			b.WriteString(strings.TrimSpace(rest[i].Content) + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n" +
				strings.TrimSpace(rest[i+1].Content) + "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
		}
	default:
		return "", "", fmt.Errorf("vkc renders one turn of a %s chat template (system and user); this conversation has %d", cf.Kind, (len(rest)+1)/2)
	}
	return b.String(), cf.EndOfTurn, nil
}
