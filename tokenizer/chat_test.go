package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/internal/oracles"
)

// TestChatFormatOracleTemplates renders the chat templates of the oracle's real
// tokenizer_config.json files; the expected texts are what those Jinja templates produce for
// [system?, user] with add_generation_prompt, worked by reading them.
func TestChatFormatOracleTemplates(t *testing.T) {
	dir := oracles.Dir(t, "tokenizers")
	tmpl := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name, "tokenizer_config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			ChatTemplate string `json:"chat_template"`
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		return c.ChatTemplate
	}
	for _, c := range []struct {
		name, bos, kind, eot, system, user, want string
	}{
		// Llama 3 (original release): bos_token, then each message's header and content | trim.
		{"llama3", "<|begin_of_text|>", Llama3, "<|eot_id|>", "", " Hello there \n",
			"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama3", "<|begin_of_text|>", Llama3, "<|eot_id|>", "Be brief.", "Hi",
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		// Qwen3: a system turn only when given, contents as they are, no default system message.
		{"qwen3", "", ChatML, "<|im_end|>", "", " Hello ",
			"<|im_start|>user\n Hello <|im_end|>\n<|im_start|>assistant\n"},
		{"qwen3", "", ChatML, "<|im_end|>", "Be brief.", "Hi",
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
	} {
		f, err := ParseChatTemplate(tmpl(c.name), c.bos)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if f.Kind != c.kind || f.EndOfTurn != c.eot || f.DefaultSystem != "" {
			t.Errorf("%s: %+v", c.name, f)
		}
		if got := f.Render(c.system, c.user); got != c.want {
			t.Errorf("%s: rendered %q, want %q", c.name, got, c.want)
		}
	}
}

// TestChatFormatKinds: templates written as the released models' are (abbreviated to the
// parts that matter): Qwen2.5's literal default system message, Llama 3.1's dated system header,
// Llama 2's <<SYS>> tags and stripped contents, Mistral's [INST] without tags; other templates
// are refused, naming what vkc renders.
func TestChatFormatKinds(t *testing.T) {
	qwen25 := `{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`
	llama31 := `{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}{{- "Cutting Knowledge Date: December 2023\n" }}{{- "Today Date: " + date_string + "\n\n" }}{{- system_message }}{{- "<|eot_id|>" }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}`
	llama2 := `{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\n' + messages[0]['content'] | trim + '\n<</SYS>>\n\n' %}{% endif %}{% for message in messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% endif %}{% endfor %}`
	mistral := `{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}`
	for _, c := range []struct {
		name, tmpl, bos, system, user, want, eot string
	}{
		{"qwen2.5", qwen25, "", "", "Hi", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>"},
		{"qwen2.5 system", qwen25, "", "Be brief.", "Hi", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>"},
		{"llama3.1", llama31, "<|begin_of_text|>", "", "Hi ", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
		{"llama3.1 system", llama31, "<|begin_of_text|>", "Be brief.", "Hi", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"},
		{"llama2", llama2, "<s>", "Be brief.", " Hi ", "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]", "</s>"},
		{"mistral", mistral, "<s>", "", "Hi", "<s>[INST] Hi [/INST]", "</s>"},
	} {
		f, err := ParseChatTemplate(c.tmpl, c.bos)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := f.Render(c.system, c.user); got != c.want || f.EndOfTurn != c.eot {
			t.Errorf("%s: rendered %q (end of turn %q), want %q", c.name, got, f.EndOfTurn, c.want)
		}
	}
	gemma := `{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}`
	for _, tmpl := range []string{gemma, ""} {
		if _, err := ParseChatTemplate(tmpl, "<bos>"); err == nil || !strings.Contains(err.Error(), "chat template") {
			t.Errorf("%q: error %v", tmpl, err)
		}
	}
}
