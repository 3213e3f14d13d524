package plan

import (
	"errors"
	"fmt"
	"strings"
)

// Kinds of decoding failure; test for them with errors.Is.
var (
	ErrForeign   = errors.New("not a vkc plan")
	ErrVersion   = errors.New("unsupported plan format version")
	ErrTruncated = errors.New("truncated plan")
	ErrCorrupt   = errors.New("corrupt plan")
	ErrInvalid   = errors.New("invalid plan")
	// ErrTooLarge: the sections the header declares are more than the host memory limit
	// (internal/hostmem) lets a decoder allocate.
	ErrTooLarge = errors.New("plan too large to read")
)

// FormatError is a failure to read a plan file.
type FormatError struct {
	Path   string // the file, if known
	Kind   error  // one of ErrForeign, ErrVersion, ErrTruncated, ErrCorrupt, ErrInvalid, ErrTooLarge
	Detail string // what exactly is wrong, and where
}

func (e *FormatError) Error() string {
	where := "plan"
	if e.Path != "" {
		where = "plan file " + e.Path
	}
	return fmt.Sprintf("%s: %v: %s", where, e.Kind, e.Detail)
}

func (e *FormatError) Unwrap() error { return e.Kind }

func formatErr(kind error, format string, args ...any) *FormatError {
	return &FormatError{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// ValidationError lists what is inconsistent in a plan.
type ValidationError struct {
	Problems []string // at most maxProblems; More says whether there were more
	More     bool
}

const maxProblems = 10

func (e *ValidationError) Error() string {
	s := "invalid plan: " + strings.Join(e.Problems, "; ")
	if e.More {
		s += "; ..."
	}
	return s
}

func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// DeviceMismatchError says that a plan was compiled for another device or driver.
type DeviceMismatchError struct {
	Plan, Device Fingerprint
	Differs      []string // which fields differ: "vendor", "device", "driver", "pipeline cache"
}

func (e *DeviceMismatchError) Error() string {
	verb := "differ"
	if len(e.Differs) == 1 {
		verb = "differs"
	}
	return fmt.Sprintf("plan was compiled for %v but this device is %v (%s %s); recompile the plan on this device",
		e.Plan, e.Device, strings.Join(e.Differs, ", "), verb)
}

// DriverOnly reports whether only the driver (version or pipeline-cache UUID) differs, not the
// hardware: the plan still runs correctly, but its tuning may no longer be the best.
func (e *DeviceMismatchError) DriverOnly() bool {
	for _, d := range e.Differs {
		if d == "vendor" || d == "device" {
			return false
		}
	}
	return true
}
