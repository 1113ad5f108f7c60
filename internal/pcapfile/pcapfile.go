// Package pcapfile reads and writes classic libpcap capture files (the
// microsecond and nanosecond variants, either byte order) with the standard
// library only, so that wire's golden tests and the in-memory link's tap need
// no third-party code. pcapng is handled by the tools through gopacket.
package pcapfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// LinkTypeEthernet is DLT_EN10MB.
const LinkTypeEthernet = 1

const (
	magicMicro = 0xa1b2c3d4
	magicNano  = 0xa1b23c4d
)

// ErrNotPcap is returned by NewReader for input that is not a pcap file.
var ErrNotPcap = errors.New("pcapfile: not a pcap file")

// Record is one captured packet. Data is only valid until the next call to Next.
type Record struct {
	Time    time.Time
	Data    []byte // captured bytes (may be shorter than OrigLen)
	OrigLen int
}

// Reader reads records from a pcap stream.
type Reader struct {
	r        io.Reader
	order    binary.ByteOrder
	nano     bool
	Snaplen  uint32
	LinkType uint32
	hdr      [16]byte
	buf      []byte
}

// NewReader reads the file header.
func NewReader(r io.Reader) (*Reader, error) {
	var h [24]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("pcapfile: reading header: %w", err)
	}
	rd := &Reader{r: r}
	switch {
	case binary.LittleEndian.Uint32(h[0:]) == magicMicro:
		rd.order = binary.LittleEndian
	case binary.BigEndian.Uint32(h[0:]) == magicMicro:
		rd.order = binary.BigEndian
	case binary.LittleEndian.Uint32(h[0:]) == magicNano:
		rd.order, rd.nano = binary.LittleEndian, true
	case binary.BigEndian.Uint32(h[0:]) == magicNano:
		rd.order, rd.nano = binary.BigEndian, true
	default:
		return nil, ErrNotPcap
	}
	rd.Snaplen = rd.order.Uint32(h[16:])
	rd.LinkType = rd.order.Uint32(h[20:]) & 0x0FFFFFFF
	return rd, nil
}

// Next returns the next record, or io.EOF at the end of the file.
func (rd *Reader) Next() (Record, error) {
	if _, err := io.ReadFull(rd.r, rd.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return Record{}, fmt.Errorf("pcapfile: truncated record header: %w", err)
		}
		return Record{}, err
	}
	sec := rd.order.Uint32(rd.hdr[0:])
	frac := rd.order.Uint32(rd.hdr[4:])
	incl := rd.order.Uint32(rd.hdr[8:])
	orig := rd.order.Uint32(rd.hdr[12:])
	if incl > 1<<26 {
		return Record{}, fmt.Errorf("pcapfile: record length %d too large", incl)
	}
	if err := rd.readData(int(incl)); err != nil {
		return Record{}, fmt.Errorf("pcapfile: truncated record: %w", err)
	}
	ns := int64(frac) * 1000
	if rd.nano {
		ns = int64(frac)
	}
	return Record{Time: time.Unix(int64(sec), ns).UTC(), Data: rd.buf, OrigLen: int(orig)}, nil
}

// eagerMax is the longest record whose buffer is allocated before it is
// read. Lengths come from the file, so a longer record's buffer grows with
// the bytes actually read: a 40-byte file cannot make the reader allocate
// the 64 MiB its record header claims.
const eagerMax = 256 << 10

// readData reads n bytes into rd.buf. A record cut short is
// io.ErrUnexpectedEOF even when none of its bytes are there: only the end
// of the file between records is io.EOF.
func (rd *Reader) readData(n int) error {
	if n <= max(eagerMax, cap(rd.buf)) {
		if cap(rd.buf) < n {
			rd.buf = make([]byte, n)
		}
		rd.buf = rd.buf[:n]
		_, err := io.ReadFull(rd.r, rd.buf)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	b := bytes.NewBuffer(rd.buf[:0])
	m, err := io.CopyN(b, rd.r, int64(n))
	rd.buf = b.Bytes()
	if err == io.EOF || (err == nil && m < int64(n)) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// ReadAll returns copies of every record in r.
func ReadAll(r io.Reader) ([]Record, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	var out []Record
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		rec.Data = append([]byte(nil), rec.Data...)
		out = append(out, rec)
	}
}

// ReadFile returns copies of every record in the pcap file at path.
func ReadFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f)
}

// Writer writes a nanosecond-resolution little-endian pcap stream. It is not
// safe for concurrent use.
type Writer struct {
	w   io.Writer
	hdr [16]byte
}

// NewWriter writes the file header (snaplen 262144, Ethernet unless told otherwise).
func NewWriter(w io.Writer, linkType uint32) (*Writer, error) {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], magicNano)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], 262144)
	binary.LittleEndian.PutUint32(h[20:], linkType)
	if _, err := w.Write(h[:]); err != nil {
		return nil, err
	}
	return &Writer{w: w}, nil
}

// WritePacket appends one record.
func (wr *Writer) WritePacket(t time.Time, data []byte) error {
	binary.LittleEndian.PutUint32(wr.hdr[0:], uint32(t.Unix()))
	binary.LittleEndian.PutUint32(wr.hdr[4:], uint32(t.Nanosecond()))
	binary.LittleEndian.PutUint32(wr.hdr[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(wr.hdr[12:], uint32(len(data)))
	if _, err := wr.w.Write(wr.hdr[:]); err != nil {
		return err
	}
	_, err := wr.w.Write(data)
	return err
}
