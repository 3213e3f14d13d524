package plan_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vkc-project/vkc/plan"
)

// A plan with one function that copies its input to its output through one kernel; the encoded
// bytes decode to an equal plan, and a plan for another device is refused with both named.
func Example() {
	p := &plan.Plan{
		CompilerVersion: "vkc example",
		Model:           "copy",
		Device:          plan.Fingerprint{VendorID: 0x10005, DeviceName: "llvmpipe"},
		Modules: []plan.Module{{
			Key:       "copy/f32",
			Config:    map[string]int64{"wg": 64},
			SPIRV:     []uint32{0x07230203, 0x00010300, 0, 10, 0 /* ... */},
			Entry:     "main",
			Bindings:  []plan.BindingDecl{{Binding: 0, Access: plan.Read}, {Binding: 1, Access: plan.Write}},
			Workgroup: [3]uint32{64, 1, 1},
		}},
		Functions: []plan.Function{{
			Name:    "run",
			Inputs:  []plan.Value{{Name: "x", DType: plan.F32, Shape: []int64{256}, Place: plan.Staging}},
			Outputs: []plan.Value{{Name: "y", DType: plan.F32, Shape: []int64{256}, Place: plan.Staging}},
			Dispatches: []plan.Dispatch{{
				Module: 0,
				Bindings: []plan.Binding{
					{Binding: 0, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionInput}, Range: 1024}},
					{Binding: 1, Buffer: plan.BufferRef{Region: plan.Region{Kind: plan.RegionOutput}, Range: 1024}},
				},
				Grid: [3]uint32{4, 1, 1},
				Ops:  []string{"copy"},
			}},
		}},
	}
	var buf bytes.Buffer
	if err := p.Encode(&buf); err != nil {
		panic(err)
	}
	q, err := plan.Decode(&buf)
	if err != nil {
		panic(err)
	}
	fmt.Println(q.Functions[0].Name, len(q.Functions[0].Dispatches), "dispatch")

	err = q.CheckDevice(plan.Fingerprint{VendorID: 0x10de, DeviceID: 0x2335, DeviceName: "NVIDIA H200"})
	fmt.Println(err)

	_, err = plan.Decode(bytes.NewReader([]byte("\x7fELF\x02\x01\x01\x00")))
	fmt.Println(err, errors.Is(err, plan.ErrForeign))
	// Output:
	// run 1 dispatch
	// plan was compiled for "llvmpipe" (vendor 0x10005, device 0x0000, driver 0x00000000, pipeline cache 00000000000000000000000000000000) but this device is "NVIDIA H200" (vendor 0x10de, device 0x2335, driver 0x00000000, pipeline cache 00000000000000000000000000000000) (vendor, device differ); recompile the plan on this device
	// plan: not a vkc plan: the input is an ELF executable or library true
}
