package pcapfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/metrics"
	"sort"
	"testing"
	"time"
)

func allocatedBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// allocs returns what fn allocates. The counter is the process's, so a
// result above limit is measured again: only allocation that repeats is fn's
// (the first metrics.Read of a fuzz worker, for one, allocates too).
func allocs(limit uint64, fn func()) uint64 {
	var a uint64
	for range 2 {
		before := allocatedBytes()
		fn()
		if a = allocatedBytes() - before; a <= limit {
			break
		}
	}
	return a
}

// FuzzReader reads arbitrary bytes as a pcap file. Besides not panicking,
// the reader must not allocate much more than the file holds whatever
// lengths its headers claim, every record must come from the file's bytes,
// and the records must survive a round trip through Writer. The seed corpus
// in testdata/fuzz/FuzzReader is cut from the rxe captures (regenerate with
// PCAPFILE_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus).
func FuzzReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var recs []Record
		var err error
		limit := 1<<20 + 4*uint64(len(data))
		if a := allocs(limit, func() { recs, err = ReadAll(bytes.NewReader(data)) }); a > limit {
			t.Fatalf("%d input bytes: %d bytes allocated (%d records, %v)", len(data), a, len(recs), err)
		}
		if len(data) >= 24 && !isMagic(data) && !errors.Is(err, ErrNotPcap) {
			t.Fatalf("no pcap magic: %v", err)
		}
		if len(recs) == 0 {
			return
		}
		total := 24
		for _, r := range recs {
			total += 16 + len(r.Data)
		}
		if total > len(data) {
			t.Fatalf("%d records with %d bytes from a %d-byte file", len(recs), total, len(data))
		}
		// Every record is the bytes at its place in the file.
		off := 24 + 16
		for i, r := range recs {
			if !bytes.Equal(r.Data, data[off:off+len(r.Data)]) {
				t.Fatalf("record %d is not the file's bytes at %d", i, off)
			}
			off += len(r.Data) + 16
		}
		var b bytes.Buffer
		w, werr := NewWriter(&b, LinkTypeEthernet)
		if werr != nil {
			t.Fatal(werr)
		}
		for _, r := range recs {
			if err := w.WritePacket(r.Time, r.Data); err != nil {
				t.Fatal(err)
			}
		}
		back, err := ReadAll(&b)
		if err != nil || len(back) != len(recs) {
			t.Fatalf("round trip: %d of %d records, %v", len(back), len(recs), err)
		}
		for i := range recs {
			// The writer keeps 32-bit seconds, as the format does; a
			// microsecond fraction of a second above 10^6 moves a record
			// past that.
			if !bytes.Equal(back[i].Data, recs[i].Data) || (recs[i].Time.Unix() < 1<<32 && !back[i].Time.Equal(recs[i].Time)) {
				t.Fatalf("round trip of record %d: %v %d bytes, want %v %d bytes", i, back[i].Time, len(back[i].Data), recs[i].Time, len(recs[i].Data))
			}
		}
	})
}

var recTime = time.Unix(1700000000, 5000).UTC()

func isMagic(b []byte) bool {
	for _, m := range []uint32{binary.LittleEndian.Uint32(b), binary.BigEndian.Uint32(b)} {
		if m == magicMicro || m == magicNano {
			return true
		}
	}
	return false
}

// TestHugeRecordLength: a record header claiming 64 MiB in a tiny file is
// an error, not a 64 MiB allocation.
func TestHugeRecordLength(t *testing.T) {
	for _, incl := range []uint32{1 << 26, 1<<26 + 1, 0xffffffff, 1 << 20} {
		data := binary.LittleEndian.AppendUint32(nil, magicNano)
		data = append(data, make([]byte, 20)...)
		binary.LittleEndian.PutUint32(data[16:], 0xffffffff) // snaplen
		rec := make([]byte, 16)
		binary.LittleEndian.PutUint32(rec[8:], incl)
		binary.LittleEndian.PutUint32(rec[12:], incl)
		data = append(append(data, rec...), "some bytes"...)
		var recs []Record
		var err error
		if a := allocs(1<<20, func() { recs, err = ReadAll(bytes.NewReader(data)) }); a > 1<<20 {
			t.Errorf("record length %#x: %d bytes allocated", incl, a)
		}
		if err == nil || len(recs) != 0 {
			t.Errorf("record length %#x: %d records, %v", incl, len(recs), err)
		}
	}
}

// TestLargeRecord: a record above the eager-allocation size is read whole.
func TestLargeRecord(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b, LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 100000)
	for _, d := range [][]byte{[]byte("small"), big, []byte("after")} {
		if err := w.WritePacket(recTime, d); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := ReadAll(&b)
	if err != nil || len(recs) != 3 || !bytes.Equal(recs[1].Data, big) || string(recs[2].Data) != "after" {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	// Cut inside the large record.
	b.Reset()
	w, _ = NewWriter(&b, LinkTypeEthernet)
	w.WritePacket(recTime, big)
	cut := b.Bytes()[:b.Len()-1000]
	if recs, err := ReadAll(bytes.NewReader(cut)); err == nil || !errors.Is(err, io.ErrUnexpectedEOF) || len(recs) != 0 {
		t.Fatalf("cut large record: %d records, %v", len(recs), err)
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzReader: the first
// records of every rxe capture, the other byte order and resolution, a cut
// file, and records claiming huge lengths. It only runs with
// PCAPFILE_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("PCAPFILE_WRITE_CORPUS") != "1" {
		t.Skip("set PCAPFILE_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzReader")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		s := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := filepath.Glob("../../testdata/rxe/*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	sort.Strings(files)
	for _, fn := range files[:4] {
		whole, err := os.ReadFile(fn)
		if err != nil {
			t.Fatal(err)
		}
		n := 24
		for k := 0; k < 6 && n+16 <= len(whole); k++ {
			n += 16 + int(binary.LittleEndian.Uint32(whole[n+8:]))
		}
		name := filepath.Base(fn)
		write("head_"+name[:len(name)-5], whole[:n])
		if fn == files[0] {
			write("cut_"+name[:len(name)-5], whole[:n-5])
			write("header_only", whole[:24])
			// Big-endian, microseconds.
			be := bytes.Clone(whole[:n])
			binary.BigEndian.PutUint32(be[0:], magicMicro)
			for i := 4; i < 24; i += 4 {
				binary.BigEndian.PutUint32(be[i:], binary.LittleEndian.Uint32(whole[i:]))
			}
			binary.BigEndian.PutUint16(be[4:], 2)
			binary.BigEndian.PutUint16(be[6:], 4)
			for off := 24; off+16 <= n; {
				l := binary.LittleEndian.Uint32(whole[off+8:])
				for i := 0; i < 16; i += 4 {
					binary.BigEndian.PutUint32(be[off+i:], binary.LittleEndian.Uint32(whole[off+i:]))
				}
				binary.BigEndian.PutUint32(be[off+4:], binary.LittleEndian.Uint32(whole[off+4:])/1000)
				off += 16 + int(l)
			}
			write("head_be_usec_"+name[:len(name)-5], be)
			huge := bytes.Clone(whole[:24+16+10])
			binary.LittleEndian.PutUint32(huge[16:], 0xffffffff)
			binary.LittleEndian.PutUint32(huge[24+8:], 1<<26)
			write("record_64MiB", huge)
			binary.LittleEndian.PutUint32(huge[24+8:], 0xfffffff0)
			write("record_4GiB", huge)
		}
	}
}
