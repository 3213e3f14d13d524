package plan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"testing"
)

// FuzzDecode throws arbitrary bytes at the decoder. It must never panic, must fail only with a
// *FormatError, and whatever it accepts must be a valid plan whose encoding is exactly the input:
// every accepted file is the one canonical encoding of its plan.
func FuzzDecode(f *testing.F) {
	f.Add(encode(f, smallPlan()))
	f.Add(encode(f, &Plan{}))
	f.Add(encode(f, externalPlan(make([]byte, 200))))
	small := encode(f, smallPlan())
	f.Add(small[:len(small)/2])
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"))
	f.Add(append(binary.LittleEndian.AppendUint64(nil, 2), "{}"...))
	f.Add([]byte(Magic + "\x01\x00\x00\x00\xff\xff\xff\xff"))
	f.Fuzz(checkDecode)
}

// FuzzDecodeContents is FuzzDecode with the checksums repaired before decoding, so that mutations
// reach the section parsers and Validate instead of stopping at a checksum mismatch.
func FuzzDecodeContents(f *testing.F) {
	f.Add(encode(f, smallPlan()))
	f.Add(encode(f, &Plan{}))
	f.Add(encode(f, externalPlan(make([]byte, 200))))
	f.Fuzz(func(t *testing.T, data []byte) { checkDecode(t, withChecksums(data)) })
}

// withChecksums returns data with its header and section CRCs recomputed, where the header's
// structure allows; otherwise data unchanged.
func withChecksums(data []byte) []byte {
	if len(data) < prefixSize || string(data[:8]) != Magic {
		return data
	}
	hlen := uint64(binary.LittleEndian.Uint32(data[12:]))
	if hlen < 4 || hlen > uint64(len(data)-prefixSize) {
		return data
	}
	b := bytes.Clone(data)
	end := prefixSize + int(hlen) - 4 // where the header CRC goes
	d := &dec{b: b[:end], pos: prefixSize}
	d.str()
	d.str()
	d.raw(12 + 16)
	d.str()
	n := d.u32()
	off := uint64(end + 4)
	for i := uint32(0); i < n && d.err == nil; i++ {
		d.u32()
		length := d.u64()
		if d.err != nil || length > uint64(len(b))-off {
			break
		}
		slot := d.raw(4)
		if slot == nil {
			break
		}
		binary.LittleEndian.PutUint32(slot, crc32.Checksum(b[off:off+length], castagnoli))
		off += length
	}
	binary.LittleEndian.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
	return b
}

func checkDecode(t *testing.T, data []byte) {
	{
		p, err := Decode(bytes.NewReader(data))
		_, err2 := Decode(streamOnly{bytes.NewReader(data)})
		if (err == nil) != (err2 == nil) {
			t.Fatalf("sized and streamed decoding disagree: %v vs %v", err, err2)
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Detail == "" {
				t.Fatalf("error %v (%T) is not a *FormatError with a detail", err, err)
			}
			return
		}
		var buf bytes.Buffer
		if err := p.Encode(&buf); err != nil {
			t.Fatalf("a decoded plan does not encode: %v", err)
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("re-encoding an accepted input gives different bytes")
		}
		if err := p.Summary(io.Discard); err != nil {
			t.Fatal(err)
		}
	}
}
