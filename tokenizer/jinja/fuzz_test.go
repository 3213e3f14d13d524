package jinja

import (
	"encoding/json"
	"os"
	"testing"
)

// FuzzTemplate: any source compiles or fails with an error, and what compiles renders or
// fails with an error; nothing panics. The seeds are the jinja2 cases' templates.
func FuzzTemplate(f *testing.F) {
	if data, err := os.ReadFile("testdata/jinja2_cases.json"); err == nil {
		var file struct {
			Cases []jinja2Case `json:"cases"`
		}
		if json.Unmarshal(data, &file) == nil {
			for _, c := range file.Cases {
				f.Add(c.Template)
			}
		}
	}
	vars := map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant", "content": nil}},
		"d":        map[string]any{"a": []any{1, 2.5, "x"}},
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Compile("fuzz", src)
		if err != nil {
			return
		}
		tmpl.Render(vars, Options{})
	})
}
