// Package rcopycmd is goroce rcopy: librdmacm's rcopy (rdma-core v44.0)
// over package rsock. "rcopy SOURCE SERVER[:DESTINATION]" copies a file to
// a server, which writes it out; "rcopy" with no arguments (or only -p) is
// the server. The messages are rcopy's (16-byte headers in the host byte
// order of x86, little-endian), so either end may be the C tool.
package rcopycmd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/rsock"
)

// Summary is goroce rcopy's usage line.
const Summary = "copy a file over rsockets (librdmacm's rcopy)"

const defaultPort = "7427"

// Commands of struct msg_hdr.
const (
	cmdOpen  = 1
	cmdClose = 2
	cmdWrite = 3
	cmdResp  = 0x80
	hdrLen   = 16
)

type hdr struct {
	version, command uint8
	length           uint16
	data             uint32
	id               uint64
}

func (h hdr) marshal() []byte {
	b := make([]byte, hdrLen)
	b[0], b[1] = h.version, h.command
	binary.LittleEndian.PutUint16(b[2:], h.length)
	binary.LittleEndian.PutUint32(b[4:], h.data)
	binary.LittleEndian.PutUint64(b[8:], h.id)
	return b
}

func usage(prog string) string {
	return fmt.Sprintf("usage 1: %s [options]\n\t     starts the server application\n\t[-p  port_number]\n"+
		"usage 2: %s source server[:destination] [options]\n\t     source - file name and path\n"+
		"\t     server - name or address\n\t     destination - file name and path\n\t[-p  port_number]\n"+
		"goroce options:\n\t[--dev=IFACE]\tnetwork interface of the RoCE device\n"+
		"\t[--timeout=SEC]\tgive up after this long (the server: stop serving)\n", prog, prog)
}

type run struct {
	env  tool.Env
	ctx  context.Context
	dev  *qp.Device
	port string
}

func (r *run) printf(format string, a ...any) { fmt.Fprintf(r.env.Stdout, format, a...) }

// Run is goroce rcopy. It returns the exit code.
func Run(env tool.Env, args []string) int {
	args, opts, dev, exit, done := tool.CMCommand(env, args, "rcopy", usage("rcopy"), tool.ExitUsage)
	if done {
		return exit
	}
	r := &run{env: env, port: defaultPort}
	server := len(args) == 0 || strings.HasPrefix(args[0], "-")
	var src, host, dst string
	if !server {
		if len(args) < 2 {
			r.printf("%s", usage("rcopy"))
			return tool.ExitUsage
		}
		src, host = args[0], args[1]
		host, dst, _ = strings.Cut(host, ":")
		if dst == "" {
			dst = src
		}
		args = args[2:]
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-p" && i+1 < len(args):
			r.port = args[i+1]
			i++
		case strings.HasPrefix(a, "-p") && len(a) > 2:
			r.port = a[2:]
		default:
			r.printf("%s", usage("rcopy"))
			return tool.ExitUsage
		}
	}
	ctx, cancel := tool.RunContext(env, opts)
	defer cancel()
	r.ctx = ctx
	var addr netip.Addr
	if !server {
		a, err := tool.ParseHost(host)
		if err != nil {
			r.printf("getaddrinfo failed: %v\n", err)
			return tool.ExitUsage
		}
		addr = a
	}
	d, err := tool.OpenCMDevice(ctx, env, dev, addr)
	if err != nil {
		fmt.Fprintf(env.Stderr, "goroce rcopy: %v\n", tool.DeviceError(dev, err))
		return 1
	}
	defer d.Close()
	prog := &tool.Progressor{Dev: d}
	prog.Start()
	defer prog.Stop()
	r.dev = d
	if server {
		return r.server()
	}
	return r.client(src, net.JoinHostPort(addr.String(), r.port), dst)
}

func recvHdr(c io.Reader, out io.Writer) (hdr, error) {
	var b [hdrLen]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return hdr{}, err
	}
	h := hdr{version: b[0], command: b[1], length: binary.LittleEndian.Uint16(b[2:]),
		data: binary.LittleEndian.Uint32(b[4:]), id: binary.LittleEndian.Uint64(b[8:])}
	if h.version != 0 || h.length < hdrLen {
		fmt.Fprintf(out, "invalid version %d or length %d\n", h.version, h.length)
		return h, errors.New("invalid header")
	}
	return h, nil
}

func sendResp(c io.Writer, h hdr, status uint32) {
	c.Write(hdr{command: h.command | cmdResp, length: hdrLen, data: status, id: h.id}.marshal())
}

func errno(err error) uint32 {
	var e syscall.Errno
	if errors.As(err, &e) {
		return uint32(e)
	}
	return uint32(syscall.EIO)
}

func (r *run) server() int {
	l, err := rsock.Listen(r.ctx, r.dev, net.JoinHostPort("0.0.0.0", r.port), &rsock.Options{KeepAlive: -1})
	if err != nil {
		r.printf("rbind failed: %v\n", err)
		return 1
	}
	defer l.Close()
	if r.env.Listening != nil {
		r.env.Listening(l.Addr())
	}
	for {
		r.printf("waiting for connection...")
		c, err := l.AcceptContext(r.ctx)
		if err != nil {
			if r.ctx.Err() != nil {
				r.printf("\n")
				return 0
			}
			r.printf("raccept failed: %v\n", err)
			return 1
		}
		r.printf("client: %s\n", c.RemoteAddr().(*net.TCPAddr).IP)
		r.process(c)
		c.Close()
	}
}

