package memreg

import (
	"errors"
	"testing"
)

// FuzzRemoteRange checks Remote's range decision against a model with
// arbitrary-precision-safe arithmetic, for MRs anywhere in the IOVA space
// (including its top) and arbitrary va/length. Remote must never panic and
// must return exactly the modelled slice.
func FuzzRemoteRange(f *testing.F) {
	f.Add(uint64(0x1000), uint16(64), uint64(0x1000), uint32(64))
	f.Add(uint64(0x1000), uint16(64), uint64(0x0fff), uint32(1))
	f.Add(uint64(0x1000), uint16(64), uint64(0x1040), uint32(0))
	f.Add(^uint64(0)-64, uint16(64), ^uint64(0)-1, uint32(2))
	f.Add(^uint64(0)-64, uint16(64), ^uint64(0), uint32(0xffffffff))
	f.Add(uint64(0), uint16(0), uint64(0), uint32(0))
	f.Fuzz(func(t *testing.T, iova uint64, size uint16, va uint64, length uint32) {
		tb := NewTable(1)
		pd := tb.AllocPD()
		buf := make([]byte, size)
		for i := range buf {
			buf[i] = byte(i)
		}
		mr, err := pd.RegisterIOVA(buf, iova, RemoteRead)
		if size > 0 && iova > ^uint64(0)-uint64(size) {
			if !errors.Is(err, ErrBadIOVA) {
				t.Fatalf("iova %#x size %d: %v, want ErrBadIOVA", iova, size, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := tb.Remote(mr.RKey(), pd, RemoteRead, va, length)
		ok := va >= iova && va-iova <= uint64(size) && uint64(length) <= uint64(size)-(va-iova)
		if ok != (err == nil) {
			t.Fatalf("iova %#x size %d va %#x len %d: err %v, model ok=%v", iova, size, va, length, err, ok)
		}
		if !ok {
			if !errors.Is(err, ErrRange) {
				t.Fatalf("wrong error %v", err)
			}
			return
		}
		if len(b) != int(length) || (length > 0 && b[0] != byte(va-iova)) {
			t.Fatalf("slice len %d first %v", len(b), b[:min(len(b), 1)])
		}
	})
}
