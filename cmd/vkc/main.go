// Command vkc compiles neural-network models written as op graphs (model.yaml) into Vulkan
// execution plans, runs them, and shows what the compiler chose.
//
// Each subcommand lives in its own file and registers itself in init with register; main only
// dispatches. Exit status: 0 on success, 1 on failure, 2 on a usage error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
)

// command is one vkc subcommand.
type command struct {
	name    string
	usage   string // one line: arguments after the command name
	short   string // one line: what it does
	example string // one line: a whole command line that works, "vkc bench tinyllama.plan -f decode"
	// run parses args with fs (already carrying the command's flags) and does the work.
	// A returned usageError prints the usage and exits 2; any other error exits 1.
	flags func(fs *flag.FlagSet) func(args []string) error
	// flagsOut is flags for commands that print results: they write to stdout (the writer run
	// was given), so tests can call run and read what a command printed. Set one of the two.
	flagsOut func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("vkc: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// usageError marks an error in how the command was called (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func mainUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: vkc <command> [flags] [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].short)
	}
	fmt.Fprintln(w, "\nRun 'vkc help <command>' or 'vkc <command> -h' for the flags of a command.")
}

// newFlagSet makes c's flag set, with the usage that -h and 'vkc help c' print: the usage line,
// what the command does, an example and every flag.
func newFlagSet(c *command, stdout, stderr io.Writer) (*flag.FlagSet, func(args []string) error) {
	fs := flag.NewFlagSet("vkc "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: vkc %s %s\n\n%s\n", c.name, c.usage, c.short)
		if c.example != "" {
			fmt.Fprintf(fs.Output(), "\nexample:\n  %s\n", c.example)
		}
		fmt.Fprintf(fs.Output(), "\nflags:\n")
		fs.PrintDefaults()
	}
	if c.flagsOut != nil {
		return fs, c.flagsOut(fs, stdout)
	}
	return fs, c.flags(fs)
}

// help is 'vkc help [COMMAND]': the command's usage, flags and example on stdout, or the list of
// commands.
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		mainUsage(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok || len(args) > 1 {
		if ok {
			fmt.Fprintf(stderr, "vkc help: want one command, got %q\n\n", args)
		} else {
			fmt.Fprintf(stderr, "vkc help: unknown command %q\n\n", args[0])
		}
		mainUsage(stderr)
		return 2
	}
	fs, _ := newFlagSet(c, stdout, stdout)
	fs.Usage()
	return 0
}

func main() {
	// VKC_CPUPROFILE=FILE writes a CPU profile of the command (go tool pprof FILE), for finding
	// where a slow compile spends its time.
	if path := os.Getenv("VKC_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vkc: VKC_CPUPROFILE: %v\n", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "vkc: VKC_CPUPROFILE: %v\n", err)
			os.Exit(1)
		}
		rc := run(os.Args[1:], os.Stdout, os.Stderr)
		pprof.StopCPUProfile()
		f.Close()
		os.Exit(rc)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		mainUsage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "help" {
		return help(args[1:], stdout, stderr)
	}
	if args[0] == "--version" || args[0] == "-version" {
		printVersion(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "vkc: unknown command %q\n\n", args[0])
		mainUsage(stderr)
		return 2
	}
	fs, do := newFlagSet(c, stdout, stderr)
	// A bad flag is one line and where to read more, not the whole usage: the flag package
	// prints its error and calls Usage for both -h and a mistake, so it prints nothing here.
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args[1:])
	fs.Usage = usage
	fs.SetOutput(stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return 0
		}
		fmt.Fprintf(stderr, "vkc %s: %v\n%s", c.name, err, seeHelp(c.name))
		return 2
	}
	if err := do(fs.Args()); err != nil {
		if errors.Is(err, errHelpShown) {
			return 0 // -h after the positional arguments: the usage is printed
		}
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "vkc %s: %s\n%s", c.name, ue.msg, seeHelp(c.name))
			return 2
		}
		fmt.Fprintf(stderr, "vkc %s: %v\n", c.name, err)
		return 1
	}
	return 0
}

// seeHelp is the line after a usage error: where the command's usage is.
func seeHelp(name string) string {
	return fmt.Sprintf("see 'vkc %s -h'\n", name)
}
