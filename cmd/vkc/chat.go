package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vkc-project/vkc/engine"
)

func init() { interactiveChat = chatLoop }

// chatLoop is the interactive conversation of `vkc run PLAN|MODEL --chat` without a prompt: each
// line read is the user's next message; the assistant's reply streams to standard output as it
// is generated, and the conversation goes on from the KV cache (each turn runs only its new
// tokens: the reply and the next message). A line ending in a backslash continues on the next;
// "/reset" starts a new conversation (the system message kept), "/exit" or the end of the input
// ends it. Standard error gets a greeting, a "> " prompt when the input is a terminal, and after
// each reply the tokens and the time.
func chatLoop(ctx context.Context, s *ChatSession) error {
	tty := isTerminal(s.Stdin)
	name := s.Model.Plan().Model
	if tty {
		fmt.Fprintf(s.Stderr, "chatting with %s: one line per message (end a line with \\ to continue it), /reset starts over, /exit or Ctrl-D ends\n", name)
	}
	if s.RandomSeed && s.Options.Sampling.Temperature > 0 {
		fmt.Fprintf(s.Stderr, "seed %d (--seed repeats the conversation)\n", s.Options.Sampling.Seed)
	}
	var base []engine.Message
	if s.Options.System != "" {
		base = append(base, engine.Message{Role: "system", Content: s.Options.System})
	}
	msgs := append([]engine.Message(nil), base...)
	sess := s.Model.NewSession()
	opts := s.Options
	in := bufio.NewReader(s.Stdin)
	for {
		if tty {
			fmt.Fprint(s.Stderr, "> ")
		}
		line, err := readMessage(in)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		text := strings.TrimSpace(line)
		switch {
		case text == "/exit":
			return nil
		case text == "/reset":
			msgs = append([]engine.Message(nil), base...)
			fmt.Fprintln(s.Stderr, "(a new conversation)")
			continue
		case text == "" && errors.Is(err, io.EOF):
			if tty {
				fmt.Fprintln(s.Stderr)
			}
			return nil
		case text == "":
			continue
		}
		msgs = append(msgs, engine.Message{Role: "user", Content: line})
		g, gerr := sess.Chat(ctx, msgs, opts, func(piece string) error {
			_, err := io.WriteString(s.Stdout, piece)
			return err
		})
		fmt.Fprintln(s.Stdout)
		if gerr != nil {
			return gerr
		}
		msgs = append(msgs, engine.Message{Role: "assistant", Content: g.Text})
		fmt.Fprintf(s.Stderr, "(%s; %s of the prompt from the cache, %s run; %s, %.1f tokens/s)\n", count(len(g.Tokens), "token"),
			count(g.Reused, "token"), count(g.PromptTokens-g.Reused, "token"), g.Stopped, tokensPerSecond(g))
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

// readMessage reads one message: a line, or several joined where a line ends in a backslash.
func readMessage(r *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if cont, ok := strings.CutSuffix(line, `\`); ok && err == nil {
			b.WriteString(cont + "\n")
			continue
		}
		b.WriteString(line)
		return b.String(), err
	}
}

// tokensPerSecond is the decode rate of g (0 without decode steps).
func tokensPerSecond(g *engine.Generation) float64 {
	if d := g.PerToken(); d > 0 {
		return 1 / d.Seconds()
	}
	return 0
}

// isTerminal reports whether r is a character device (a terminal).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
