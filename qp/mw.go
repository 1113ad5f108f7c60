package qp

import (
	"errors"
	"fmt"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
)

// Memory windows (ibv_alloc_mw, ibv_bind_mw, IBV_WR_BIND_MW), with rxe's
// rules (drivers/infiniband/sw/rxe/rxe_mw.c): see memreg.Table.BindMW for
// the bind checks and memreg.Table.RemoteQP for the checks every remote
// access through a window passes.
type (
	// MW is a memory window. RKey is its current rkey, Type its type,
	// Bound whether it covers memory now, Dealloc frees it
	// (ibv_dealloc_mw).
	MW = memreg.MW
	// MWType is IBV_MW_TYPE_1 or IBV_MW_TYPE_2.
	MWType = memreg.MWType
	// BindInfo is the bind of a WRBindMW send work request
	// (SendWR.BindMW): MWRKey, the window's current rkey; RKey, whose key
	// byte becomes the window's (IncRKey(MWRKey) is the usual choice);
	// MRLKey, Addr, Length: the MR range; Access: REMOTE_READ/WRITE/ATOMIC
	// and, for type 2, ZERO_BASED.
	BindInfo = transport.BindInfo
)

// Memory window types.
const (
	MWType1 = memreg.MWType1 // bound with QP.BindMW; cannot be invalidated
	MWType2 = memreg.MWType2 // type 2B: bound by a WRBindMW on a QP of its PD, invalidated by LOCAL_INV or SEND_WITH_INV
)

// ErrMWBind is wrapped by a bind of a window to an MR of another PD
// (ibv_bind_mw returns EPERM). (Before issue 20 it was ErrMWBind, which
// now means a lack of privilege opening an interface.)
var ErrMWBind = errors.New("qp: memory window bind not permitted")

// IncRKey returns rkey with its key byte incremented (ibv_inc_rkey): the
// rkey a window gets from its next bind.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// AllocMW allocates a memory window in the PD (ibv_alloc_mw). A type 1
// window is bound with QP.BindMW, a type 2 window with a WRBindMW work
// request on a QP of this PD.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if pd.dev.isClosed() {
		return nil, ErrClosed
	}
	mw, err := pd.pd.AllocMW(typ)
	if err != nil {
		return nil, fmt.Errorf("qp: alloc MW: %w", err)
	}
	return mw, nil
}

// MWBindAttr is what QP.BindMW binds a type 1 window to (struct ibv_mw_bind;
// the name MWBind is the access flag):
// [Addr, Addr+Length) of MR with the remote rights in Access; MR nil with
// Addr and Length 0 unbinds the window. WRID and Flags are those of the
// work request the bind is posted as (SendSignaled for a completion).
type MWBindAttr struct {
	MR     *MR
	Addr   uint64
	Length uint64
	Access Access
	WRID   uint64
	Flags  SendFlags
}

// BindMW binds a type 1 window (ibv_bind_mw): as libibverbs and rdma-core's
// rxe provider do, it checks the call, posts a BIND_MW work request on q
// whose new rkey is the window's with the key byte incremented, and returns
// that rkey. The bind itself happens when the send queue reaches it; it
// completes with WCBindMW, or WCMWBindErr (and the QP goes to ERR) when rxe
// would refuse it. Binds posted one after another each take the next key.
//
// It fails with ErrInvalidArgument for a type 2 window, a window of another
// device, a ZERO_BASED bind, or Addr/Length without an MR, and with
// ErrMWBind for an MR of another PD than the window's.
func (q *QP) BindMW(mw *MW, b MWBindAttr) (uint32, error) {
	d := q.dev
	switch {
	case mw == nil || mw.Table() != d.mrs:
		return 0, fmt.Errorf("qp: bind MW: no window of this device: %w", ErrInvalidArgument)
	case mw.Type() != MWType1:
		return 0, fmt.Errorf("qp: bind MW: a %v window is bound by a WRBindMW work request: %w", mw.Type(), ErrInvalidArgument)
	case b.MR == nil && (b.Addr != 0 || b.Length != 0):
		return 0, fmt.Errorf("qp: bind MW: a range without an MR: %w", ErrInvalidArgument)
	case b.MR != nil && b.MR.m().PD() != mw.PD():
		return 0, fmt.Errorf("qp: bind MW: the MR is in another PD than the window: %w", ErrMWBind)
	case b.Access&memreg.ZeroBased != 0:
		return 0, fmt.Errorf("qp: bind MW: a type 1 window cannot be zero-based: %w", ErrInvalidArgument)
	}
	wr := SendWR{WRID: b.WRID, Opcode: WRBindMW, Flags: b.Flags}
	d.mu.Lock()
	if err := q.postable(q.sendCQ); err != nil {
		d.mu.Unlock()
		return 0, err
	}
	cur, next := mw.BindKeys()
	wr.BindMW = BindInfo{MWRKey: cur, RKey: next, Addr: b.Addr, Length: b.Length, Access: b.Access}
	if b.MR != nil {
		wr.BindMW.MRLKey = b.MR.LKey()
	}
	now := d.now()
	err := q.eng.PostSend(wr.engine(), now)
	if err == nil {
		mw.Posted(next)
	}
	d.touch(q)
	d.endCall(now)
	d.unlock()
	d.drv.kick()
	if err != nil {
		return 0, err
	}
	return next, nil
}
