// Package rsock is a net.Conn and net.Listener over RDMA, wire-compatible
// with librdmacm's rsockets (librdmacm/rsocket.c; rstream, riostream and
// rcopy of rdmacm-utils): a Go program gets RDMA by changing its dialer,
// and talks to C programs that use rsockets.
//
//	l, _ := rsock.Listen(ctx, devB, "198.18.0.2:7471", nil)
//	go http.Serve(l, handler)
//	c, _ := rsock.Dial(ctx, devA, "198.18.0.2:7471", nil)
//
// A connection is an RC QP set up through package cm in rdma_cm's TCP port
// space, with rsocket's 40 bytes of connect data in the REQ and REP. Data
// moves as RDMA WRITE WITH IMMEDIATE into the halves of the peer's receive
// buffer the peer granted; the immediate data says how many bytes (or
// carries credits and control messages). docs/rsocket.md describes the
// protocol.
//
// A Read or Write that has to wait polls the connection's completion queue
// itself, as rsocket's rrecv and rsend do (qp.CQ.Wait: no spinning, and on
// a self-driving device no hand-off between goroutines); it honours
// deadlines with errors that satisfy os.ErrDeadlineExceeded and net.Error's
// Timeout. A keepalive goroutine per connection (a ticker) looks at
// connections nobody uses. A peer that breaks
// the protocol (more messages than its credits, more bytes than granted, a
// malformed buffer update) ends that connection with an error wrapping
// ErrProtocol; other connections are not affected.
package rsock

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
)

// Defaults, as rsocket's (def_wmem, def_mem, def_sqsize, def_rqsize,
// def_inline).
const (
	DefaultBuffer    = 128 << 10
	DefaultQueueSize = 384
	DefaultInline    = 64
	// DefaultMaxBuffer is how far a connection grows the buffers it was
	// not given (Options.MaxBuffer): rstream's and riostream's 1 MiB.
	DefaultMaxBuffer = 1 << 20
	// DefaultKeepAlive is the keepalive period when Options.KeepAlive is
	// zero (Go's net.Dialer default).
	DefaultKeepAlive = 15 * time.Second
)

// Options configure Dial and Listen. A nil *Options takes every default.
type Options struct {
	// SendBuffer and RecvBuffer are the sizes of the send ring and of the
	// receive buffer whose halves the peer writes into (rsocket: twice
	// SO_SNDBUF / SO_RCVBUF; default 128 KiB each, at least 4 KiB). Both
	// are allocated and registered at connect. A writer waits for the
	// reader to grant a half again once it has two halves out: a bulk
	// stream spends less CPU per byte with larger buffers (rstream's 1 MiB:
	// docs/performance.md, the rsock section). A buffer left at zero
	// starts at the default and grows while the connection streams, up to
	// MaxBuffer; one set here keeps its size (as SO_SNDBUF and SO_RCVBUF
	// turn Linux's TCP buffer autotuning off).
	SendBuffer, RecvBuffer int
	// MaxBuffer bounds the growth of the buffers not set above (zero:
	// DefaultMaxBuffer; negative: they keep the default size). The
	// receive buffer doubles once data arrived growAfter times (4) since
	// the last change that left the peer less than a quarter of the
	// buffer to write into (the writer is about to wait for our grants,
	// not for the reader): the reader stops granting the old buffer, and
	// once everything written into it was read, grants the halves of a
	// buffer twice as large (the peer, an rsocket too, only ever sees
	// larger grants elsewhere). The send ring grows to twice the largest
	// half the peer grants once it is what stops the writer, after the
	// sends in flight completed. Idle and request/response connections
	// keep the default; a stream reaches MaxBuffer within a few MiB.
	MaxBuffer int
	// SQSize and RQSize are the QP's queue sizes (default 384, 16..65534);
	// RQSize is also the credits the peer gets.
	SQSize, RQSize int
	// Inline is accepted for rsocket's RDMA_INLINE; goroce copies every
	// transfer into the send buffer, which is the same on the wire.
	Inline int
	// IOMapSize is the number of iomap entries the peer may fill
	// (RDMA_IOMAPSIZE; default 0: IOWrite to us is not possible).
	IOMapSize int
	// KeepAlive is the period of the zero-length RDMA WRITEs that detect a
	// vanished peer (rsocket's SO_KEEPALIVE): their retries exhaust and the
	// connection ends with an error. Zero: DefaultKeepAlive; negative: off.
	KeepAlive time.Duration
	// Local is Dial's source address (zero: the device's first address).
	Local netip.AddrPort
	// Logger gets debug and warning messages (nil: none).
	Logger *slog.Logger

	bigEndian bool // tests: declare RS_CONN_FLAG_NET and keep our SGL big-endian

	sendMax, recvMax int // the buffers' growth bounds (withDefaults; 0: no growth)
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.MaxBuffer == 0 {
		r.MaxBuffer = DefaultMaxBuffer
	}
	maxBuf := min(max(r.MaxBuffer, 0), 2*msgDataMask) &^ 1
	r.sendMax, r.recvMax = 0, 0
	if r.SendBuffer == 0 {
		r.SendBuffer = DefaultBuffer
		if maxBuf > r.SendBuffer {
			r.sendMax = maxBuf
		}
	}
	if r.RecvBuffer == 0 {
		r.RecvBuffer = DefaultBuffer
		if maxBuf > r.RecvBuffer {
			r.recvMax = maxBuf
		}
	}
	r.SendBuffer = max(r.SendBuffer, 2*sndLowat)
	r.RecvBuffer = max(r.RecvBuffer, 2*sndLowat) &^ 1
	r.RecvBuffer = min(r.RecvBuffer, 2*msgDataMask)
	if r.SQSize == 0 {
		r.SQSize = DefaultQueueSize
	}
	if r.RQSize == 0 {
		r.RQSize = DefaultQueueSize
	}
	r.SQSize = min(max(r.SQSize, qpMinSize), qpMaxSize)
	r.RQSize = min(max(r.RQSize, qpMinSize), qpMaxSize)
	if r.Inline == 0 {
		r.Inline = DefaultInline
	}
	if r.KeepAlive == 0 {
		r.KeepAlive = DefaultKeepAlive
	}
	r.IOMapSize = min(max(r.IOMapSize, 0), 0x7F<<8)
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	return r
}

