package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/tokenizer/jinja"
)

// Chat templates. A model's chat template (tokenizer_config.json's chat_template, a
// chat_template.jinja beside it, or a GGUF file's tokenizer.chat_template) is a Jinja program
// that turns a conversation into the model's prompt text. Package jinja runs it as
// transformers' apply_chat_template does (Jinja2 with trim_blocks and lstrip_blocks in an
// immutable sandbox, raise_exception, strftime_now and tojson), with the variables transformers
// passes: messages, add_generation_prompt, tools and documents (None unless given), the special
// tokens of tokenizer_config.json (bos_token, eos_token, unk_token, sep_token, pad_token,
// cls_token, mask_token, additional_special_tokens; for a GGUF vocabulary bos_token, eos_token
// and unk_token from its ids), and the caller's keyword arguments (enable_thinking, ...).

// Message is one message of a conversation: a role ("system", "user", "assistant", "tool", or
// any other the template knows) and its text, with any other fields the template reads.
type Message struct {
	Role    string
	Content string
	// Fields are the message's other fields, JSON values in order: tool_calls,
	// reasoning_content, name, tool_call_id, ... A "content" field (null, or a list of parts)
	// replaces Content.
	Fields []Field

	keys []string // the fields of the JSON object it was decoded from, in order
}

// Field is a named JSON value.
type Field struct {
	Name  string
	Value json.RawMessage
}

// UnmarshalJSON reads a message object: "role" must be a string; a string "content" is
// Content; every other field (and a content that is not a string) is kept in Fields. The
// template sees the object's fields in their order, and no "content" when the object has none.
func (m *Message) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("a message must be a JSON object, not %s", data)
	}
	*m = Message{keys: []string{}}
	hasRole := false
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		k := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if contains(m.keys, k) {
			return fmt.Errorf("message field %q given twice", k)
		}
		m.keys = append(m.keys, k)
		switch k {
		case "role":
			if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '"' || json.Unmarshal(raw, &m.Role) != nil {
				return fmt.Errorf("message role: want a string, got %s", raw)
			}
			hasRole = true
			continue
		case "content":
			// (json.Unmarshal takes null into a string without an error: only a string is one.)
			var s string
			if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '"' && json.Unmarshal(raw, &s) == nil {
				m.Content = s
				continue
			}
		}
		m.Fields = append(m.Fields, Field{k, append(json.RawMessage(nil), raw...)})
	}
	if !hasRole {
		return errors.New("a message without a role")
	}
	return nil
}

