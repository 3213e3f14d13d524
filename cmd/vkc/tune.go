package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"vkc/lower/tune"
)

func init() {
	register(&command{
		name:  "tune",
		usage: "(-list | -clear) [-tune-db PATH]",
		short: "show or clear the tuning database (the measured kernel configurations compiles reuse)",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			list := fs.Bool("list", false, "list the database's searches: device, compiler, template, problem, best configuration and time")
			clear := fs.Bool("clear", false, "remove the database, so the next compile measures every kernel again")
			path := fs.String("tune-db", "", "the tuning database file (default: vkc/tune/tune.json in the user cache directory)")
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("unexpected arguments %s", strings.Join(args, " "))
				}
				if *list == *clear {
					return usagef("want one of -list and -clear")
				}
				if *clear {
					return tuneClear(stdout, *path)
				}
				return tuneList(stdout, *path)
			}
		},
	})
}

func tuneClear(w io.Writer, path string) error {
	if path == "" {
		p, err := tune.DefaultPath()
		if err != nil {
			return err
		}
		path = p
	}
	n, err := tune.ClearDB(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "cleared %s (%d searches)\n", path, n)
	return nil
}

func tuneList(w io.Writer, path string) error {
	db, err := tune.OpenDB(path)
	if err != nil {
		return err
	}
	if db.Warning != "" {
		fmt.Fprintf(os.Stderr, "vkc tune: warning: %s\n", db.Warning)
	}
	es := db.Entries()
	fmt.Fprintf(w, "%s: %d searches\n", db.Path(), len(es))
	var group tune.Key
	var tw *tabwriter.Writer
	flush := func() {
		if tw != nil {
			tw.Flush()
		}
	}
	for i, e := range es {
		if i == 0 || e.Device != group.Device || e.Driver != group.Driver || e.Compiler != group.Compiler {
			flush()
			group = e.Key
			fmt.Fprintf(w, "\ndevice %s, driver %s, %s\n", e.Device, e.Driver, e.Compiler)
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  template\tbest\ttime\ttried\tinvalid\tstate\tproblem")
		}
		best, t := "none valid", "-"
		if e.Best != nil {
			best, t = "["+e.Best.Key()+"]", e.Time.Round(100*time.Nanosecond).String()
		}
		state := "complete"
		if !e.Complete {
			state = "interrupted"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%s\t%s\n", e.Template, best, t, e.Tried, len(e.Invalid), state, e.Problem)
	}
	flush()
	return nil
}
