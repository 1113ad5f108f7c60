// Package cm connects queue pairs the way RDMA applications do: the
// InfiniBand Communication Manager protocol (IBTA vol. 1 ch. 12) as Linux's
// ib_cm implements it (drivers/infiniband/core/cm.c), with rdma_cm's
// addressing on top (drivers/infiniband/core/cma.c: the cma_hdr in the
// REQ's private data, service IDs from the TCP and UDP port spaces).
//
// Listen and Dial give connected RC queue pairs, like rdma_listen /
// rdma_accept and rdma_connect: a goroce program is the peer of rping,
// NVMe-oF, perftest -R or any other librdmacm application, and two goroce
// programs connect to each other without an out-of-band exchange.
// ListenUD and DialUD resolve UD endpoints through SIDR.
//
//	l, _ := cm.Listen(ctx, devB, "198.18.0.2:7174", nil)
//	c, _ := cm.Dial(ctx, devA, "198.18.0.2:7174", nil) // REQ → REP → RTU
//	s, _ := l.Accept(ctx)                               // the passive side's Conn
//	c.QP().PostSend(...)                                 // an RC QP in RTS
//	c.Close()                                            // DREQ → DREP
//
// Model. Each qp.Device has one CM agent, registered on the device's GSI
// (QP1) for management class 0x07 on first use and shared by every
// Listener, Dial and UD endpoint of the device. The agent owns the
// communication IDs, the listeners by service ID, the retransmission and
// timewait timers, and answers what nobody asked for (a REQ for a port
// nobody listens on gets REJ "invalid service ID"). Blocking steps (QP
// transitions, which may resolve the peer's MAC, and the application's
// Accept and Prepare callbacks) run on the connection's own goroutine,
// never on the GSI's dispatch goroutine.
//
// Errors work with errors.Is: ErrRejected (a *RejectError with the REJ's
// reason and private data), ErrConnRefused (nobody listens: REJ invalid
// service ID, as rdma_cm's ECONNREFUSED), ErrTimeout (the peer never
// answered, after the retries the messages' timeouts allow), and the
// context's error when ctx (or Options.Timeout) ends first. Dial, DialUD,
// Listen, ListenUD and Accept return them wrapped in an *OpError naming
// the operation and the address.
package cm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

// Errors reported by Dial, Accept, DialUD and Close. A REJ is a
// *RejectError, which matches ErrRejected and, for reason "invalid service
// ID", ErrConnRefused.
var (
	ErrRejected    = errors.New("cm: connection rejected")
	ErrConnRefused = errors.New("cm: connection refused (no listener for the service ID)")
	ErrTimeout     = errors.New("cm: timed out waiting for the peer")
	ErrClosed      = errors.New("cm: closed")
)

