package engine

import (
	"github.com/vkc-project/vkc/tokenizer"
)

// renderChat renders msgs with tok's chat template (run as transformers runs it, see
// tokenizer.Chat) and the generation prompt, and returns the text of the token that ends the
// assistant's turn.
func renderChat(tok *tokenizer.Tokenizer, msgs []Message) (string, string, error) {
	chat, err := tok.Chat()
	if err != nil {
		return "", "", err
	}
	tm := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		tm[i] = tokenizer.Message{Role: m.Role, Content: m.Content}
	}
	text, err := chat.Render(tm, tokenizer.ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		return "", "", err
	}
	return text, chat.EndOfTurn, nil
}
