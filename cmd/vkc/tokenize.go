package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/vkc-project/vkc/tokenizer"
)

func init() {
	register(&command{
		name:    "tokenize",
		usage:   "--tokenizer FILE (--text T | --file F) [--no-special] [--json]  |  --tokenizer FILE --decode 1,2,3 [--skip-special] [--json]",
		short:   "encode text into token ids (or decode ids into text) with a tokenizer.json or a GGUF file's vocabulary",
		example: "vkc tokenize --tokenizer tokenizer.json --text 'Hello world'",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			tok := fs.String("tokenizer", "", "tokenizer.json (or .json.gz, or a folder holding one; a tokenizer_config.json beside it is read) or a .gguf file")
			text := fs.String("text", "", "the text to encode")
			file := fs.String("file", "", "encode the contents of this file (UTF-8)")
			noSpecial := fs.Bool("no-special", false, "add no BOS/EOS (Hugging Face's add_special_tokens=False); special-token text in the input is still matched")
			asJSON := fs.Bool("json", false, `print {"ids": [...], "tokens": [...]} (with --decode: {"text": "..."})`)
			decode := fs.String("decode", "", "comma-separated token ids to decode into text instead")
			skipSpecial := fs.Bool("skip-special", false, "with --decode: leave out special tokens")
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("unexpected argument %q (the text goes in --text or --file)", args[0])
				}
				if *tok == "" {
					return usagef("--tokenizer FILE is required")
				}
				set := map[string]bool{}
				fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
				if set["decode"] {
					if set["text"] || set["file"] || set["no-special"] {
						return usagef("--decode takes no --text, --file or --no-special")
					}
					ids, err := parseIDs(*decode)
					if err != nil {
						return usagef("--decode: %v", err)
					}
					t, err := tokenizer.Load(*tok)
					if err != nil {
						return err
					}
					s, err := t.Decode(ids, tokenizer.DecodeOptions{SkipSpecial: *skipSpecial})
					if err != nil {
						return fmt.Errorf("--decode: %w", err)
					}
					if *asJSON {
						return writeJSONLine(stdout, map[string]string{"text": s})
					}
					_, err = fmt.Fprintln(stdout, s)
					return err
				}
				if set["skip-special"] {
					return usagef("--skip-special goes with --decode")
				}
				if set["text"] == set["file"] {
					return usagef("want one of --text T and --file F")
				}
				input, what := *text, "--text"
				if set["file"] {
					data, err := os.ReadFile(*file)
					if err != nil {
						return err
					}
					input, what = string(data), *file
				}
				t, err := tokenizer.Load(*tok)
				if err != nil {
					return err
				}
				ids, err := t.Encode(input, !*noSpecial)
				if err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				if *asJSON {
					tokens := make([]string, len(ids))
					for i, id := range ids {
						tokens[i], _ = t.Token(id)
					}
					return writeJSONLine(stdout, struct {
						IDs    []int32  `json:"ids"`
						Tokens []string `json:"tokens"`
					}{ids, tokens})
				}
				line := make([]byte, 0, 7*len(ids)+1)
				for i, id := range ids {
					if i > 0 {
						line = append(line, ',')
					}
					line = strconv.AppendInt(line, int64(id), 10)
				}
				_, err = stdout.Write(append(line, '\n'))
				return err
			}
		},
	})
}

func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