// Options configure Listen, Dial, ListenUD, DialUD and JoinMulticast. They
// are passed by value, as qp's are; the zero Options takes every default.
type Options struct {
	// PD, SendCQ and RecvCQ are used for the connection's QP. Nil: the
	// connection makes its own (one CQ of Cap.MaxSendWR + Cap.MaxRecvWR
	// entries for both queues), and Conn.Close deallocates its own PD.
	// Given to a Listener, the same PD and CQs serve every connection it
	// accepts.
	PD             *qp.PD
	SendCQ, RecvCQ *qp.CQ
	// Cap sizes the QP (zero: 16 send and 16 receive WRs, 1 SGE each).
	Cap qp.Caps
	// QPType is the connection's QP for Listen and Dial: qp.QPTypeRC (the
	// zero value) or qp.QPTypeUC. rdma_cm reaches UC only in its IB port
	// space (RDMA_PS_IB: service ID 0x013F0000 | port, rdma_get_service_id),
	// with transport type UC in the REQ (cm_format_req from the QP type),
	// as rdma_create_id(RDMA_PS_IB, IB_QPT_UC) does; a UC Listener takes
	// only such REQs. A UC connection has no READ/atomic depths (the REQ
	// and REP carry 0) and no ACK timeout or retries.
	QPType qp.QPType

	// PrivateData goes to the peer: in the REQ after the 36-byte cma_hdr
	// (≤ 56 bytes), in the REP (≤ 196), in the SIDR_REQ after the cma_hdr
	// (≤ 180) or the SIDR_REP (≤ 136).
	PrivateData []byte

	// ResponderResources (RDMA READ/atomic requests we accept at once:
	// max_dest_rd_atomic) and InitiatorDepth (those we issue: max_rd_atomic),
	// as rdma_conn_param. The passive side uses
	// min(its own, the REQ's initiator depth) and min(its own, the REQ's
	// responder resources), as rdma_accept callers do. Zero: 1 each.
	ResponderResources, InitiatorDepth uint8
	// RetryCount and RNRRetry (≤ 7; 7 RNR retries is infinite) go into the
	// REQ (RetryCount, RNRRetry) or REP (RNRRetry). Zero: 7 each, as rping.
	// Set ZeroRetry to send zero.
	RetryCount, RNRRetry uint8
	ZeroRetry            bool

	// Prepare is called once the QP exists (in INIT), before the connection
	// is established: post receives here (as rping does before rdma_accept /
	// rdma_connect). An error fails Dial before its REQ, or rejects the
	// request on the passive side (REJ consumer defined).
	Prepare func(q *qp.QP) error

	// Accept (passive side only) decides on a connection request; it runs
	// before the QP is created. The returned bytes are the REP's private
	// data (nil: Options.PrivateData). An error rejects the request with
	// REJ "consumer defined" (reason 28); if the error is or wraps a
	// *RejectError, its PrivateData goes into the REJ (see Reject).
	Accept func(req *Request) (private []byte, err error)

	// Backlog bounds the established connections a Listener holds for
	// Accept (default 128); requests beyond it get REJ "no resources".
	// Requests still being set up (REQ received, no RTU yet) do not count:
	// they have the device's half-open budget (1024, 128 per source
	// address, the oldest evicted when full, each at most 60 s).
	Backlog int

	// Timeout bounds Dial and DialUD as a whole (address resolution, the
	// REQ or SIDR_REQ and its retries, the QP transitions), as
	// net.Dialer.Timeout: when it passes, the error matches
	// context.DeadlineExceeded. Zero: only ctx, and the CM's own retries
	// (rdma_cm's 16 REQs 6.4 s apart: about 100 s against a host that never
	// answers).
	Timeout time.Duration

	// Local is the source address of Dial and DialUD (zero: the device's
	// first address of the peer's family and an ephemeral port).
	Local netip.AddrPort

	// Logger receives the CM's debug and warning messages (nil: none).
	Logger *slog.Logger

	// BlockSelfMcastLoopback (JoinMulticast) creates the QP with
	// qp.InitAttr.BlockSelfMcastLoopback: its datagrams to the group are
	// not delivered to the device's own members (mckey -l).
	BlockSelfMcastLoopback bool
}

// Request is a connection request as the passive side sees it, passed to
// Options.Accept.
type Request struct {
	// LocalAddr is the address the peer dialled, RemoteAddr its source
	// (from the cma_hdr).
	LocalAddr, RemoteAddr netip.AddrPort
	// PrivateData is the peer's user private data area (after the
	// cma_hdr), whole as rdma_cm delivers it: 56 bytes for a REQ, 180 for
	// a SIDR_REQ. The CM carries no length: the peer's bytes come first,
	// zeros pad the rest.
	PrivateData []byte
	// ServiceID is the REQ's (or SIDR_REQ's) service ID.
	ServiceID uint64
	// RemoteQPN is the peer's QP number (RC only).
	RemoteQPN uint32
	// ResponderResources and InitiatorDepth are the REQ's.
	ResponderResources, InitiatorDepth uint8
}

// RejectReason is a CM REJ reason (IBTA table 109; include/rdma/ib_cm.h);
// its String is the kernel's text.
type RejectReason = mad.RejectReason

// The REJ reasons the package sends or reacts to (all of them are in mad).
const (
	RejectNoResources      = mad.RejNoResources
	RejectTimeout          = mad.RejTimeout
	RejectInvalidServiceID = mad.RejInvalidServiceID
	RejectStaleConn        = mad.RejStaleConn
	RejectConsumerDefined  = mad.RejConsumerDefined
)

// RejectError is a REJ from the peer (or the REJ Options.Accept asks to
// send). errors.Is(err, ErrRejected) holds for every RejectError, and
// errors.Is(err, ErrConnRefused) for reason RejectInvalidServiceID.
//
// PrivateData of a received REJ is the whole 148-byte area (see
// Conn.PrivateData); of the REJ Accept asks for, what Reject was given.
type RejectError struct {
	Reason      RejectReason
	PrivateData []byte
}

