//go:build linux

package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"golang.org/x/sys/unix"
)

// liveness bounds how long a test waits for something that must happen; it
// guards against hangs and is never a performance threshold.
const liveness = 20 * time.Second

// frameSizeFor gives frame seq a size between 64 and 1498 bytes.
func frameSizeFor(seq uint32) int { return 64 + int(seq*37)%1435 }

// sendFrames sends n numbered UDP frames (seq from first) to dport in
// batches.
func sendFrames(t *testing.T, l *Link, p *vethPair, dst net.HardwareAddr, first, n int, dport uint16) {
	t.Helper()
	sendSized(t, l, p, dst, first, n, dport, frameSizeFor)
}

// sendSized is sendFrames with frame seq of size(seq) bytes.
func sendSized(t *testing.T, l *Link, p *vethPair, dst net.HardwareAddr, first, n int, dport uint16, size func(uint32) int) {
	t.Helper()
	batch := make([][]byte, 0, l.BatchSize())
	bufs := make([][]byte, l.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, l.MTU()+ethHeaderLen)
	}
	for seq := first; seq < first+n; {
		batch = batch[:0]
		for len(batch) < cap(batch) && seq < first+n {
			batch = append(batch, buildFrame(bufs[len(batch)], size(uint32(seq)), dst, l.HardwareAddr(), p.ipA, p.ipB, dport, uint32(seq)))
			seq++
		}
		m, err := l.WriteBatch(batch)
		if err != nil || m != len(batch) {
			t.Fatalf("WriteBatch: %d of %d, %v", m, len(batch), err)
		}
	}
}

// receiveFrames reads until n frames arrived (or the liveness bound) and
// checks that they are frames first..first+n-1, intact and in order.
func receiveFrames(l *Link, first, n int) error {
	return receiveSized(l, first, n, 2048, frameSizeFor)
}

// receiveSized is receiveFrames into buffers of bufSize bytes, with frame
// seq of size(seq) bytes.
func receiveSized(l *Link, first, n, bufSize int, size func(uint32) int) error {
	bufs := make([][]byte, l.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, bufSize)
	}
	sizes := make([]int, len(bufs))
	next := first
	for next < first+n {
		k, err := l.ReadBatch(bufs, sizes)
		if err != nil {
			return fmt.Errorf("after %d frames: %w", next-first, err)
		}
		for i := range k {
			f := bufs[i][:sizes[i]]
			seq, err := checkFrame(f)
			if err != nil {
				return err
			}
			if int(seq) != next {
				return fmt.Errorf("got seq %d, want %d (loss or reordering)", seq, next)
			}
			if want := size(seq); len(f) != want {
				return fmt.Errorf("seq %d: %d bytes, want %d", seq, len(f), want)
			}
			next++
		}
	}
	return nil
}

// readAsync runs receiveFrames in a goroutine; the returned func waits for
// it, closing l if it does not finish within the liveness bound.
func readAsync(l *Link, first, n int) func() error {
	return readSizedAsync(l, first, n, 2048, frameSizeFor)
}

// readSizedAsync is readAsync with receiveSized.
func readSizedAsync(l *Link, first, n, bufSize int, size func(uint32) int) func() error {
	done := make(chan error, 1)
	go func() { done <- receiveSized(l, first, n, bufSize, size) }()
	return func() error {
		select {
		case err := <-done:
			return err
		case <-time.After(liveness):
			l.Close()
			return fmt.Errorf("receiver stuck (%v), stats %+v kernel %+v: %w", liveness, l.Stats(), l.KernelStats(), <-done)
		}
	}
}

// Copy-mode links transmit on a socket of their own sharing the UMEM
// (txsock.go) unless Options.OneSocket; both layouts carry the same frames.
func TestVethTransfer(t *testing.T) {
	for _, fs := range []int{4096, 2048} {
		for _, one := range []bool{false, true} {
			t.Run(fmt.Sprintf("frame%d/oneSocket=%v", fs, one), func(t *testing.T) { testVethTransfer(t, fs, one) })
		}
	}
}

