// Package rstreamcmd is goroce rstream and goroce riostream: librdmacm's
// rstream and riostream (librdmacm/examples, rdma-core v44.0) over package
// rsock, with their flags, their test sequence and their result table, so
// that each talks to the C tool on the other end.
package rstreamcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/getopt"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/rsock"
)

// Summary and IOSummary are the usage lines of goroce rstream and riostream.
const (
	Summary   = "rsocket stream benchmark (librdmacm's rstream; -T s: kernel TCP)"
	IOSummary = "rsocket iomap benchmark (librdmacm's riostream: riomap + riowrite)"
)

const defaultPort = "7471"

// testSizes is rstream's test_size table: option 0 sizes run by default,
// option 1 ones with -S all.
var testSizes = []struct{ size, option int }{
	{1 << 6, 0},
	{1 << 7, 1}, {1<<7 + 1<<6, 1},
	{1 << 8, 1}, {1<<8 + 1<<7, 1},
	{1 << 9, 1}, {1<<9 + 1<<8, 1},
	{1 << 10, 1}, {1<<10 + 1<<9, 1},
	{1 << 11, 1}, {1<<11 + 1<<10, 1},
	{1 << 12, 0}, {1<<12 + 1<<11, 1},
	{1 << 13, 1}, {1<<13 + 1<<12, 1},
	{1 << 14, 1}, {1<<14 + 1<<13, 1},
	{1 << 15, 1}, {1<<15 + 1<<14, 1},
	{1 << 16, 0}, {1<<16 + 1<<15, 1},
	{1 << 17, 1}, {1<<17 + 1<<16, 1},
	{1 << 18, 1}, {1<<18 + 1<<17, 1},
	{1 << 19, 1}, {1<<19 + 1<<18, 1},
	{1 << 20, 0}, {1<<20 + 1<<19, 1},
	{1 << 21, 1}, {1<<21 + 1<<20, 1},
	{1 << 22, 1}, {1<<22 + 1<<21, 1},
}

func usage(name string, io bool) string {
	u := "usage: " + name + "\n" +
		"\t[-s server_address]\n\t[-b bind_address]\n\t[-f address_format]\n\t    name, ip, ipv6, or gid\n" +
		"\t[-B buffer_size]\n\t[-i inline_size]\n\t[-I iterations]\n\t[-C transfer_count]\n" +
		"\t[-S transfer_size or all]\n\t[-p port_number]\n"
	if !io {
		u += "\t[-k keepalive_time]\n"
	}
	u += "\t[-T test_option]\n"
	if !io {
		u += "\t    s|sockets - use standard tcp/ip sockets\n"
	}
	u += "\t    a|async - asynchronous operation (use poll)\n\t    b|blocking - use blocking calls\n"
	if !io {
		u += "\t    f|fork - fork server processing\n"
	}
	u += "\t    n|nonblocking - use nonblocking calls\n"
	if !io {
		u += "\t    r|resolve - use rdma cm to resolve address\n"
	}
	u += "\t    v|verify - verify data\n" +
		"goroce options:\n" +
		"\t[--dev=IFACE]\tnetwork interface of the RoCE device (default: the one holding -b/-s)\n" +
		"\t[--timeout=SEC]\tgive up after this long; a client then retries a refused connection until the timeout\n" +
		"\t[--pcap=FILE]\twrite the frames the device sends and receives to this pcap file\n" +
		"-T b, n and a are accepted and change nothing: goroce's calls block in Go, without polling.\n"
	return u
}

type flags struct {
	dst, src   string
	bufferSize int
	inline     int
	iterations int
	count      int
	size       int
	custom     bool
	sizeOption int
	port       string
	keepalive  int
	verify     bool
	sockets    bool
	fork       bool
	useIO      bool
	name       string
}

func parse(env tool.Env, args []string, io bool) (f flags, ok bool) {
	f = flags{iterations: 1, size: 1000, count: 1000, inline: 64, port: defaultPort, useIO: io, name: "rstream"}
	if io {
		f.name = "riostream"
	}
	optstring := "s:b:f:B:i:I:C:S:p:T:"
	if !io {
		optstring += "k:"
	}
	opts, pos, err := getopt.Short(optstring, args)
	if err != nil || len(pos) > 0 {
		fmt.Fprint(env.Stdout, usage(f.name, io))
		return f, false
	}
	for _, o := range opts {
		val := o.Value
		switch o.Name {
		case "s":
			f.dst = val
		case "b":
			f.src = val
		case "f":
			if !tool.HasPrefixFold(val, "ip") && !tool.HasPrefixFold(val, "gid") {
				fmt.Fprintf(env.Stderr, "Warning: unknown address format\n")
			}
		case "B":
			f.bufferSize = tool.Atoi(val)
		case "i":
			f.inline = tool.Atoi(val)
		case "I":
			f.custom = true
			f.iterations = tool.Atoi(val)
		case "C":
			f.custom = true
			f.count = tool.Atoi(val)
		case "S":
			if tool.HasPrefixFold(val, "all") {
				f.sizeOption = 1
			} else {
				f.custom = true
				f.size = tool.Atoi(val)
			}
		case "p":
			f.port = val
		case "k":
			f.keepalive = tool.Atoi(val)
		case "T":
			if !f.testOpt(val, io) {
				fmt.Fprint(env.Stdout, usage(f.name, io))
				return f, false
			}
		}
	}
	return f, true
}