// Reject returns the error Options.Accept returns to reject a request with
// REJ "consumer defined" carrying private (≤ 148 bytes).
func Reject(private []byte) error {
	return &RejectError{Reason: RejectConsumerDefined, PrivateData: private}
}

func (e *RejectError) Error() string {
	s := fmt.Sprintf("cm: connection rejected: REJ reason %d (%v)", uint16(e.Reason), e.Reason)
	if slices.ContainsFunc(e.PrivateData, func(b byte) bool { return b != 0 }) {
		s += " with private data"
	}
	return s
}

// Is makes a RejectError match ErrRejected, and ErrConnRefused for the
// reason invalid service ID (what rdma_cm reports as ECONNREFUSED).
func (e *RejectError) Is(target error) bool {
	return target == ErrRejected || (target == ErrConnRefused && e.Reason == RejectInvalidServiceID)
}

// Register makes dev's CM agent answer CM MADs until unregister is called,
// as the kernel's ib_cm does on every RDMA device: a REQ for a port nobody
// listens on gets REJ "invalid service ID" and a SIDR_REQ the status "service
// ID not supported". Listen, Dial and the UD calls do this on their own for
// as long as they are in use; Register is for a device that only refuses.
func Register(dev *qp.Device) (unregister func(), err error) {
	a, err := acquireAgent(dev, nil)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(a.release) }, nil
}

// Listen listens for RC connection requests on addr ("ip:port"; an
// unspecified IP listens on every address of the device): the service ID
// of the TCP port space for port, as rdma_listen. ctx bounds the setup.
func Listen(ctx context.Context, dev *qp.Device, addr string, opts Options) (*Listener, error) {
	l, err := listen(ctx, dev, addr, &opts)
	if err != nil {
		return nil, opError("listen", addr, err)
	}
	return l, nil
}

// Dial connects an RC QP to the listener at addr ("ip:port"), as
// rdma_connect: REQ, wait for the REP (retrying the REQ on the timeout the
// REQ's fields imply, extended by an MRA), QP to RTR and RTS, RTU. ctx
// bounds the whole exchange, and so does Options.Timeout. Before the REQ
// the peer's MAC is resolved, as rdma_resolve_addr does (bounded by ctx,
// or by the device's resolve timeout when ctx has no deadline): an
// unreachable address fails there instead of after the REQ's retries.
// Errors are *OpError.
func Dial(ctx context.Context, dev *qp.Device, addr string, opts Options) (*Conn, error) {
	ctx, cancel := withTimeout(ctx, opts)
	defer cancel()
	c, err := dial(ctx, dev, addr, &opts)
	if err != nil {
		return nil, opError("dial", addr, err)
	}
	return c, nil
}

// withTimeout bounds ctx by opts.Timeout when it is set.
func withTimeout(ctx context.Context, opts Options) (context.Context, context.CancelFunc) {
	if opts.Timeout > 0 {
		return context.WithTimeout(ctx, opts.Timeout)
	}
	return ctx, func() {}
}

// DialUD resolves the UD service at addr through SIDR (SIDR_REQ →
// SIDR_REP): the peer's QPN and Q_Key, and a local UD QP to send to it.
// ctx and Options.Timeout bound it; errors are *OpError.
func DialUD(ctx context.Context, dev *qp.Device, addr string, opts Options) (*UDEndpoint, error) {
	ctx, cancel := withTimeout(ctx, opts)
	defer cancel()
	e, err := dialUD(ctx, dev, addr, &opts)
	if err != nil {
		return nil, opError("dial ud", addr, err)
	}
	return e, nil
}

// ListenUD answers SIDR_REQs for addr's port (the UDP port space) with its
// UD QP's QPN and Q_Key (rdma_cm's RDMA_UDP_QKEY 0x01234567).
func ListenUD(ctx context.Context, dev *qp.Device, addr string, opts Options) (*UDListener, error) {
	l, err := listenUD(ctx, dev, addr, &opts)
	if err != nil {
		return nil, opError("listen ud", addr, err)
	}
	return l, nil
}

// Listener accepts RC connections for one service ID.
type Listener struct {
	l *listener
}