func testVethTransfer(t *testing.T, frameSize int, oneSocket bool) {
	p := newVethPair(t, 1500)
	a := p.open(t, p.nsA, p.ifA, Options{FrameSize: frameSize, OneSocket: oneSocket})
	b := p.open(t, p.nsB, p.ifB, Options{FrameSize: frameSize, OneSocket: oneSocket})
	t.Logf("attach mode on veth: a=%s b=%s zerocopy=%v mtu=%d", a.Mode(), b.Mode(), b.ZeroCopy(), b.MTU())
	for _, l := range []*Link{a, b} {
		if split := l.txfd >= 0; !l.ZeroCopy() && split == oneSocket {
			t.Errorf("copy mode, OneSocket %v: transmit socket of its own %v", oneSocket, split)
		}
	}
	if b.MTU() != 1500 {
		t.Errorf("MTU %d, want 1500", b.MTU())
	}
	if b.HardwareAddr().String() != p.macB.String() {
		t.Errorf("HardwareAddr %s, want %s", b.HardwareAddr(), p.macB)
	}
	if !xdpShown(t, p.nsB, p.ifB) {
		t.Errorf("ip link show: no XDP program on %s after Open", p.ifB)
	}

	// N is below the receive ring size (NumFrames/2 = 2048), so the
	// frames fit even if the receiver gets no CPU until the sender is done:
	// AF_XDP has no flow control, an overrun ring drops (and counts).
	const N = 1000
	// a → b, then b → a.
	wait := readAsync(b, 0, N)
	sendFrames(t, a, p, p.macB, 0, N, roceUDPPort)
	if err := wait(); err != nil {
		t.Fatalf("a→b: %v", err)
	}
	wait = readAsync(a, N, N)
	sendFrames(t, b, p, p.macA, N, N, roceUDPPort)
	if err := wait(); err != nil {
		t.Fatalf("b→a: %v", err)
	}

	sa, sb := a.Stats(), b.Stats()
	t.Logf("a: %+v\nb: %+v", sa, sb)
	if sa.TxFrames != N || sb.RxFrames != N || sb.TxFrames != N || sa.RxFrames != N {
		t.Errorf("frame counters: a tx %d rx %d, b tx %d rx %d; want %d each", sa.TxFrames, sa.RxFrames, sb.TxFrames, sb.RxFrames, N)
	}
	if sa.TxBytes != sb.RxBytes || sa.TxBytes == 0 {
		t.Errorf("a sent %d bytes, b received %d", sa.TxBytes, sb.RxBytes)
	}
	if sa.RxDrops != 0 || sb.RxDrops != 0 {
		t.Errorf("rx drops: a %d b %d", sa.RxDrops, sb.RxDrops)
	}
	if sa.Wakeups == 0 {
		t.Errorf("no TX kick counted (copy mode needs them)")
	}
	checkVLAN(t, p, a, b)
}

// checkVLAN sends 802.1Q-tagged RoCEv2 frames a → b and checks they are
// steered to b's socket with the tag in place.
func checkVLAN(t *testing.T, p *vethPair, a, b *Link) {
	t.Helper()
	const n = 10
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = withVLAN(buildFrame(make([]byte, 200), 200, p.macB, p.macA, p.ipA, p.ipB, roceUDPPort, uint32(i)), 0x8100)
	}
	done := make(chan error, 1)
	go func() {
		bufs, sizes := make([][]byte, n), make([]int, n)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		for next := 0; next < n; {
			k, err := b.ReadBatch(bufs, sizes)
			if err != nil {
				done <- err
				return
			}
			for i := range k {
				f := bufs[i][:sizes[i]]
				if len(f) != 204 || binary.BigEndian.Uint16(f[12:]) != 0x8100 || binary.BigEndian.Uint16(f[14:]) != 100 {
					done <- fmt.Errorf("frame %d: tag lost or mangled: % x", next, f[:min(len(f), 20)])
					return
				}
				seq, err := checkFrame(append(f[:12:12], f[16:]...))
				if err != nil || int(seq) != next {
					done <- fmt.Errorf("tagged frame %d: seq %d, %v", next, seq, err)
					return
				}
				next++
			}
		}
		done <- nil
	}()
	if m, err := a.WriteBatch(frames); m != n || err != nil {
		t.Fatalf("WriteBatch tagged: %d, %v", m, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("802.1Q: %v", err)
		}
	case <-time.After(liveness):
		b.Close()
		t.Fatal("802.1Q-tagged RoCEv2 frames never reached AF_XDP")
	}
}