// process is server_process: open, write, close until the client goes.
func (r *run) process(c *rsock.Conn) {
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for {
		h, err := recvHdr(c, r.env.Stdout)
		if err != nil {
			return
		}
		switch h.command {
		case cmdOpen:
			r.printf("opening: ")
			if f != nil {
				r.printf("cannot open another file\n")
				sendResp(c, h, uint32(syscall.EBUSY))
				return
			}
			path := make([]byte, int(h.length)-hdrLen)
			if _, err := io.ReadFull(c, path); err != nil {
				r.printf("error receiving path\n")
				sendResp(c, h, errno(err))
				return
			}
			name, _, _ := strings.Cut(string(path), "\x00")
			r.printf("%s, ", name)
			f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, os.FileMode(h.data&0o777))
			if err != nil {
				r.printf("unable to open destination file\n")
				sendResp(c, h, errno(err))
				f = nil
				return
			}
			sendResp(c, h, 0)
		case cmdClose:
			r.printf("closing...")
			sendResp(c, h, 0)
			if f != nil {
				f.Close()
				f = nil
			}
			r.printf("done\n")
		case cmdWrite:
			r.printf("transferring")
			var status uint32
			switch {
			case f == nil:
				r.printf("...file not opened\n")
				status = uint32(syscall.EINVAL)
			case h.length != hdrLen+8:
				r.printf("...invalid message length %d\n", h.length)
				status = uint32(syscall.EINVAL)
			}
			if status != 0 {
				sendResp(c, h, status)
				return
			}
			var b [8]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				sendResp(c, h, errno(err))
				return
			}
			size := int64(binary.LittleEndian.Uint64(b[:]))
			r.printf("...%d bytes...", size)
			if err := f.Truncate(size); err != nil {
				sendResp(c, h, errno(err))
				return
			}
			if _, err := io.CopyN(f, c, size); err != nil {
				r.printf("...error receiving data\n")
				sendResp(c, h, errno(err))
				return
			}
			sendResp(c, h, 0)
		default:
			sendResp(c, h, uint32(syscall.EINVAL))
			return
		}
	}
}

func (r *run) getResp(c io.Reader, cmd uint8) (uint32, error) {
	h, err := recvHdr(c, r.env.Stdout)
	if err != nil {
		return 0, err
	}
	if h.length != hdrLen || h.command != cmd|cmdResp {
		r.printf("invalid length %d or bad command response %x:%x\n", h.length, h.command, cmd|cmdResp)
		return 0, errors.New("bad response")
	}
	return h.data, nil
}

func (r *run) client(src, addr, dst string) int {
	c, err := rsock.Dial(r.ctx, r.dev, addr, &rsock.Options{KeepAlive: -1})
	if err != nil {
		fmt.Fprintf(r.env.Stderr, "rconnect failed: %v\n", err)
		return 1
	}
	defer c.Close()
	r.printf("opening...")
	f, err := os.Open(src)
	if err != nil {
		fmt.Fprintf(r.env.Stderr, "%v\n", err)
		return 1
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 1
	}
	size := st.Size()
	plen := (len(dst) + 8) &^ 7
	open := hdr{command: cmdOpen, length: uint16(hdrLen + plen), data: uint32(st.Mode().Perm()) | 0o100000}.marshal()
	open = append(open, make([]byte, plen)...)
	copy(open[hdrLen:], dst)
	if _, err := c.Write(open); err != nil {
		return 1
	}
	if st, err := r.getResp(c, cmdOpen); err != nil || st != 0 {
		return int(st) & 0xff
	}
	r.printf("transferring")
	w := hdr{command: cmdWrite, length: hdrLen + 8}.marshal()
	w = binary.LittleEndian.AppendUint64(w, uint64(size))
	if _, err := c.Write(w); err != nil {
		return 1
	}
	r.printf("...")
	start := time.Now()
	ret := 0
	if n, err := io.CopyN(c, f, size); err != nil || n != size {
		fmt.Fprintf(r.env.Stderr, "rsend: %v\n", err)
		ret = 1
	} else if st, err := r.getResp(c, cmdWrite); err != nil || st != 0 {
		ret = max(int(st)&0xff, 1)
	}
	end := time.Now()
	// client_close.
	r.printf("closing...")
	if _, err := c.Write(hdr{command: cmdClose, length: hdrLen}.marshal()); err == nil {
		if st, err := r.getResp(c, cmdClose); err == nil && st == 0 {
			r.printf("done\n")
		}
	}
	if ret == 0 {
		usec := float64(end.Sub(start).Microseconds())
		r.printf("%d bytes in %.2f seconds = %.2f Gb/sec\n", size, float32(usec/1e6), float32(float64(size*8)/(1000*usec)))
	}
	return ret
}
