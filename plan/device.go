package plan

import "fmt"

// String describes the device for messages:
// "NVIDIA H200 (vendor 0x10de, device 0x2335, driver 0x8c2d8000, cache 0123…cdef)".
func (f Fingerprint) String() string {
	name := f.DeviceName
	if name == "" {
		name = "unnamed device"
	}
	return fmt.Sprintf("%q (vendor 0x%04x, device 0x%04x, driver 0x%08x, pipeline cache %x)",
		name, f.VendorID, f.DeviceID, f.DriverVersion, f.PipelineCacheUUID)
}

// CheckDevice returns nil if the plan was compiled for the device fp describes, and otherwise a
// *DeviceMismatchError naming both devices and what differs. The device name is not compared (it
// is for messages); vendor, device, driver version and pipeline-cache UUID are. A caller may accept
// a mismatch for which DriverOnly is true, with a warning that the tuning may be stale.
//
//	if err := p.CheckDevice(dev.Fingerprint()); err != nil {
//		return err // plan was compiled for "NVIDIA H200" (...) but this device is "llvmpipe" (...)
//	}
func (p *Plan) CheckDevice(fp Fingerprint) error {
	var differs []string
	if p.Device.VendorID != fp.VendorID {
		differs = append(differs, "vendor")
	}
	if p.Device.DeviceID != fp.DeviceID {
		differs = append(differs, "device")
	}
	if p.Device.DriverVersion != fp.DriverVersion {
		differs = append(differs, "driver")
	}
	if p.Device.PipelineCacheUUID != fp.PipelineCacheUUID {
		differs = append(differs, "pipeline cache")
	}
	if differs == nil {
		return nil
	}
	return &DeviceMismatchError{Plan: p.Device, Device: fp, Differs: differs}
}