// TestVethOneSided has AF_XDP on b only; a is the kernel with a raw
// AF_PACKET socket, and AttachPassProgram on a as PERF-FACTS.md advises for
// native XDP on veth. Frames go both ways.
func TestVethOneSided(t *testing.T) {
	p := newVethPair(t, 1500)
	b := p.open(t, p.nsB, p.ifB, Options{})
	var pass io.Closer
	var fd, ifi int
	err := inNS(p.nsA, func() (err error) {
		if os.Getenv("AFXDP_NO_PEER_PROG") == "" {
			if pass, err = AttachPassProgram(p.ifA); err != nil {
				return err
			}
		}
		i, err := net.InterfaceByName(p.ifA)
		if err != nil {
			return err
		}
		ifi = i.Index
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if pass != nil && !xdpShown(t, p.nsA, p.ifA) {
		t.Errorf("no XDP program on %s after AttachPassProgram", p.ifA)
	}

	const N = 200
	// a (AF_PACKET) → b (AF_XDP).
	wait := readAsync(b, 0, N)
	buf := make([]byte, 1514)
	for seq := range N {
		f := buildFrame(buf, frameSizeFor(uint32(seq)), p.macB, p.macA, p.ipA, p.ipB, roceUDPPort, uint32(seq))
		if err := unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifi}); err != nil {
			t.Fatalf("AF_PACKET sendto: %v", err)
		}
	}
	if err := wait(); err != nil {
		t.Fatalf("AF_PACKET→AF_XDP: %v", err)
	}

	// b (AF_XDP) → a (AF_PACKET).
	tv := unix.NsecToTimeval(liveness.Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) // hold all N frames
	sendFrames(t, b, p, p.macA, 0, N, roceUDPPort)
	rbuf := make([]byte, 2048)
	for next := 0; next < N; {
		n, from, err := unix.Recvfrom(fd, rbuf, 0)
		if err != nil {
			t.Fatalf("AF_PACKET recv after %d frames: %v", next, err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f := rbuf[:n]
		if len(f) < 42 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || binary.BigEndian.Uint16(f[36:]) != roceUDPPort {
			continue // ARP, IPv6 ND and the like
		}
		seq, err := checkFrame(f)
		if err != nil || int(seq) != next {
			t.Fatalf("AF_XDP→AF_PACKET: seq %d want %d, %v", seq, next, err)
		}
		next++
	}

	if pass != nil {
		if err := pass.Close(); err != nil {
			t.Errorf("closing pass program: %v", err)
		}
		if xdpShown(t, p.nsA, p.ifA) {
			t.Errorf("XDP program still on %s after closing the pass program", p.ifA)
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestKernelTrafficPasses checks that with the program on both ends the
// kernel still does ARP, UDP on other ports and TCP, and that a kernel UDP
// socket's datagrams to port 4791 are steered into AF_XDP.
func TestKernelTrafficPasses(t *testing.T) {
	p := newVethPair(t, 1500)
	p.open(t, p.nsA, p.ifA, Options{})
	b := p.open(t, p.nsB, p.ifB, Options{})

	var udpB *net.UDPConn
	var tcpB net.Listener
	err := inNS(p.nsB, func() (err error) {
		if udpB, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.ipB, Port: 9999}); err != nil {
			return err
		}
		tcpB, err = net.Listen("tcp4", "198.18.20.2:9998")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer udpB.Close()
	defer tcpB.Close()
	go func() {
		c, err := tcpB.Accept()
		if err == nil {
			io.Copy(c, c)
			c.Close()
		}
	}()

	var udpA *net.UDPConn
	var tcpA net.Conn
	err = inNS(p.nsA, func() (err error) {
		if udpA, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.ipB, Port: 9999}); err != nil {
			return err
		}
		d := net.Dialer{Timeout: liveness}
		tcpA, err = d.Dial("tcp4", "198.18.20.2:9998")
		return err
	})
	if err != nil {
		t.Fatalf("TCP through the XDP program: %v", err)
	}
	defer udpA.Close()
	defer tcpA.Close()

	// TCP echo.
	tcpA.SetDeadline(time.Now().Add(liveness))
	msg := []byte("through the kernel")
	if _, err := tcpA.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(tcpA, got); err != nil || string(got) != string(msg) {
		t.Fatalf("TCP echo: %q, %v", got, err)
	}
	// UDP to a non-RoCE port reaches the kernel socket.
	if _, err := udpA.Write([]byte("udp 9999")); err != nil {
		t.Fatal(err)
	}
	udpB.SetReadDeadline(time.Now().Add(liveness))
	n, err := udpB.Read(got)
	if err != nil || string(got[:n]) != "udp 9999" {
		t.Fatalf("UDP 9999: %q, %v", got[:n], err)
	}
	// ICMP echo, if ping is installed.
	if _, err := exec.LookPath("ping"); err == nil {
		out, err := exec.Command("ip", "netns", "exec", p.nsA, "ping", "-c", "2", "-i", "0.2", "-W", "5", "198.18.20.2").CombinedOutput()
		if err != nil {
			t.Errorf("ping through the XDP program: %v\n%s", err, out)
		}
	} else {
		t.Log("ping not installed: ICMP not checked")
	}
	// A kernel UDP datagram to 4791 is steered to AF_XDP, not the stack.
	var u4791 *net.UDPConn
	if err := inNS(p.nsA, func() (err error) {
		u4791, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.ipB, Port: roceUDPPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer u4791.Close()
	if _, err := u4791.Write([]byte("steered to AF_XDP")); err != nil {
		t.Fatal(err)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadBatch(bufs, sizes)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(liveness):
		b.Close()
		t.Fatal("UDP 4791 from the kernel never reached AF_XDP")
	}
	f := bufs[0][:sizes[0]]
	if !strings.HasSuffix(string(f), "steered to AF_XDP") {
		t.Errorf("AF_XDP got %x", f)
	}
}

func TestCloseWakesAndDetaches(t *testing.T) {
	p := newVethPair(t, 1500)
	b := p.open(t, p.nsB, p.ifB, Options{})
	if !xdpShown(t, p.nsB, p.ifB) {
		t.Fatalf("no XDP program on %s after Open", p.ifB)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadBatch(bufs, sizes)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it block in poll (either way it must end with ErrClosed)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, nic.ErrClosed) {
			t.Errorf("blocked ReadBatch returned %v, want ErrClosed", err)
		}
	case <-time.After(liveness):
		t.Fatal("Close did not wake a blocked ReadBatch")
	}
	if xdpShown(t, p.nsB, p.ifB) {
		t.Errorf("ip link show still lists an XDP program on %s after Close", p.ifB)
	}
	if _, err := b.ReadBatch(bufs, sizes); !errors.Is(err, nic.ErrClosed) {
		t.Errorf("ReadBatch after Close: %v", err)
	}
	if _, err := b.WriteBatch([][]byte{make([]byte, 64)}); !errors.Is(err, nic.ErrClosed) {
		t.Errorf("WriteBatch after Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_ = b.Stats() // still answers after Close

	// The interface is free again: a new Link attaches.
	b2 := p.open(t, p.nsB, p.ifB, Options{})
	b2.Close()
}

// TestMTU9000SingleBuffer is the behaviour on a kernel without multi-buffer
// AF_XDP (Options.SingleBuffer): native mode is refused on a veth with MTU
// 9000, Open falls back to generic mode, and the MTU is capped by the chunk.
func TestMTU9000SingleBuffer(t *testing.T) {
	p := newVethPair(t, 9000)
	err := inNS(p.nsA, func() error {
		l, err := Open(p.ifA, 0, Options{Mode: ModeNative, SingleBuffer: true})
		if err == nil {
			l.Close()
		}
		return err
	})
	if !errors.Is(err, unix.ERANGE) {
		t.Errorf("ModeNative at MTU 9000: %v, want ERANGE", err)
	}
	a := p.open(t, p.nsA, p.ifA, Options{SingleBuffer: true})
	b := p.open(t, p.nsB, p.ifB, Options{SingleBuffer: true})
	t.Logf("MTU 9000: mode %s, reported MTU %d", b.Mode(), b.MTU())
	if b.Mode() != "generic" || b.MultiBuffer() {
		t.Errorf("mode %q multi-buffer %v at MTU 9000, want generic single-buffer (native needs xdp.frags)", b.Mode(), b.MultiBuffer())
	}
	if want := 4096 - 256 - 18; b.MTU() != want {
		t.Errorf("MTU %d, want %d", b.MTU(), want)
	}
	const N = 300
	wait := readAsync(b, 0, N)
	sendFrames(t, a, p, p.macB, 0, N, roceUDPPort)
	if err := wait(); err != nil {
		t.Fatalf("generic mode a→b: %v", err)
	}
	checkVLAN(t, p, a, b)
}

// TestWriteBackPressure writes one batch much larger than the transmit
// chunks and TX ring (32 each with NumFrames 64): WriteBatch must reap
// completions and wait, and accept every frame; an oversized frame is
// dropped, counted, and accepted.
func TestWriteBackPressure(t *testing.T) {
	p := newVethPair(t, 1500)
	a := p.open(t, p.nsA, p.ifA, Options{NumFrames: 64})
	b := p.open(t, p.nsB, p.ifB, Options{})
	wait := readAsync(b, 0, 1) // something must arrive
	const n = 500
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = buildFrame(make([]byte, 1514), frameSizeFor(uint32(i)), p.macB, p.macA, p.ipA, p.ipB, roceUDPPort, uint32(i))
	}
	frames[n/2] = make([]byte, 5000)
	m, err := a.WriteBatch(frames)
	if m != n || err != nil {
		t.Fatalf("WriteBatch: %d of %d, %v", m, n, err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	s := a.Stats()
	t.Logf("a: %+v", s)
	if s.TxFrames != n-1 || s.TxDrops != 1 {
		t.Errorf("TxFrames %d TxDrops %d, want %d and 1", s.TxFrames, s.TxDrops, n-1)
	}
	if s.RingFull == 0 {
		t.Errorf("RingFull 0: the batch should have exhausted 32 transmit chunks")
	}
}

// TestInterfaceRemoved deletes the veth under open Links: WriteBatch must
// not wait forever, and Close must still wake ReadBatch and return.
func TestInterfaceRemoved(t *testing.T) {
	p := newVethPair(t, 1500)
	a := p.open(t, p.nsA, p.ifA, Options{NumFrames: 64})
	b := p.open(t, p.nsB, p.ifB, Options{})
	readDone := make(chan error, 1)
	go func() {
		bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
		_, err := b.ReadBatch(bufs, sizes)
		readDone <- err
	}()
	run(t, "ip", "-n", p.nsA, "link", "del", p.ifA) // removes both ends

	frames := make([][]byte, 200)
	for i := range frames {
		frames[i] = buildFrame(make([]byte, 1514), 1000, p.macB, p.macA, p.ipA, p.ipB, roceUDPPort, uint32(i))
	}
	writeDone := make(chan error, 1)
	go func() {
		_, err := a.WriteBatch(frames)
		writeDone <- err
	}()
	select {
	case err := <-writeDone:
		if err == nil {
			t.Error("WriteBatch of 200 frames through 32 chunks to a deleted interface succeeded")
		}
		t.Logf("WriteBatch after removal: %v", err)
	case <-time.After(liveness):
		a.Close()
		t.Fatal("WriteBatch blocked on a deleted interface")
	}
	closed := make(chan error, 2)
	go func() { closed <- a.Close() }()
	go func() { closed <- b.Close() }()
	for range 2 {
		select {
		case err := <-closed:
			if err != nil {
				t.Logf("Close after removal: %v", err)
			}
		case <-time.After(liveness):
			t.Fatal("Close hung after the interface was removed")
		}
	}
	if err := <-readDone; !errors.Is(err, nic.ErrClosed) {
		t.Errorf("ReadBatch: %v, want ErrClosed", err)
	}
}
