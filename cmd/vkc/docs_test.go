package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// docFiles are the documents whose Go blocks must compile: the README, docs/ and the examples'
// READMEs (the repository root is two folders up).
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md"}
	for _, g := range []string{"../../docs/*.md", "../../examples/*/README.md"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// fencedBlocks returns the blocks of a markdown file fenced as ```lang, with the line each starts
// at.
func fencedBlocks(t *testing.T, path, lang string) (blocks []string, lines []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cur []string
	in, start := false, 0
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```"+lang:
			in, start, cur = true, i+2, nil
		case in && strings.TrimSpace(l) == "```":
			in = false
			blocks, lines = append(blocks, strings.Join(cur, "\n")), append(lines, start)
		case in:
			cur = append(cur, l)
		}
	}
	return blocks, lines
}

// snippetImports are the packages a documentation snippet may name, by the name it uses.
var snippetImports = map[string]string{
	"engine": "github.com/vkc-project/vkc/engine", "vkc": "github.com/vkc-project/vkc",
	"server": "github.com/vkc-project/vkc/server", "runtime": "github.com/vkc-project/vkc/runtime",
	"plan": "github.com/vkc-project/vkc/plan", "ir": "github.com/vkc-project/vkc/ir",
	"tokenizer": "github.com/vkc-project/vkc/tokenizer", "importer": "github.com/vkc-project/vkc/importer",
	"kernels": "github.com/vkc-project/vkc/kernels", "interp": "github.com/vkc-project/vkc/ir/interp",
	"fmt": "fmt", "os": "os", "context": "context", "http": "net/http", "slog": "log/slog", "time": "time",
	"strings": "strings", "errors": "errors", "io": "io", "log": "log",
}

// snippetFunc makes a documentation snippet (statements, as the docs write them) into a
// function of package docsnippets: ctx is its context.Context parameter (and m an *engine.Model
// when the block uses one without loading it), and every variable
// the snippet declares at its top level is used once at the end (a fragment leaves some unread).
// It returns the function and the package names it uses.
func snippetFunc(name, src string) (string, []string, error) {
	wrapped := "package p\nfunc f() {\n" + src + "\n}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", wrapped, 0)
	if err != nil {
		return "", nil, err
	}
	body := f.Decls[0].(*ast.FuncDecl).Body
	declared := map[string]bool{"ctx": true}
	var order []string
	for _, st := range body.List {
		switch s := st.(type) {
		case *ast.AssignStmt:
			if s.Tok == token.DEFINE {
				for _, l := range s.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name != "_" && !declared[id.Name] {
						declared[id.Name] = true
						order = append(order, id.Name)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := s.Decl.(*ast.GenDecl); ok {
				for _, sp := range g.Specs {
					if vs, ok := sp.(*ast.ValueSpec); ok {
						for _, id := range vs.Names {
							if !declared[id.Name] {
								declared[id.Name] = true
								order = append(order, id.Name)
							}
						}
					}
				}
			}
		}
	}
	// m, when a block uses it without making it, is the engine.Model the text before it loaded.
	usesM := false
	ast.Inspect(body, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == "m" && !declared["m"] {
			usesM = true
		}
		return true
	})
	pkgs := map[string]bool{}
	if usesM {
		pkgs["engine"] = true
	}
	ast.Inspect(body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && !declared[id.Name] {
				if _, known := snippetImports[id.Name]; known {
					pkgs[id.Name] = true
				}
			}
		}
		return true
	})
	var used []string
	for p := range pkgs {
		used = append(used, p)
	}
	sort.Strings(used)
	var b strings.Builder
	params := "ctx context.Context"
	if usesM {
		params += ", m *engine.Model"
	}
	fmt.Fprintf(&b, "func %s(%s) {\n%s\n", name, params, src)
	for _, v := range order {
		fmt.Fprintf(&b, "\t_ = %s\n", v)
	}
	b.WriteString("}\n")
	return b.String(), used, nil
}

// TestDocsGoBlocksCompile: every ```go block of the README, docs/ and the examples' READMEs
// compiles (the README's once called Generate with a signature it does not have). Each block
// becomes a function of a package that exists only for the build (go build -overlay), with
// ctx a context.Context and the imports of the package names it uses.
func TestDocsGoBlocksCompile(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	imports := map[string]bool{"context": true}
	where := map[string]string{}
	n := 0
	for _, path := range docFiles(t) {
		blocks, lines := fencedBlocks(t, path, "go")
		for i, blk := range blocks {
			name := fmt.Sprintf("snippet%d", n)
			rel, _ := filepath.Rel(root, mustAbs(t, path))
			where[name] = fmt.Sprintf("%s:%d", rel, lines[i])
			fn, used, err := snippetFunc(name, blk)
			if err != nil {
				t.Errorf("%s: the Go block does not parse: %v", where[name], err)
				continue
			}
			// A line directive makes the compiler's messages name the document and its line.
			fmt.Fprintf(&src, "//line %s:%d\n%s\n", where[name], lines[i]-1, fn)
			for _, p := range used {
				imports[p] = true
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no Go blocks found in the documentation")
	}
	var file strings.Builder
	file.WriteString("package docsnippets\n\nimport (\n")
	var names []string
	for p := range imports {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		path := snippetImports[p]
		if base := filepath.Base(path); base != p {
			fmt.Fprintf(&file, "\t%s %q\n", p, path)
		} else {
			fmt.Fprintf(&file, "\t%q\n", path)
		}
	}
	file.WriteString(")\n\n" + src.String())
	dir := t.TempDir()
	gofile := filepath.Join(dir, "snippets.go")
	if err := os.WriteFile(gofile, []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(root, "internal", "docsnippets", "snippets.go"): gofile}})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", ov, "./internal/docsnippets")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the documentation's Go blocks do not compile (%d blocks):\n%s", n, out)
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
