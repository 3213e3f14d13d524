package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/engine"
)

// `vkc run PLAN --chat` without a prompt: an interactive conversation read from standard input,
// one message a line. Each reply streams to standard output; the second turn runs from the
// KV cache (standard error says how many prompt tokens came from it) and says what the engine
// says for the whole conversation at once; /reset starts over; the end of the input ends the
// command with exit 0. On a plan with slots too.
func TestBinaryInteractiveChat(t *testing.T) {
	for _, model := range []string{"model.yaml", "parallel.yaml"} {
		t.Run(model, func(t *testing.T) {
			needDevice(t)
			dir := t.TempDir()
			plan := dir + "/chat.plan"
			src, _ := filepath.Abs("../../testdata/chat-tiny/" + model)
			if r := runVKC(t, dir, nil, "compile", "-q", src, "-o", plan); r.code != 0 {
				t.Fatalf("compile: %s", r.stderr)
			}
			cmd := exec.Command(vkcBinary(t), "run", plan, "--chat", "--temperature", "0", "--max-tokens", "6", "--system", "Be brief.")
			cmd.Stdin = strings.NewReader("Hello\nAnd \\\nthen?\n/reset\nHello\n")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			var reused []int
			for _, line := range strings.Split(errb.String(), "\n") {
				var tokens, cached int
				if n, _ := fmt.Sscanf(line, "(%d tokens; %d tokens of the prompt from the cache", &tokens, &cached); n == 2 {
					reused = append(reused, cached)
				}
			}
			if len(reused) != 3 || reused[0] != 0 || reused[1] == 0 || !strings.Contains(errb.String(), "(a new conversation)") {
				t.Fatalf("stderr %q: want 3 turns' statistics, the second from the cache, and a reset", errb.String())
			}
			m, err := engine.Load(plan, engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			opts := engine.GenerateOptions{MaxTokens: 6}
			sys := engine.Message{Role: "system", Content: "Be brief."}
			g1, err := m.NewSession().Chat(context.Background(), []engine.Message{sys, {Role: "user", Content: "Hello"}}, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			g2, err := m.NewSession().Chat(context.Background(), []engine.Message{sys, {Role: "user", Content: "Hello"},
				{Role: "assistant", Content: g1.Text}, {Role: "user", Content: "And \nthen?"}}, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := g1.Text + "\n" + g2.Text + "\n" + g1.Text + "\n"; out.String() != want {
				t.Errorf("replies %q; the engine's for the conversation, then the first again after /reset: %q", out.String(), want)
			}
		})
	}
}
