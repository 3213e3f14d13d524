package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/vkc-project/vkc/tokenizer"
)

func init() {
	register(&command{
		name:    "template",
		usage:   "PATH --messages FILE.json [--add-generation-prompt] [--kwargs JSON] [--template NAME]",
		short:   "render a conversation in a model's chat template (tokenizer_config.json, a folder holding one, or a GGUF file) as transformers' apply_chat_template does",
		example: `vkc template model/ --messages chat.json --add-generation-prompt --kwargs '{"enable_thinking": false}'`,
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			messages := fs.String("messages", "", `a JSON list of messages, [{"role": "user", "content": "Hi"}, ...] (fields such as tool_calls and reasoning_content are passed to the template)`)
			genPrompt := fs.Bool("add-generation-prompt", false, "end with the header of the assistant's reply")
			kwargs := fs.String("kwargs", "", `a JSON object of further template variables, e.g. {"enable_thinking": false, "tools": [...]}`)
			name := fs.String("template", "", `one of the model's named templates ("tool_use", ...); by default "tool_use" when the kwargs give tools and the model has it, else the default`)
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one PATH (a tokenizer_config.json, a folder holding one, or a GGUF file)")
				}
				if *messages == "" {
					return usagef("--messages FILE.json is required")
				}
				data, err := os.ReadFile(*messages)
				if err != nil {
					return err
				}
				var msgs []tokenizer.Message
				if err := json.Unmarshal(data, &msgs); err != nil {
					return fmt.Errorf("%s: want a JSON list of {role, content, ...} objects: %w", *messages, err)
				}
				opt := tokenizer.ChatOptions{AddGenerationPrompt: *genPrompt, Template: *name}
				if *kwargs != "" {
					var kw map[string]json.RawMessage
					if err := json.Unmarshal([]byte(*kwargs), &kw); err != nil {
						return usagef("--kwargs: want a JSON object: %v", err)
					}
					opt.Kwargs = map[string]any{}
					for k, v := range kw {
						opt.Kwargs[k] = v
					}
				}
				chat, err := tokenizer.LoadChat(args[0])
				if err != nil {
					return err
				}
				text, err := chat.Render(msgs, opt)
				if err != nil {
					return err
				}
				_, err = io.WriteString(stdout, text)
				return err
			}
		},
	})
}