func (f *flags) testOpt(arg string, io bool) bool {
	if len(arg) == 1 {
		switch arg[0] {
		case 'a', 'b', 'n':
		case 'v':
			f.verify = true
		case 's', 'f', 'r':
			if io {
				return false
			}
			f.sockets = arg[0] != 'r'
			f.fork = arg[0] == 'f'
		default:
			return false
		}
		return true
	}
	switch {
	case tool.HasPrefixFold(arg, "async"), tool.HasPrefixFold(arg, "block"), tool.HasPrefixFold(arg, "nonblock"):
	case tool.HasPrefixFold(arg, "verify"):
		f.verify = true
	case !io && tool.HasPrefixFold(arg, "socket"):
		f.sockets = true
	case !io && tool.HasPrefixFold(arg, "resolve"):
	case !io && tool.HasPrefixFold(arg, "fork"):
		f.sockets, f.fork = true, true
	default:
		return false
	}
	return true
}

// Run is goroce rstream. It returns the exit code.
func Run(env tool.Env, args []string) int { return run(env, args, false) }

// RunIO is goroce riostream. It returns the exit code.
func RunIO(env tool.Env, args []string) int { return run(env, args, true) }

type test struct {
	env  tool.Env
	f    flags
	ctx  context.Context
	dev  *qp.Device
	l    net.Listener
	conn net.Conn
	buf  []byte

	name        string
	size, count int
	iterations  int

	fmtData, verData byte  // format_buf's and verify_buf's counters
	verTotal         int64 // verify_buf's total_bytes
}

