package plan

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// A streamed input (size unknown) asked for a section longer than math.MaxInt64 must fail as
// truncated: io.CopyN took the negative int64 length as "copy nothing", and an empty section
// with a zero checksum was accepted (found by FuzzDecodeContents).
func TestStreamedReadOfImpossibleLength(t *testing.T) {
	in := &input{r: strings.NewReader("abc"), size: -1}
	_, err := in.read(math.MaxInt64+1, "section functions")
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Kind != ErrTruncated || !strings.Contains(err.Error(), "section functions") {
		t.Fatalf("got %v, want a truncation error naming the section", err)
	}
}
