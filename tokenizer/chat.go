package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Chat formats: the chat templates vkc recognises. A tokenizer_config.json (or GGUF) chat
// template is a Jinja program; vkc does not run Jinja. It recognises the common templates by
// their markers and renders one conversation turn — an optional system message and the user's
// message, then the assistant's header (transformers' add_generation_prompt) — the way those
// templates render it. A template of another kind is an error saying so; tools, documents,
// several turns and reasoning switches are not rendered.
const (
	// ChatML is <|im_start|>role\ncontent<|im_end|>\n (Qwen, SmolLM, many others). A system
	// message written as a literal in the template (Qwen2.5's "You are Qwen, ...") is used when
	// none is given.
	ChatML = "chatml"
	// Llama3 is <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> after the BOS
	// token, contents trimmed. Llama 3.1 and 3.2 templates (recognised by their "Cutting
	// Knowledge Date" line) always write the system header with that line and the date: their
	// literal default, or today's date when the template asks for strftime_now.
	Llama3 = "llama3"
	// Llama2 is <s>[INST] content [/INST], a system message in <<SYS>> tags when the template
	// has them (Llama 2) or before the user's message (Mistral).
	Llama2 = "llama2"
)

// ChatFormat is a recognised chat template.
type ChatFormat struct {
	// Kind is ChatML, Llama3 or Llama2.
	Kind string
	// EndOfTurn is the text of the token that ends the assistant's turn (<|im_end|>,
	// <|eot_id|>, the EOS token); generation stops at it.
	EndOfTurn string
	// DefaultSystem is the system message used when none is given ("" for none).
	DefaultSystem string
	// Date is the "Today Date" of Llama 3.1 and 3.2 templates (e.g. "26 Jul 2024"); "" for
	// templates without one.
	Date string

	bos     string
	sysTags bool // Llama 2: <<SYS>> tags
	strip   bool // Llama 2: contents stripped
	dated   bool // Llama 3.1/3.2: the system header is always written, with the date
}

var (
	chatMLDefaultSystem = regexp.MustCompile(`<\|im_start\|>system\\n([^'"\\{}]+)<\|im_end\|>`)
	llamaDate           = regexp.MustCompile(`set date_string = "([^"]+)"`)
)

// ParseChatTemplate recognises a chat template (the Jinja source); bos is the tokenizer's BOS
// token text, which Llama templates begin with. An empty template, or one of another kind, is an
// error naming the kinds vkc renders.
func ParseChatTemplate(tmpl, bos string) (*ChatFormat, error) {
	has := func(s ...string) bool {
		for _, x := range s {
			if !strings.Contains(tmpl, x) {
				return false
			}
		}
		return true
	}
	switch {
	case tmpl == "":
		return nil, fmt.Errorf("the model has no chat template (tokenizer_config.json's chat_template, or the GGUF file's tokenizer.chat_template)")
	case has("<|im_start|>", "<|im_end|>"):
		f := &ChatFormat{Kind: ChatML, EndOfTurn: "<|im_end|>"}
		if m := chatMLDefaultSystem.FindStringSubmatch(tmpl); m != nil {
			f.DefaultSystem = m[1]
		}
		return f, nil
	case has("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"):
		if bos == "" {
			bos = "<|begin_of_text|>"
		}
		f := &ChatFormat{Kind: Llama3, EndOfTurn: "<|eot_id|>", bos: bos}
		if has("Cutting Knowledge Date") {
			f.dated = true
			f.Date = "26 Jul 2024"
			if m := llamaDate.FindStringSubmatch(tmpl); m != nil {
				f.Date = m[1]
			}
			if has("strftime_now") {
				f.Date = time.Now().Format("02 Jan 2006")
			}
		}
		return f, nil
	case has("[INST]", "[/INST]"):
		if bos == "" {
			bos = "<s>"
		}
		return &ChatFormat{Kind: Llama2, EndOfTurn: "</s>", bos: bos, sysTags: has("<<SYS>>"), strip: has("strip()")}, nil
	}
	return nil, fmt.Errorf("the chat template is not one vkc renders (ChatML <|im_start|>, Llama 3 <|start_header_id|>, Llama 2 [INST]); vkc does not run Jinja templates: give the prompt already formatted, without --chat")
}

// Render writes one turn: system (or the default system message when "") and user, then the
// assistant's header, as the template renders messages [system?, user] with
// add_generation_prompt. The text holds the template's special tokens (BOS included) and is
// encoded without adding special tokens, as transformers' apply_chat_template does.
func (f *ChatFormat) Render(system, user string) string {
	if system == "" {
		system = f.DefaultSystem
	}
	var b strings.Builder
	switch f.Kind {
	case ChatML:
		if system != "" {
			b.WriteString("<|im_start|>system\n" + system + "<|im_end|>\n")
		}
		b.WriteString("<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n")
	case Llama3:
		b.WriteString(f.bos)
		if f.dated {
			b.WriteString("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: " + f.Date + "\n\n" +
				strings.TrimSpace(system) + "<|eot_id|>")
		} else if system != "" {
			b.WriteString("<|start_header_id|>system<|end_header_id|>\n\n" + strings.TrimSpace(system) + "<|eot_id|>")
		}
		b.WriteString("<|start_header_id|>user<|end_header_id|>\n\n" + strings.TrimSpace(user) + "<|eot_id|>")
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	case Llama2:
		if f.strip {
			system, user = strings.TrimSpace(system), strings.TrimSpace(user)
		}
		content := user
		switch {
		case system != "" && f.sysTags:
			content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + user
		case system != "":
			content = system + "\n\n" + user
		}
		b.WriteString(f.bos + "[INST] " + content + " [/INST]")
	}
	return b.String()
}

// ChatFormat recognises the tokenizer's chat template (see ParseChatTemplate).
func (t *Tokenizer) ChatFormat() (*ChatFormat, error) {
	bos := ""
	if t.bos >= 0 {
		bos, _ = t.Token(t.bos)
	}
	return ParseChatTemplate(t.chatTemplate, bos)
}