func (o *Options) cm(pd *qp.PD, private []byte) cm.Options {
	return cm.Options{
		PD:          pd,
		Cap:         qp.Caps{MaxSendWR: o.SQSize, MaxRecvWR: o.RQSize + spareRecvs(o.RQSize), MaxSendSGE: 2, MaxRecvSGE: 1},
		PrivateData: private,
		RetryCount:  7, RNRRetry: 7,
		Prepare: func(q *qp.QP) error { return postRecvs(q, o.RQSize+spareRecvs(o.RQSize)) },
		Local:   o.Local,
		Logger:  o.Logger,
	}
}

// Dial connects to an rsocket listening at addr ("ip:port") through dev, as
// rconnect does.
func Dial(ctx context.Context, dev *qp.Device, addr string, opts *Options) (*Conn, error) {
	o := opts.withDefaults()
	pd := dev.AllocPD()
	e, err := newEndpoint(pd, o, nil)
	if err != nil {
		return nil, err
	}
	cc, err := cm.Dial(ctx, dev, addr, o.cm(pd, e.connData()))
	if err != nil {
		e.free()
		return nil, fmt.Errorf("rsock: dial %s: %w", addr, err)
	}
	peer, err := parseConnData(cc.PrivateData())
	if err != nil {
		cc.Close()
		e.free()
		return nil, fmt.Errorf("rsock: dial %s: %w", addr, err)
	}
	return start(e, cc, peer, o), nil
}

// Listener accepts rsocket connections (a net.Listener).
type Listener struct {
	l      *cm.Listener
	o      Options
	addr   *net.TCPAddr
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	pd      *qp.PD
	refs    int // the listener and every endpoint on pd
	pending map[netip.AddrPort]*endpoint
	once    sync.Once
	err     error
}

// Listen listens for rsocket connections on addr ("ip:port", ":port") of
// dev, as rlisten does.
func Listen(ctx context.Context, dev *qp.Device, addr string, opts *Options) (*Listener, error) {
	o := opts.withDefaults()
	l := &Listener{o: o, pd: dev.AllocPD(), refs: 1, pending: map[netip.AddrPort]*endpoint{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	co := o.cm(l.pd, nil)
	co.Accept = l.request
	cl, err := cm.Listen(ctx, dev, addr, co)
	if err != nil {
		_ = l.pd.Dealloc()
		return nil, fmt.Errorf("rsock: listen %s: %w", addr, err)
	}
	l.l = cl
	l.addr = tcpAddr(cl.Addr())
	return l, nil
}

func (l *Listener) unref() {
	l.mu.Lock()
	l.refs--
	last := l.refs == 0
	l.mu.Unlock()
	if last {
		_ = l.pd.Dealloc()
	}
}

// request is rs_accept up to rdma_accept: check the peer's connect data,
// make the endpoint, answer with ours.
func (l *Listener) request(r *cm.Request) ([]byte, error) {
	peer, err := parseConnData(r.PrivateData)
	if err != nil {
		l.o.Logger.Debug("rsock: request rejected", "from", r.RemoteAddr, "err", err)
		return nil, err
	}
	l.mu.Lock()
	if l.refs == 0 || l.ctx.Err() != nil {
		l.mu.Unlock()
		return nil, net.ErrClosed
	}
	l.refs++
	l.mu.Unlock()
	e, err := newEndpoint(l.pd, l.o, l.unref)
	if err != nil {
		l.unref()
		return nil, err
	}
	e.peer, e.peerParsed = peer, true
	l.mu.Lock()
	if old := l.pending[r.RemoteAddr]; old != nil {
		defer old.free() // a request that never completed
	}
	l.pending[r.RemoteAddr] = e
	l.mu.Unlock()
	return e.connData(), nil
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) { return l.AcceptContext(context.Background()) }

// AcceptContext waits for the next connection or ctx's end.
func (l *Listener) AcceptContext(ctx context.Context) (*Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel)
	defer stop()
	for {
		cc, err := l.l.Accept(ctx)
		if err != nil {
			if l.ctx.Err() != nil {
				return nil, &net.OpError{Op: "accept", Net: "rsock", Addr: l.addr, Err: net.ErrClosed}
			}
			return nil, &net.OpError{Op: "accept", Net: "rsock", Addr: l.addr, Err: err}
		}
		l.mu.Lock()
		e := l.pending[cc.RemoteAddr()]
		delete(l.pending, cc.RemoteAddr())
		l.mu.Unlock()
		if e == nil {
			cc.Close()
			continue
		}
		return start(e, cc, e.peer, l.o), nil
	}
}

// Close stops listening; connections already accepted stay.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.cancel()
		l.err = l.l.Close()
		l.mu.Lock()
		pending := l.pending
		l.pending = map[netip.AddrPort]*endpoint{}
		l.mu.Unlock()
		for _, e := range pending {
			e.free()
		}
		l.unref()
	})
	return l.err
}

// Addr is the listening address (a *net.TCPAddr).
func (l *Listener) Addr() net.Addr { return l.addr }
