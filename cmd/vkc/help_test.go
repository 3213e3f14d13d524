package main

import (
	"flag"
	"io"
	"sort"
	"strings"
	"testing"
)

// TestHelpCommand: 'vkc help NAME' and 'vkc NAME -h' print the command's usage line, an example
// and every flag it defines, for every registered command; the example's flags exist.
func TestHelpCommand(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		c := commands[name]
		fs, _ := newFlagSet(c, io.Discard, io.Discard)
		var flags []string
		fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })

		code, out, errs := runCLI(t, "help", name)
		if code != 0 {
			t.Errorf("vkc help %s: exit %d, stderr %q", name, code, errs)
			continue
		}
		code, _, hout := runCLI(t, name, "-h")
		if code != 0 || hout != out {
			t.Errorf("vkc %s -h: exit %d, stderr differs from vkc help %s:\n%s\nvs\n%s", name, code, name, hout, out)
		}
		if !strings.HasPrefix(out, "usage: vkc "+name+" ") {
			t.Errorf("vkc help %s starts %q", name, strings.SplitN(out, "\n", 2)[0])
		}
		for _, f := range flags {
			listed := false
			for _, sep := range []string{" ", "\n", "\t"} {
				listed = listed || strings.Contains(out, "\n  -"+f+sep)
			}
			if !listed {
				t.Errorf("vkc help %s does not list -%s", name, f)
			}
		}
		ex := c.example
		if !strings.HasPrefix(ex, "vkc "+name+" ") && ex != "vkc "+name {
			t.Errorf("command %s: example %q does not run vkc %s", name, ex, name)
		}
		if !strings.Contains(out, "\nexample:\n  "+ex+"\n") {
			t.Errorf("vkc help %s does not show its example", name)
		}
		for _, arg := range strings.Fields(ex) {
			if !strings.HasPrefix(arg, "-") {
				continue
			}
			f, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
			if fs.Lookup(f) == nil {
				t.Errorf("command %s: example %q uses -%s, which it does not define", name, ex, f)
			}
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"help"}, 0, "commands:"},
		{[]string{"help", "nosuch"}, 2, `vkc help: unknown command "nosuch"`},
		{[]string{"help", "run", "bench"}, 2, "want one command"},
	} {
		code, out, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(out+errs, c.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d and %q", c.args, code, out+errs, c.code, c.want)
		}
	}
}