func run(env tool.Env, args []string, io bool) int {
	name := "rstream"
	if io {
		name = "riostream"
	}
	args, opts, dev, exit, done := tool.CMCommand(env, args, name, usage(name, io), tool.ExitUsage)
	if done {
		return exit
	}
	f, ok := parse(env, args, io)
	if !ok {
		return tool.ExitUsage
	}
	if f.fork {
		fmt.Fprintf(env.Stderr, "goroce %s: -T f (fork) is not supported\n", name)
		return tool.ExitUsage
	}
	ctx, cancel := tool.RunContext(env, opts)
	defer cancel()
	t := &test{env: env, f: f, ctx: ctx, name: "custom", size: f.size, count: f.count, iterations: f.iterations}
	if !f.sockets {
		var addrs []netip.Addr
		for _, h := range []string{f.src, f.dst} {
			if a, err := tool.ParseHost(h); err == nil {
				addrs = append(addrs, a)
			}
		}
		d, prog, err := tool.StartCMDevice(ctx, env, dev, addrs...)
		if err != nil {
			fmt.Fprintf(env.Stderr, "No RDMA devices were detected (%v)\n", err)
			return 1
		}
		defer d.Close()
		defer prog.Stop()
		t.dev = d
	}
	if f.custom {
		t.buf = make([]byte, max(f.size, 0))
	} else {
		t.buf = make([]byte, testSizes[len(testSizes)-1].size)
	}
	if f.dst == "" {
		if err := t.listen(); err != nil {
			return 1
		}
		defer t.l.Close()
	}
	t.printf("%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
	ret := 0
	if !f.custom {
		for _, bw := range []bool{false, true} {
			if err := t.connect(); err != nil {
				return 1
			}
			for _, ts := range testSizes {
				if ts.option > f.sizeOption {
					continue
				}
				if bw {
					t.initBandwidth(ts.size)
				} else {
					t.initLatency(ts.size)
				}
				t.runTest()
			}
			if err := t.conn.Close(); err != nil {
				fmt.Fprintf(env.Stderr, "rclose: %v\n", err)
			}
		}
		return 0
	}
	if err := t.connect(); err != nil {
		return 1
	}
	if err := t.runTest(); err != nil {
		ret = 1
	}
	t.conn.Close()
	return ret
}

func (t *test) printf(format string, a ...any) { fmt.Fprintf(t.env.Stdout, format, a...) }

func (t *test) rsockOptions() *rsock.Options {
	b := t.f.bufferSize
	if b == 0 {
		b = 1 << 19
	}
	o := &rsock.Options{SendBuffer: 2 * b, RecvBuffer: 2 * b, Inline: t.f.inline, KeepAlive: -1}
	if t.f.keepalive > 0 {
		o.KeepAlive = time.Duration(t.f.keepalive) * time.Second
	}
	if t.f.useIO {
		o.IOMapSize = 1
	}
	return o
}

func (t *test) listen() error {
	host := "0.0.0.0"
	if t.f.src != "" {
		a, err := tool.ParseHost(t.f.src)
		if err != nil {
			t.printf("getaddrinfo: %v\n", err)
			return err
		}
		host = a.String()
	}
	addr := net.JoinHostPort(host, t.f.port)
	var err error
	if t.f.sockets {
		t.l, err = net.Listen("tcp", addr)
	} else {
		t.l, err = rsock.Listen(t.ctx, t.dev, addr, t.rsockOptions())
	}
	if err != nil {
		fmt.Fprintf(t.env.Stderr, "rbind: %v\n", err)
		return err
	}
	if t.env.Listening != nil {
		t.env.Listening(t.l.Addr())
	}
	return nil
}

func (t *test) connect() error {
	var err error
	if t.f.dst == "" {
		if l, ok := t.l.(*rsock.Listener); ok {
			t.conn, err = l.AcceptContext(t.ctx)
		} else {
			t.conn, err = acceptCtx(t.ctx, t.l)
		}
		if err != nil {
			fmt.Fprintf(t.env.Stderr, "raccept: %v\n", err)
		}
		return err
	}
	a, err := tool.ParseHost(t.f.dst)
	if err != nil {
		t.printf("getaddrinfo: %v\n", err)
		return err
	}
	addr := net.JoinHostPort(a.String(), t.f.port)
	if t.f.sockets {
		var d net.Dialer
		t.conn, err = d.DialContext(t.ctx, "tcp", addr)
	} else {
		t.conn, err = dialRetry(t.ctx, t.dev, addr, t.rsockOptions())
	}
	if err != nil {
		fmt.Fprintf(t.env.Stderr, "rconnect: %v\n", err)
	}
	return err
}

// dialRetry is rsock.Dial; with a deadline (--timeout) a refused connection
// is retried until it, as tool.DialRetry does.
func dialRetry(ctx context.Context, dev *qp.Device, addr string, o *rsock.Options) (*rsock.Conn, error) {
	return tool.RetryRefused(ctx, func() (*rsock.Conn, error) { return rsock.Dial(ctx, dev, addr, o) })
}

func acceptCtx(ctx context.Context, l net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	return l.Accept()
}

// sizeStr is common.c's size_str; n bounds the output as snprintf's size
// (less its NUL).
func sizeStr(size int64, n int) string {
	base, mag := int64(1), ""
	switch {
	case size >= 1<<30:
		base, mag = 1<<30, "g"
	case size >= 1<<20:
		base, mag = 1<<20, "m"
	case size >= 1<<10:
		base, mag = 1<<10, "k"
	}
	var fraction int64
	if size/base < 10 {
		fraction = (size % base) * 10 / base
	}
	s := strconv.FormatInt(size/base, 10) + mag
	if fraction != 0 {
		s = fmt.Sprintf("%d.%d%s", size/base, fraction, mag)
	}
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// cntStr is common.c's cnt_str.
func cntStr(cnt int64) string {
	switch {
	case cnt >= 1000000000:
		return fmt.Sprintf("%db", cnt/1000000000)
	case cnt >= 1000000:
		return fmt.Sprintf("%dm", cnt/1000000)
	case cnt >= 1000:
		return fmt.Sprintf("%dk", cnt/1000)
	}
	return strconv.FormatInt(cnt, 10)
}

// sizeToCount is common.c's size_to_count.
func sizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

func (t *test) initLatency(size int) {
	t.name = sizeStr(int64(size), 4) + "_lat"
	t.count, t.size, t.iterations = 1, size, sizeToCount(size)
}

func (t *test) initBandwidth(size int) {
	t.name = sizeStr(int64(size), 4) + "_bw"
	t.iterations, t.size, t.count = 1, size, sizeToCount(size)
}

func (t *test) formatBuf(b []byte) {
	for i := range b {
		b[i] = t.fmtData
		t.fmtData++
	}
}

func (t *test) verifyBuf(b []byte) error {
	for i := range b {
		if b[i] != t.verData {
			t.printf("data verification failed byte %d\n", t.verTotal)
			return errors.New("data verification failed")
		}
		t.verData++
		t.verTotal++
	}
	return nil
}

func (t *test) sendXfer(size int) error {
	if t.f.verify {
		t.formatBuf(t.buf[:size])
	}
	return t.sendMsg(size)
}

func (t *test) sendMsg(size int) error {
	if _, err := t.conn.Write(t.buf[:size]); err != nil {
		fmt.Fprintf(t.env.Stderr, "rsend: %v\n", err)
		return err
	}
	return nil
}

func (t *test) recvMsg(size int) error {
	if _, err := io.ReadFull(t.conn, t.buf[:size]); err != nil {
		fmt.Fprintf(t.env.Stderr, "rrecv: %v\n", err)
		return err
	}
	return nil
}

func (t *test) recvXfer(size int) error {
	if err := t.recvMsg(size); err != nil {
		return err
	}
	if t.f.verify {
		return t.verifyBuf(t.buf[:size])
	}
	return nil
}

func (t *test) client() bool { return t.f.dst != "" }

func (t *test) runTest() error {
	if t.f.useIO {
		return t.runIOTest()
	}
	var err error
	if t.client() {
		if err = t.sendXfer(16); err == nil {
			err = t.recvXfer(16)
		}
	} else if err = t.recvXfer(16); err == nil {
		err = t.sendXfer(16)
	}
	if err != nil {
		return err
	}
	start := time.Now()
	for range t.iterations {
		for range t.count {
			if t.client() {
				err = t.sendXfer(t.size)
			} else {
				err = t.recvXfer(t.size)
			}
			if err != nil {
				return err
			}
		}
		for range t.count {
			if t.client() {
				err = t.recvXfer(t.size)
			} else {
				err = t.sendXfer(t.size)
			}
			if err != nil {
				return err
			}
		}
	}
	t.showPerf(time.Since(start))
	return nil
}

// showPerf prints one row of the table (show_perf).
func (t *test) showPerf(d time.Duration) {
	usec := float64(d.Microseconds())
	bytes := int64(t.iterations) * int64(t.count) * int64(t.size) * 2
	t.printf("%-10s", t.name)
	t.printf("%-8s", sizeStr(int64(t.size), 31))
	t.printf("%-8s", cntStr(int64(t.count)))
	t.printf("%-8s", cntStr(int64(t.iterations)))
	t.printf("%-8s", sizeStr(bytes, 31))
	t.printf("%8.2fs%10.2f%11.2f\n", float32(usec/1e6), float32(float64(bytes*8)/(1000*usec)),
		float32((usec/float64(t.iterations))/float64(t.count*2)))
}

// runIOTest is riostream's run_test: each transfer an IOWrite of the whole
// buffer into the peer's mapping, the last byte a marker the peer waits
// for.
func (t *test) runIOTest() error {
	c, ok := t.conn.(*rsock.Conn)
	if !ok {
		return errors.New("riostream needs an rsocket")
	}
	size := t.size
	buf := t.buf[:size]
	buf[size-1] = 0xFF
	m, err := c.IOMap(buf, 0) // a new registration: no WRITE counted yet
	if err != nil {
		fmt.Fprintf(t.env.Stderr, "riomap: %v\n", err)
		return err
	}
	defer m.Unmap()
	if t.client() {
		if err = t.sendMsg(16); err == nil {
			err = t.recvMsg(16)
		}
	} else if err = t.recvMsg(16); err == nil {
		err = t.sendMsg(16)
	}
	if err != nil {
		return err
	}
	// Every look at buf follows a WaitWrite, which makes the WRITEs it
	// counted visible: seen starts before the peer could write.
	var seen uint64
	recv := func(marker byte) error {
		for {
			n, err := m.WaitWrite(t.ctx, seen)
			if err != nil {
				fmt.Fprintf(t.env.Stderr, "riostream: waiting for the peer's data: %v\n", err)
				return err
			}
			seen = n
			if buf[size-1] == marker {
				break
			}
		}
		if t.f.verify {
			return t.verifyBuf(buf[:size-1])
		}
		return nil
	}
	send := func() error {
		if _, err := c.IOWrite(buf, 0); err != nil {
			fmt.Fprintf(t.env.Stderr, "riowrite: %v\n", err)
			return err
		}
		return nil
	}
	sendRound := func(marker byte) error {
		for range t.count - 1 {
			if err := send(); err != nil {
				return err
			}
		}
		buf[size-1] = marker
		if t.f.verify {
			t.formatBuf(buf[:size-1])
		}
		return send()
	}
	var marker byte
	start := time.Now()
	for range t.iterations {
		if t.client() {
			if err := sendRound(marker); err != nil {
				return err
			}
			marker++
			if err := recv(marker); err != nil {
				return err
			}
			marker++
		} else {
			if err := recv(marker); err != nil {
				return err
			}
			marker++
			if err := sendRound(marker); err != nil {
				return err
			}
			marker++
		}
	}
	t.showPerf(time.Since(start))
	return nil
}
