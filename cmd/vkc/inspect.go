package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

func init() {
	register(&command{
		name:    "inspect",
		usage:   "[-check-device] plan.bin",
		short:   "describe a compiled plan: device, memory, functions and their dispatches, kernels, rules, candidates",
		example: "vkc inspect tinyllama.plan",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			check := fs.Bool("check-device", false, "also say whether the plan runs on the device vkc would use here (VKC_DEVICE or the best one)")
			device := fs.String("device", "", "with -check-device: the device to check against, by index or name substring")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one plan file, got %d arguments", len(args))
				}
				return inspect(stdout, args[0], *check, *device)
			}
		},
	})
}

func inspect(w io.Writer, path string, checkDevice bool, device string) error {
	// The plan's description only: external weights are not read, so inspect works on a plan
	// whose weight file is elsewhere.
	p, err := plan.ReadDescription(path)
	if err != nil {
		return err
	}
	if st, err := os.Stat(path); err == nil {
		var spirv int
		for _, m := range p.Modules {
			spirv += 4 * len(m.SPIRV)
		}
		inline := uint64(0)
		if p.Weights.Source == nil {
			inline = p.Weights.Size
		}
		fmt.Fprintf(w, "file %s: %s (SPIR-V %s, inline weights %s)\n", path, byteSize(uint64(st.Size())), byteSize(uint64(spirv)), byteSize(inline))
	}
	if err := p.Summary(w); err != nil {
		return err
	}
	for _, f := range p.Functions {
		var bound uint64
		for _, d := range f.Dispatches {
			for _, b := range d.Bindings {
				bound += b.Buffer.Range
			}
		}
		if len(f.Dispatches) > 0 {
			fmt.Fprintf(w, "function %s binds %s in all per run (an upper bound of the memory traffic)\n", f.Name, byteSize(bound))
		}
	}
	if !checkDevice {
		return nil
	}
	devs, chosen, err := runtime.Devices(runtime.Options{Device: device})
	if err != nil {
		return fmt.Errorf("check device: %w", err)
	}
	for i := range devs {
		if devs[i].Index != chosen {
			continue
		}
		d := &devs[i]
		err := p.CheckDevice(vkc.Fingerprint(d))
		var mm *plan.DeviceMismatchError
		switch {
		case err == nil:
			fmt.Fprintf(w, "\nruns on device %d (%s)\n", d.Index, d.Name)
		case errors.As(err, &mm) && mm.DriverOnly():
			fmt.Fprintf(w, "\nruns on device %d (%s), but was tuned under another driver: %v\n", d.Index, d.Name, err)
		default:
			return err
		}
		// The same comparison the loader makes before it allocates anything.
		room := runtime.RoomOf(d)
		if err := runtime.CheckFits(p, room); err != nil {
			return fmt.Errorf("device %d (%s): %w", d.Index, d.Name, err)
		}
		fmt.Fprintf(w, "fits: the plan needs %s of device memory; %s\n", byteSize(p.DeviceMemory().Total()), room)
	}
	return nil
}

// byteSize prints n with a binary unit: "12.3 MiB".
func byteSize(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
