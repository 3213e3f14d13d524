package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vkc-project/vkc/server/loadgen"
)

func init() {
	register(&command{
		name:    "loadgen",
		usage:   "URL [--streams 1,4,16,64] [--requests N] [--duration D] [--max-tokens N] [--api-key KEY] [--json]",
		short:   "measure a vkc serve (or any OpenAI-compatible server) on this machine: tokens/s, time to first token and inter-token latency at each number of concurrent streams, and requests lost",
		example: "vkc loadgen http://127.0.0.1:8080 --streams 1,4,16 --requests 32 --max-tokens 32",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			streams := fs.String("streams", "1,4,16,64", "comma-separated concurrency levels, measured in turn")
			requests := fs.Int("requests", 0, "requests per level (default: 4 per stream, at least 8)")
			duration := fs.Duration("duration", 5*time.Minute, "the longest a level may take (requests not started by then are not sent)")
			maxTokens := fs.Int("max-tokens", 64, "each request's max_tokens")
			temp := fs.Float64("temperature", 0, "each request's temperature")
			apiKey := fs.String("api-key", "", "the server's bearer token (default: $VKC_API_KEY)")
			asJSON := fs.Bool("json", false, "print the results as JSON instead of a table")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want the server's URL (http://127.0.0.1:PORT), got %d arguments", len(args))
				}
				if err := loadgen.CheckLoopback(args[0]); err != nil {
					return usagef("%v", err)
				}
				var levels []int
				for _, s := range strings.Split(*streams, ",") {
					n, err := strconv.Atoi(strings.TrimSpace(s))
					if err != nil || n < 1 || n > 1024 {
						return usagef("--streams %q: want numbers of streams from 1 to 1024", *streams)
					}
					levels = append(levels, n)
				}
				if *requests < 0 || *maxTokens < 1 || *duration <= 0 {
					return usagef("--requests, --max-tokens and --duration want positive values")
				}
				key := *apiKey
				if key == "" {
					key = os.Getenv("VKC_API_KEY")
				}
				ctx, stop := interruptible()
				defer stop()
				rs, err := loadgen.Run(ctx, loadgen.Config{URL: args[0], APIKey: key, Streams: levels, Requests: *requests,
					Duration: *duration, MaxTokens: *maxTokens, Temperature: *temp})
				if *asJSON {
					enc := json.NewEncoder(stdout)
					enc.SetIndent("", "  ")
					if e := enc.Encode(rs); e != nil && err == nil {
						err = e
					}
				} else {
					loadgen.WriteTable(stdout, rs)
				}
				if err != nil {
					return err
				}
				lost := 0
				for _, r := range rs {
					lost += r.Lost
				}
				if lost > 0 {
					return fmt.Errorf("%d requests lost", lost)
				}
				return nil
			}
		},
	})
}
