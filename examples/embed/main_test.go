package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/runtime"
)

// TestEmbed compiles tinyllama for the device and runs the program's two decode loops on it
// (run fails if they disagree).
func TestEmbed(t *testing.T) {
	if _, _, err := runtime.Devices(runtime.Options{}); err != nil {
		t.Skipf("no Vulkan device: %v", err)
	}
	m, err := ir.ParseModel("../tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := vkc.Compile(context.Background(), m, vkc.Options{})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	path := filepath.Join(t.TempDir(), "tinyllama.plan")
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if err := run(path, "37,235,140,72,255", 4); err != nil {
		t.Fatal(err)
	}
}