// Accept returns the next established connection (REQ → REP → RTU done,
// its QP in RTS), waiting for one until ctx ends or the Listener closes
// (an *OpError wrapping ctx's error or ErrClosed).
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	c, err := l.l.accept(ctx)
	if err != nil {
		return nil, opError("accept", l.l.addr.String(), err)
	}
	return c, nil
}

// Close stops listening: later REQs for the port get REJ "invalid service
// ID"; connections not yet accepted are closed.
func (l *Listener) Close() error { return l.l.close() }

// Addr is the address the Listener listens on.
func (l *Listener) Addr() netip.AddrPort { return l.l.addr }

// Conn is one RC (or UC) connection made by Dial or Accept: its QP (in
// RTS), PD and CQs, and the peer.
type Conn struct {
	*resources // QP, PD, SendCQ, RecvCQ
	c          *conn
}

// LocalAddr is this side's IP address and port (the cma_hdr's).
func (c *Conn) LocalAddr() netip.AddrPort { return c.c.local }

// RemoteAddr is the peer's IP address and port.
func (c *Conn) RemoteAddr() netip.AddrPort { return c.c.remote }

// PrivateData is the peer's private data area, whole, as rdma_cm delivers
// it (event->param.conn.private_data_len is the area's size): on the
// active side the REP's 196 bytes, on the passive side the REQ's 56 bytes
// of user data after the cma_hdr. The CM carries no length, so what the
// peer sent comes first and zeros pad the rest: a protocol that knows its
// message's length reads that many bytes (trailing zero bytes of binary
// data are kept).
func (c *Conn) PrivateData() []byte { return c.c.peerPrivate }

// Done is closed when the connection ends: the peer's DREQ (or REJ), or
// Close.
func (c *Conn) Done() <-chan struct{} { return c.c.done }

// Err says why Done was closed (nil while the connection is up).
func (c *Conn) Err() error { return c.c.err() }

// Close disconnects: DREQ (retried on its timeout) and a bounded wait for
// the DREP, then the QP goes to ERR (flushing its queues) and is destroyed,
// with the PD and CQs the connection allocated itself. Close is idempotent.
func (c *Conn) Close() error { return c.c.close() }

// UDEndpoint is a local UD QP (in RTS, Q_Key RDMA_UDP_QKEY) and the
// remote UD service DialUD resolved.
type UDEndpoint struct {
	*resources // QP, PD, SendCQ, RecvCQ
	u          *udEndpoint
}

// AH is the address handle of the resolved peer (SendWR.AH).
func (e *UDEndpoint) AH() *qp.AH { return e.u.ah }

// RemoteQPN and RemoteQKey are the SIDR_REP's: where to send
// (SendWR.RemoteQPN, SendWR.RemoteQKey).
func (e *UDEndpoint) RemoteQPN() uint32 { return e.u.remoteQPN }

// RemoteQKey is the Q_Key the peer's QP accepts.
func (e *UDEndpoint) RemoteQKey() uint32 { return e.u.remoteQKey }

// RemoteAddr is the resolved service's address.
func (e *UDEndpoint) RemoteAddr() netip.AddrPort { return e.u.remote }

// LocalAddr is the source address of the SIDR_REQ.
func (e *UDEndpoint) LocalAddr() netip.AddrPort { return e.u.local }

// PrivateData is the SIDR_REP's private data area, whole (136 bytes; see
// Conn.PrivateData).
func (e *UDEndpoint) PrivateData() []byte { return e.u.peerPrivate }

// Close destroys the QP (and the PD and CQs it allocated itself).
func (e *UDEndpoint) Close() error { return e.u.close() }

// UDListener answers SIDR_REQs for one port with its UD QP (in RTS, Q_Key
// RDMA_UDP_QKEY).
type UDListener struct {
	*resources // QP, PD, SendCQ, RecvCQ
	u          *udListener
}

// QKey is the Q_Key the listener's QP accepts (and SIDR_REP announces).
func (l *UDListener) QKey() uint32 { return l.u.qkey }

// Addr is the address the listener answers for.
func (l *UDListener) Addr() netip.AddrPort { return l.u.addr }

// Close stops answering (later SIDR_REQs get "no such service") and
// destroys the QP.
func (l *UDListener) Close() error { return l.u.close() }
