package main

import (
	"flag"
	"fmt"
	"io"
	goruntime "runtime"
	"runtime/debug"

	"github.com/vkc-project/vkc"
)

func init() {
	register(&command{
		name:    "version",
		usage:   "",
		short:   "print vkc's version (also vkc --version)",
		example: "vkc version",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("takes no arguments, got %q", args)
				}
				printVersion(stdout)
				return nil
			}
		},
	})
}

// printVersion writes the compiler's version, the source revision when the build recorded one,
// and the Go toolchain and platform.
func printVersion(w io.Writer) {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if len(s.Value) > 12 {
					s.Value = s.Value[:12]
				}
				rev = " " + s.Value + rev
			case "vcs.modified":
				if s.Value == "true" {
					rev += " (modified)"
				}
			}
		}
	}
	fmt.Fprintf(w, "vkc %s%s (%s, %s/%s)\n", vkc.Version, rev, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
}
