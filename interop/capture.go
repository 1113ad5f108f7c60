//go:build linux

package interop

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
)

// Capture is a tcpdump running on the bridge, writing a pcap file.
type Capture struct {
	Path string
	h    *Harness
	cmd  *exec.Cmd
	errb bytes.Buffer
	mu   sync.Mutex // guards errb while tcpdump writes it
	once sync.Once
	done chan struct{}
	stat CaptureStats
	err  error
}

// CaptureStats are tcpdump's own counts, printed when it stops.
type CaptureStats struct {
	Captured         int
	ReceivedByFilter int
	DroppedByKernel  int
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Capture starts tcpdump on the bridge (every frame between the VMs and the
// host namespace) writing a pcap to path, with an optional BPF filter such as
// "udp port 4791 or tcp". It returns once tcpdump is listening.
func (h *Harness) Capture(path string, filter ...string) (*Capture, error) {
	c := &Capture{Path: path, h: h, done: make(chan struct{})}
	// -B 32768: a large kernel buffer; no --immediate-mode (it loses more on a
	// busy 2-core machine); -Z root so tcpdump keeps the right to write path.
	args := []string{"netns", "exec", h.ns, "tcpdump", "-i", bridgeIface, "-n", "-B", "32768",
		"-s", "262144", "-Z", "root", "-w", path}
	if f := strings.TrimSpace(strings.Join(filter, " ")); f != "" {
		args = append(args, f)
	}
	c.cmd = exec.Command("ip", args...)
	c.cmd.Stderr = lockedWriter{&c.mu, &c.errb}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		c.stopProcess()
		return nil, errors.New("interop: harness closed")
	}
	h.captures = append(h.captures, c)
	h.mu.Unlock()
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		listening := strings.Contains(c.errb.String(), "listening on")
		c.mu.Unlock()
		if listening {
			return c, nil
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("interop: tcpdump exited: %v: %s", c.err, c.stderr())
		case <-deadline:
			c.stopProcess()
			return nil, fmt.Errorf("interop: tcpdump not listening after 30s: %s", c.stderr())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Capture) stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.TrimSpace(c.errb.String())
}

// Stop waits 2 s (tcpdump loses the last ring block if stopped sooner after
// the traffic on a loaded machine), stops tcpdump with SIGINT and returns its
// counts. Call it after the traffic has ended.
func (c *Capture) Stop() (CaptureStats, error) {
	select {
	case <-c.done:
	case <-time.After(2 * time.Second):
	}
	c.stopProcess()
	s := c.stderr()
	for _, m := range []struct {
		re  *regexp.Regexp
		dst *int
	}{
		{regexp.MustCompile(`(\d+) packets? captured`), &c.stat.Captured},
		{regexp.MustCompile(`(\d+) packets? received by filter`), &c.stat.ReceivedByFilter},
		{regexp.MustCompile(`(\d+) packets? dropped by kernel`), &c.stat.DroppedByKernel},
	} {
		if sm := m.re.FindStringSubmatch(s); sm != nil {
			*m.dst, _ = strconv.Atoi(sm[1])
		}
	}
	if !strings.Contains(s, "captured") {
		return c.stat, fmt.Errorf("interop: tcpdump did not end cleanly: %v: %s", c.err, s)
	}
	return c.stat, nil
}

func (c *Capture) stopProcess() {
	c.once.Do(func() {
		select {
		case <-c.done:
			return
		default:
		}
		c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			c.cmd.Process.Kill()
			<-c.done
		}
	})
}

// RoCEv2 constants used to classify captured frames.
const (
	rocePort  = 4791
	etherIPv4 = 0x0800
	etherIPv6 = 0x86DD
	etherVLAN = 0x8100
)

// Opcode names (IBTA vol. 1 table 38) for logs.
var opNames = map[byte]string{
	0x00: "RC SEND FIRST", 0x01: "RC SEND MIDDLE", 0x02: "RC SEND LAST", 0x03: "RC SEND LAST IMM",
	0x04: "RC SEND ONLY", 0x05: "RC SEND ONLY IMM", 0x06: "RC WRITE FIRST", 0x07: "RC WRITE MIDDLE",
	0x08: "RC WRITE LAST", 0x09: "RC WRITE LAST IMM", 0x0a: "RC WRITE ONLY", 0x0b: "RC WRITE ONLY IMM",
	0x0c: "RC READ REQUEST", 0x0d: "RC READ RESPONSE FIRST", 0x0e: "RC READ RESPONSE MIDDLE",
	0x0f: "RC READ RESPONSE LAST", 0x10: "RC READ RESPONSE ONLY", 0x11: "RC ACK", 0x12: "RC ATOMIC ACK",
	0x13: "RC COMPARE SWAP", 0x14: "RC FETCH ADD", 0x64: "UD SEND ONLY", 0x65: "UD SEND ONLY IMM",
	0x81: "CNP",
}

// OpcodeName names a BTH opcode.
func OpcodeName(op byte) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("opcode 0x%02x", op)
}

// PcapSummary counts the frames of a capture.
type PcapSummary struct {
	Frames  int          // all records
	RoCE    int          // UDP to port 4791 with at least a BTH
	Opcodes map[byte]int // RoCEv2 frames by BTH opcode
	TCP     int          // TCP segments (the tools' out-of-band exchange)
}

func (s PcapSummary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d frames, %d RoCEv2, %d TCP", s.Frames, s.RoCE, s.TCP)
	for op := 0; op < 256; op++ {
		if n := s.Opcodes[byte(op)]; n > 0 {
			fmt.Fprintf(&b, "; %s: %d", OpcodeName(byte(op)), n)
		}
	}
	return b.String()
}

// SummarizePcap reads a pcap file of Ethernet frames and counts RoCEv2
// packets (IPv4 or IPv6, UDP destination port 4791) by BTH opcode.
func SummarizePcap(path string) (PcapSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return PcapSummary{}, err
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		return PcapSummary{}, err
	}
	if r.LinkType != pcapfile.LinkTypeEthernet {
		return PcapSummary{}, fmt.Errorf("interop: %s: link type %d, want Ethernet", path, r.LinkType)
	}
	s := PcapSummary{Opcodes: map[byte]int{}}
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return s, err
		}
		s.Frames++
		proto, l4 := l4Payload(rec.Data)
		switch {
		case proto == 6:
			s.TCP++
		case proto == 17 && len(l4) >= 8+12 && binary.BigEndian.Uint16(l4[2:]) == rocePort:
			s.RoCE++
			s.Opcodes[l4[8]]++
		}
	}
}

// l4Payload returns the IP protocol and the bytes after the IP header of an
// Ethernet frame (proto 0 when it is not IP or too short).
func l4Payload(frame []byte) (byte, []byte) {
	if len(frame) < 14 {
		return 0, nil
	}
	et := binary.BigEndian.Uint16(frame[12:])
	p := frame[14:]
	if et == etherVLAN && len(p) >= 4 {
		et = binary.BigEndian.Uint16(p[2:])
		p = p[4:]
	}
	switch et {
	case etherIPv4:
		if len(p) < 20 || p[0]>>4 != 4 {
			return 0, nil
		}
		ihl := int(p[0]&0x0f) * 4
		if ihl < 20 || len(p) < ihl {
			return 0, nil
		}
		return p[9], p[ihl:]
	case etherIPv6:
		if len(p) < 40 {
			return 0, nil
		}
		return p[6], p[40:]
	}
	return 0, nil
}