// MarshalJSON writes the message as a JSON object (the inverse of UnmarshalJSON).
func (m Message) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range m.order() {
		if i > 0 {
			b.WriteByte(',')
		}
		kj, _ := json.Marshal(k)
		b.Write(kj)
		b.WriteByte(':')
		v, err := m.fieldJSON(k)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// order is the message's field names as the template sees them.
func (m *Message) order() []string {
	if m.keys != nil {
		return m.keys
	}
	keys := []string{"role", "content"}
	for _, f := range m.Fields {
		if !contains(keys, f.Name) {
			keys = append(keys, f.Name)
		}
	}
	return keys
}

func (m *Message) fieldJSON(k string) (json.RawMessage, error) {
	for _, f := range m.Fields {
		if f.Name == k {
			return f.Value, nil
		}
	}
	switch k {
	case "role":
		return json.Marshal(m.Role)
	case "content":
		return json.Marshal(m.Content)
	}
	return nil, fmt.Errorf("message has no field %q", k)
}

// value is the message as the template's dict.
func (m *Message) value() (*jinja.Dict, error) {
	d := jinja.NewDict()
	for _, k := range m.order() {
		switch raw, err := m.fieldJSON(k); {
		case err != nil:
			return nil, err
		case k == "role" && !m.hasField("role"):
			d.Set(k, m.Role)
		case k == "content" && !m.hasField("content"):
			d.Set(k, m.Content)
		default:
			v, err := jinja.DecodeJSON(raw)
			if err != nil {
				return nil, fmt.Errorf("message field %s: %w", k, err)
			}
			d.Set(k, v)
		}
	}
	return d, nil
}

func (m *Message) hasField(k string) bool {
	for _, f := range m.Fields {
		if f.Name == k {
			return true
		}
	}
	return false
}

// ChatOptions are apply_chat_template's other arguments.
type ChatOptions struct {
	// AddGenerationPrompt ends the text with the header of the assistant's next message (for
	// the templates that honour it).
	AddGenerationPrompt bool
	// Tools is the tools variable, a JSON list of tool schemas ({"type": "function",
	// "function": {...}}); nil is None.
	Tools json.RawMessage
	// Kwargs are further template variables by name (enable_thinking, documents,
	// date_string, ...): Go values (bool, string, numbers, slices, maps) or json.RawMessage.
	// They override Tools and the special tokens, as apply_chat_template's keyword arguments do.
	Kwargs map[string]any
	// Now is the moment strftime_now formats; zero is the current time.
	Now time.Time
	// Template names one of the model's named templates (apply_chat_template's
	// chat_template="tool_use"); "" picks as transformers does: "tool_use" when tools are
	// given and the model has it, else the default.
	Template string
}

// Chat is a compiled chat template with its tokenizer's special tokens. It is safe for
// concurrent use.
type Chat struct {
	tmpl    *jinja.Template // the default template; nil when the model has only named ones
	named   map[string]*jinja.Template
	special map[string]any
	// EndOfTurn is the text of the token that ends an assistant message in this template
	// (<|im_end|>, <|eot_id|>, <end_of_turn>, </s>, ...), found by rendering a probe
	// conversation; "" when it could not be found. Generation stops at it.
	EndOfTurn string
}

// NewChat compiles a chat template; name is what errors call it (a file and key). special
// are the special-token variables (bos_token, eos_token, additional_special_tokens, ...).
// A syntax error is a *jinja.Error with the line.
func NewChat(name, source string, special map[string]any) (*Chat, error) {
	if source == "" {
		return nil, fmt.Errorf("%s: the chat template is empty", name)
	}
	t, err := jinja.Compile(name, source)
	if err != nil {
		return nil, err
	}
	return &Chat{tmpl: t, special: special}, nil
}

// newChatNamed compiles a default template (source may be "") and named ones (a
// tokenizer_config.json's list of {name, template}, a GGUF file's tokenizer.chat_template.NAME).
func newChatNamed(name, source string, named map[string]string, special map[string]any) (*Chat, error) {
	c := &Chat{special: special}
	if source != "" {
		var err error
		if c.tmpl, err = jinja.Compile(name, source); err != nil {
			return nil, err
		}
	}
	for n, src := range named {
		t, err := jinja.Compile(name+" ("+n+")", src)
		if err != nil {
			return nil, err
		}
		if c.named == nil {
			c.named = map[string]*jinja.Template{}
		}
		c.named[n] = t
	}
	if c.tmpl == nil && c.named == nil {
		return nil, fmt.Errorf("%s: the chat template is empty", name)
	}
	return c, nil
}

// Templates lists the names of the model's named templates (besides the default), sorted.
func (c *Chat) Templates() []string {
	var n []string
	for k := range c.named {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// pick chooses the template of a rendering as transformers' get_chat_template does.
func (c *Chat) pick(opt ChatOptions, tools any) (*jinja.Template, error) {
	if opt.Template != "" {
		if opt.Template == "default" && c.tmpl != nil {
			return c.tmpl, nil
		}
		if t, ok := c.named[opt.Template]; ok {
			return t, nil
		}
		return nil, fmt.Errorf("the model has no chat template named %q (it has %s)", opt.Template, c.describe())
	}
	if t, ok := c.named["tool_use"]; ok && tools != nil {
		return t, nil
	}
	if c.tmpl == nil {
		return nil, fmt.Errorf("the model has several chat templates (%s) and no default: name one", c.describe())
	}
	return c.tmpl, nil
}

func (c *Chat) describe() string {
	names := c.Templates()
	if c.tmpl != nil {
		names = append([]string{"default"}, names...)
	}
	return strings.Join(names, ", ")
}

// Render renders a conversation: the prompt text, with the template's special tokens as text
// (BOS included when the template writes it). Encode it with Tokenizer.EncodeChat. An error of
// the template (its raise_exception, an undefined value) is a *jinja.Error naming the
// template and the line.
func (c *Chat) Render(msgs []Message, opt ChatOptions) (string, error) {
	list := make([]any, len(msgs))
	for i := range msgs {
		d, err := msgs[i].value()
		if err != nil {
			return "", fmt.Errorf("message %d: %w", i, err)
		}
		list[i] = d
	}
	vars := map[string]any{
		"messages":              list,
		"add_generation_prompt": opt.AddGenerationPrompt,
		"tools":                 nil,
		"documents":             nil,
	}
	if opt.Tools != nil {
		vars["tools"] = opt.Tools
	}
	for k, v := range c.special {
		vars[k] = v
	}
	for k, v := range opt.Kwargs {
		if k == "messages" {
			return "", errors.New("kwargs: messages is not a keyword argument")
		}
		vars[k] = v
	}
	var tools any = vars["tools"]
	if raw, ok := tools.(json.RawMessage); ok && string(bytes.TrimSpace(raw)) == "null" {
		tools = nil
	}
	tmpl, err := c.pick(opt, tools)
	if err != nil {
		return "", err
	}
	return tmpl.Render(vars, jinja.Options{Now: opt.Now})
}

// Chat compiles the tokenizer's chat template with its special tokens and finds its end of
// turn (once: later calls return the same Chat). A tokenizer without a template is an error
// saying where one would be.
func (t *Tokenizer) Chat() (*Chat, error) {
	t.chatOnce.Do(func() { t.chat, t.chatErr = t.compileChat() })
	return t.chat, t.chatErr
}

func (t *Tokenizer) compileChat() (*Chat, error) {
	if t.chatTemplate == "" && len(t.chatNamed) == 0 {
		return nil, errors.New("the model has no chat template (tokenizer_config.json's chat_template, chat_template.jinja, or the GGUF file's tokenizer.chat_template)")
	}
	name := t.chatSource
	if name == "" {
		name = "chat template"
	}
	c, err := newChatNamed(name, t.chatTemplate, t.chatNamed, t.chatVars())
	if err != nil {
		return nil, err
	}
	c.EndOfTurn = t.endOfTurn(c)
	return c, nil
}

// chatVars are the special-token variables: tokenizer_config.json's, else the BOS, EOS and
// UNK tokens the tokenizer knows by id.
func (t *Tokenizer) chatVars() map[string]any {
	if t.special != nil {
		return t.special
	}
	vars := map[string]any{}
	for _, x := range []struct {
		name string
		id   int32
	}{{"bos_token", t.bos}, {"eos_token", t.eos}, {"unk_token", t.unk}} {
		if x.id >= 0 {
			if s, ok := t.Token(x.id); ok {
				vars[x.name] = s
			}
		}
	}
	return vars
}

// endOfTurn renders a probe conversation (user, assistant) and returns the added token that
// directly follows the assistant's text (after white space), or the EOS token's text when
// none does.
func (t *Tokenizer) endOfTurn(c *Chat) string {
	const probe = "vkcprobeanswer"
	opt := ChatOptions{}
	if c.tmpl == nil {
		opt.Template = c.Templates()[0]
	}
	text, err := c.Render([]Message{{Role: "user", Content: "vkcprobequestion"}, {Role: "assistant", Content: probe}}, opt)
	if err == nil {
		if i := strings.LastIndex(text, probe); i >= 0 {
			rest := strings.TrimLeft(text[i+len(probe):], " \t\n")
			best := ""
			for _, a := range t.added {
				if strings.HasPrefix(rest, a.Content) && len(a.Content) > len(best) {
					best = a.Content
				}
			}
			if best != "" {
				return best
			}
		}
	}
	if t.eos >= 0 {
		s, _ := t.Token(t.eos)
		return s
	}
	return ""
}

// EncodeChat encodes a rendered chat prompt: its special-token text becomes those tokens and
// nothing is added, as transformers' apply_chat_template does, except that a tokenizer that
// adds a BOS token to its input (Llama 2's TemplateProcessing, a GGUF vocabulary with
// add_bos_token) gets it when the template did not write it itself, as llama.cpp does. So a
// template that writes bos_token is not given a second one.
func (t *Tokenizer) EncodeChat(text string) ([]int32, error) {
	ids, err := t.Encode(text, false)
	if err != nil {
		return nil, err
	}
	if t.addsBOS() && (len(ids) == 0 || ids[0] != t.bos) {
		ids = append([]int32{t.bos}, ids...)
	}
	return ids, nil
}

// addsBOS reports whether encoding with special tokens puts the BOS token first.
func (t *Tokenizer) addsBOS() bool {
	if t.post == nil || t.bos < 0 {
		return false
	}
	p := t.post.process([]int32{})
	return len(p) > 0 && p[0] == t.bos
}

// LoadChat reads a chat template with its special tokens from path: a tokenizer_config.json
// (its chat_template, else a chat_template.jinja beside it), a folder holding those, or a GGUF
// file (tokenizer.chat_template, with bos_token, eos_token and unk_token from its vocabulary).
// No tokenizer is built, so Chat.EndOfTurn is "" (Tokenizer.Chat finds it).
func LoadChat(path string) (*Chat, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() && isGGUF(path) {
		f, err := gguf.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		v, err := vocabFromGGUF(f)
		if err != nil {
			return nil, err
		}
		if v.ChatTemplate == "" && len(v.NamedChatTemplates) == 0 {
			return nil, fmt.Errorf("%s: no tokenizer.chat_template", path)
		}
		special := map[string]any{}
		for _, x := range []struct {
			name string
			id   int32
		}{{"bos_token", v.BOS}, {"eos_token", v.EOS}, {"unk_token", v.UNK}} {
			if x.id >= 0 && int(x.id) < len(v.Tokens) {
				special[x.name] = v.Tokens[x.id]
			}
		}
		return newChatNamed(path+" tokenizer.chat_template", v.ChatTemplate, v.NamedChatTemplates, special)
	}
	dir, cfgPath := path, filepath.Join(path, "tokenizer_config.json")
	if !st.IsDir() {
		dir, cfgPath = filepath.Dir(path), path
	}
	special := map[string]any{}
	tmpl, name := "", ""
	var named map[string]string
	cfg, err := os.ReadFile(cfgPath)
	switch {
	case err == nil:
		if special, err = specialVars(cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
		var c configJSON
		if err := json.Unmarshal(cfg, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
		if tmpl, named, err = configChatTemplate(c.ChatTemplate); err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
		name = cfgPath + " chat_template"
	case !os.IsNotExist(err) || !st.IsDir():
		return nil, err
	}
	if tmpl == "" && named == nil {
		jinjaPath := filepath.Join(dir, "chat_template.jinja")
		b, err := os.ReadFile(jinjaPath)
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("%s: no chat template (no chat_template in %s, no %s)", path, cfgPath, jinjaPath)
		}
		if err != nil {
			return nil, err
		}
		tmpl, name = string(b), jinjaPath
	}
	return newChatNamed(name, tmpl, named, special)
}
