package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vkc-project/vkc/runtime"
)

func init() {
	register(&command{
		name:    "devices",
		usage:   "[-ext]",
		short:   "list Vulkan devices, their capabilities and fingerprints; * marks the one vkc would use",
		example: "vkc devices -ext",
		flags: func(fs *flag.FlagSet) func(args []string) error {
			ext := fs.Bool("ext", false, "also list each device's extensions")
			validate := fs.Bool("validate", false, "enable the Khronos validation layer while querying")
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("unexpected argument %q", args[0])
				}
				return listDevices(os.Stdout, runtime.Options{Validation: *validate}, *ext)
			}
		},
	})
}

const installHint = `vkc needs the Vulkan loader and a Vulkan driver:
  Debian/Ubuntu: apt-get install libvulkan1 mesa-vulkan-drivers
  (mesa-vulkan-drivers provides lavapipe, a CPU device, and drivers for AMD and Intel GPUs;
   NVIDIA GPUs need the NVIDIA driver with its Vulkan ICD.)
  VKC_DEVICE=<index or name> picks a device when there are several.`

func listDevices(w io.Writer, opts runtime.Options, ext bool) error {
	devs, chosen, err := runtime.Devices(opts)
	if errors.Is(err, runtime.ErrNoVulkan) || (errors.Is(err, runtime.ErrNoDevice) && len(devs) == 0) {
		fmt.Fprintln(w, installHint)
		return err
	}
	for i := range devs {
		printDevice(w, &devs[i], devs[i].Index == chosen, ext)
	}
	if err != nil { // e.g. VKC_DEVICE matches nothing: the list above says what exists
		return err
	}
	if sel := os.Getenv("VKC_DEVICE"); sel != "" {
		fmt.Fprintf(w, "(chosen by VKC_DEVICE=%s)\n", sel)
	}
	return nil
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func bytesStr(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0 || n >= 16<<30:
		return fmt.Sprintf("%.4g GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.4g MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.4g KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func printDevice(w io.Writer, d *runtime.DeviceInfo, chosen, ext bool) {
	mark := " "
	if chosen {
		mark = "*"
	}
	fmt.Fprintf(w, "%s %d: %s (%s)\n", mark, d.Index, d.Name, d.Type)
	p := func(label, format string, a ...any) {
		fmt.Fprintf(w, "    %-20s %s\n", label+":", fmt.Sprintf(format, a...))
	}
	driver := d.DriverVersion
	if d.DriverName != "" {
		driver = fmt.Sprintf("%s %s (%s)", d.DriverName, d.DriverVersion, d.DriverInfo)
	}
	p("vulkan", "%s", d.APIVersion)
	p("driver", "%s", driver)
	p("vendor/device", "%#04x / %#04x", d.Fingerprint.VendorID, d.Fingerprint.DeviceID)
	p("fingerprint", "%s", d.Fingerprint)
	if !d.Usable {
		p("usable", "no: %s", d.Reason)
		fmt.Fprintln(w)
		return
	}
	c := d.Caps
	sub := fmt.Sprintf("size %d", c.SubgroupSize)
	if c.MaxSubgroupSize > 0 {
		sub += fmt.Sprintf(" (min %d, max %d)", c.MinSubgroupSize, c.MaxSubgroupSize)
	}
	p("subgroup", "%s, ops %s", sub, c.SubgroupOps)
	p("subgroup control", "size control %s, full subgroups %s", yes(c.SubgroupSizeControl), yes(c.ComputeFullSubgroups))
	p("arithmetic", "f16 %s, f64 %s, int8 %s, int16 %s, int64 %s, integer dot product %s",
		yes(c.ShaderFloat16), yes(c.ShaderFloat64), yes(c.ShaderInt8), yes(c.ShaderInt16), yes(c.ShaderInt64), yes(c.IntegerDotProduct))
	p("storage", "16-bit %s (uniform %s, push constants %s), 8-bit %s, memory model %s",
		yes(c.StorageBuffer16BitAccess), yes(c.UniformAndStorageBuffer16BitAccess), yes(c.StoragePushConstant16),
		yes(c.StorageBuffer8BitAccess), yes(c.VulkanMemoryModel))
	p("bfloat16", "%s (cooperative matrices %s)", yes(c.BFloat16), yes(c.BFloat16CooperativeMatrix))
	if c.PushDescriptors {
		p("push descriptors", "yes (max %d)", c.MaxPushDescriptors)
	} else {
		p("push descriptors", "no (descriptor sets, allocated at record time)")
	}
	if len(c.CooperativeMatrix) == 0 {
		p("cooperative matrix", "no")
	} else {
		var shapes []string
		for _, s := range c.CooperativeMatrix {
			shapes = append(shapes, s.String())
		}
		p("cooperative matrix", "%d shapes", len(shapes))
		for _, s := range shapes {
			fmt.Fprintf(w, "    %-20s %s\n", "", s)
		}
	}
	if m := c.CooperativeMatrix2; m != nil {
		// VK_NV_cooperative_matrix2: its features and limits, then the workgroup-scope shapes
		// (the ones workgroup-scope templates use).
		p("coopmat2", "%s", m)
		for _, s := range m.Flexible {
			if s.Scope == 2 {
				fmt.Fprintf(w, "    %-20s %s\n", "", s)
			}
		}
	}
	if c.Timestamps {
		p("timestamps", "yes, period %g ns, %d valid bits", c.TimestampPeriod, c.TimestampValidBits)
	} else {
		p("timestamps", "no (measurements fall back to host time)")
	}
	p("workgroup", "shared memory %s, size max %v, invocations %d, count max %v",
		bytesStr(uint64(c.MaxSharedMemory)), c.MaxWorkgroupSize, c.MaxWorkgroupInvocations, c.MaxWorkgroupCount)
	p("buffers", "maxStorageBufferRange %s, maxMemoryAllocationSize %s, offset alignment %d, push constants %d B",
		bytesStr(uint64(c.MaxStorageBufferRange)), bytesStr(c.MaxMemoryAllocationSize), c.MinStorageBufferOffset, c.MaxPushConstantsSize)
	for i, h := range d.Memory.Heaps {
		kind := "host"
		if h.DeviceLocal {
			kind = "device-local"
		}
		budget := ""
		if c.MemoryBudget {
			budget = fmt.Sprintf(", budget %s, in use %s", bytesStr(h.Budget), bytesStr(h.Usage))
		}
		p(fmt.Sprintf("heap %d", i), "%s %s%s", bytesStr(h.Size), kind, budget)
	}
	for i, t := range d.Memory.Types {
		var f []string
		for _, x := range []struct {
			on   bool
			name string
		}{{t.DeviceLocal, "device-local"}, {t.HostVisible, "host-visible"}, {t.HostCoherent, "coherent"}, {t.HostCached, "cached"}} {
			if x.on {
				f = append(f, x.name)
			}
		}
		if len(f) == 0 {
			f = append(f, "-")
		}
		p(fmt.Sprintf("memory type %d", i), "heap %d, %s", t.Heap, strings.Join(f, " "))
	}
	if ext {
		p("extensions", "%d", len(d.Extensions))
		for _, e := range d.Extensions {
			fmt.Fprintf(w, "    %-20s %s\n", "", e)
		}
	}
	fmt.Fprintln(w)
}
