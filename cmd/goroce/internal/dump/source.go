package dump

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Capture file magics (first four bytes).
const (
	pcapMagicMicro = 0xa1b2c3d4
	pcapMagicNano  = 0xa1b23c4d
	pcapngMagic    = 0x0a0d0d0a // Section Header Block type, palindromic
)

// ErrNotCapture is returned for input that is neither pcap nor pcapng.
var ErrNotCapture = errors.New("not a pcap or pcapng file")

// nextFunc returns the next record; io.EOF at the end.
type nextFunc func() (Record, error)

// Format returns "pcap" or "pcapng" from the first bytes of a file, or "".
func Format(head []byte) string {
	if len(head) < 4 {
		return ""
	}
	le, be := binary.LittleEndian.Uint32(head), binary.BigEndian.Uint32(head)
	switch {
	case le == pcapngMagic:
		return "pcapng"
	case le == pcapMagicMicro, be == pcapMagicMicro, le == pcapMagicNano, be == pcapMagicNano:
		return "pcap"
	}
	return ""
}

// openCapture detects the format by its magic and returns a record reader.
func openCapture(r io.Reader) (nextFunc, string, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	head, err := br.Peek(4)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, "", fmt.Errorf("%w (file shorter than 4 bytes)", ErrNotCapture)
		}
		return nil, "", err
	}
	switch Format(head) {
	case "pcap":
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, "", fmt.Errorf("pcap header: %w", err)
		}
		link := pr.LinkType()
		return func() (Record, error) {
			data, ci, err := pr.ZeroCopyReadPacketData()
			if err != nil {
				return Record{}, err
			}
			return Record{Time: ci.Timestamp, Data: data, OrigLen: ci.Length, LinkType: link}, nil
		}, "pcap", nil
	case "pcapng":
		nr, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true, SkipUnknownVersion: true})
		if err != nil {
			return nil, "", fmt.Errorf("pcapng header: %w", err)
		}
		return func() (Record, error) {
			data, ci, err := nr.ZeroCopyReadPacketData()
			if err != nil {
				return Record{}, err
			}
			link := nr.LinkType()
			if len(ci.AncillaryData) > 0 {
				if l, ok := ci.AncillaryData[0].(layers.LinkType); ok {
					link = l
				}
			}
			return Record{Time: ci.Timestamp, Data: data, OrigLen: ci.Length, LinkType: link}, nil
		}, "pcapng", nil
	}
	return nil, "", fmt.Errorf("%w (starts with % x)", ErrNotCapture, head)
}

// Feed reads every record of a capture stream into d. It returns an error
// only if r is not a readable capture; a file that ends in the middle of a
// record, or holds a corrupt record, is dumped up to that point and the
// problem is recorded as a summary warning.
func (d *Dumper) Feed(r io.Reader) error {
	next, _, err := openCapture(r)
	if err != nil {
		return err
	}
	for !d.Done() {
		rec, err := next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				d.Warn("capture ends in the middle of a record")
			} else {
				d.Warn("capture unreadable after record " + itoa(d.stats.packets) + ": " + err.Error())
			}
			return nil
		}
		d.Packet(rec)
	}
	return nil
}

// DumpFile dumps a pcap or pcapng file ("-" is standard input) to w and
// writes the summary. Unless opts.MTU is set it first reads the file once to
// infer the path MTU (not for standard input, where the MTU is inferred as
// the capture goes). The error is non-nil when the file cannot be opened or
// is not a capture, or when writing fails.
func DumpFile(path string, w io.Writer, opts Options) (Summary, error) {
	var in io.Reader
	if path == "-" {
		in = os.Stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return Summary{}, err
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return Summary{}, fmt.Errorf("%s is a directory", path)
		}
		in = f
	}
	d := New(w, opts)
	if opts.MTU == 0 && path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return Summary{}, err
		}
		next, _, err := openCapture(f)
		if err != nil {
			f.Close()
			return Summary{}, fmt.Errorf("%s: %w", path, err)
		}
		d.SetInferredMTU(InferMTU(func() (Record, bool) {
			rec, err := next()
			return rec, err == nil
		}))
		f.Close()
	}
	if err := d.Feed(in); err != nil {
		return Summary{}, fmt.Errorf("%s: %w", path, err)
	}
	return d.Finish()
}
