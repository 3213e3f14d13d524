// Command mixtralgguf writes the Mixtral-style oracle model (oracles.MixtralGGUF) to the file it
// is given, for llama.cpp's tools (testdata/llamacpp-mixtral/README.md):
//
//	go run ./internal/oracles/mixtralgguf /tmp/mixtral-tiny-F32.gguf
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/internal/safefile"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: mixtralgguf OUT.gguf")
		os.Exit(2)
	}
	b, err := oracles.MixtralGGUF()
	if err == nil {
		err = safefile.Write(context.Background(), os.Args[1], safefile.Options{What: "GGUF file"}, func(w io.Writer) error {
			_, err := w.Write(b)
			return err
		})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mixtralgguf:", err)
		os.Exit(1)
	}
	sum := sha256.Sum256(b)
	fmt.Printf("wrote %s: %d bytes, sha256 %s\n", os.Args[1], len(b), hex.EncodeToString(sum[:]))
}
