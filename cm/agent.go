package cm

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

// The rdma_cm constants the active side puts into its REQ
// (drivers/infiniband/core/cma.c).
const (
	cmaCMResponseTimeout = 20 // CMA_CM_RESPONSE_TIMEOUT: 4.096 µs × 2^20 ≈ 4.3 s
	cmaMaxCMRetries      = 15 // CMA_MAX_CM_RETRIES
	// CMA_IBOE_PACKET_LIFETIME, the path's packet life time on RoCE: 18 in
	// the Linux 6.1 of the interop VMs (its REQ in testdata/rxe/rping.pcap
	// has LocalAckTimeout 19 = cm_ack_timeout(15, 18)); mainline later
	// lowered it to 16.
	cmaPacketLifetime = 18
	udpQKey           = 0x01234567
	permissiveLID     = 0xFFFF
	defaultPKey       = 0xFFFF
)

// Bounds on what a peer's messages may make us hold (issue 20: a half-open
// flood). Linux takes the REP's timeout and retries from the REQ uncapped;
// 128 REQs asking for 2^23 ms × 15 retries locked a Listener for hours.
// These are the SYN-flood defences of a TCP stack: a capped retransmission
// schedule, a capped half-open lifetime, and a half-open budget apart from
// the accept backlog, per source too, whose oldest entry gives way.
const (
	// maxPeerCMTimeout caps a timeout taken from a peer's field (the
	// REQ's local CM response timeout for our REP): cm_convert_to_ms(21).
	// rdma_cm asks for 20 (4096 ms), which stays as it is.
	maxPeerCMTimeout = 8192 * time.Millisecond
	// maxHalfOpenLife bounds a passive ID from its REQ to its RTU: the REP
	// is resent until then at most, then the ID ends as if the retries ran
	// out. rdma_cm's own 4096 ms × 16 sends would take 65.5 s.
	maxHalfOpenLife = 60 * time.Second
	// maxWait caps every other wait a peer's field sets: timewait (the
	// path's timeout from the REQ or REP) and an MRA's service timeout.
	maxWait = 60 * time.Second
	// halfOpenMax is the device's budget of half-open passive IDs (REQ
	// received, RTU not yet), each with a QP and a goroutine; halfOpenPerSource
	// the share of one source GID (enough for a host dialling a queue per
	// CPU at once, as an NVMe-oF host does). A REQ beyond either evicts the
	// oldest half-open ID (of that source, or of all), which gets REJ "no
	// resources".
	halfOpenMax       = 1024
	halfOpenPerSource = 128
	// maxSIDRPending bounds the SIDR_REQs being answered at once (each on
	// a goroutine of its own, running the listener's Accept); more are
	// dropped, and their senders retry.
	maxSIDRPending = 64
)

// cmMS is cm_convert_to_ms: the kernel's approximation of 4.096 µs × 2^t,
// 2^(t−8) ms (cm.c). Every CM timer uses it.
func cmMS(t uint8) time.Duration {
	if t < 8 {
		return time.Millisecond
	}
	return time.Duration(1<<(t-8)) * time.Millisecond
}

// cmAckTimeout is cm_ack_timeout (cm.c): the QP's local ACK timeout for a
// path, 4.096 µs × 2^t ≥ the target's ACK delay + twice the packet life
// time, rounding up only when the other term is within 50 %.
func cmAckTimeout(caAckDelay, packetLifeTime uint8) uint8 {
	t := int(packetLifeTime) + 1
	d := int(caAckDelay)
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		t = d
		if int(packetLifeTime)+1 >= d-1 {
			t++
		}
	}
	return uint8(min(31, t))
}

// madAddr is where a MAD comes from or goes to: a peer's GSI. MAC is a
// received MAD's Ethernet source: answers go there without resolving GID,
// so a spoofed source nobody answers ARP for costs the agent nothing (nil
// for our own Dial's peer, which is resolved).
type madAddr struct {
	GID                    netip.Addr
	QPN, QKey              uint32
	HopLimit, TrafficClass uint8
	MAC                    net.HardwareAddr
}

// gsiPort is the MAD I/O the agent needs from the device's GSI (QP1).
type gsiPort interface {
	// handle registers h for CM MADs (class 0x07). h runs on one dispatch
	// goroutine; mad is valid during the call; h may call send.
	handle(h func(from madAddr, mad []byte)) (unregister func(), err error)
	// send sends one 256-byte MAD to a peer's GSI.
	send(ctx context.Context, to madAddr, mad []byte) error
}

// openGSI gives a device's GSI. Tests replace it with an in-memory fake.
var openGSI = func(dev *qp.Device) (gsiPort, error) { return gsiOf(dev) }

// cmState is the state of a communication ID (enum ib_cm_state).
type cmState int

const (
	stIdle cmState = iota
	stReqSent
	stMRAReqRcvd
	stReqRcvd
	stRepSent
	stMRARepRcvd
	stRepRcvd
	stEstablished
	stDreqSent
	stDreqRcvd
	stTimewait
	stSIDRReqSent
)

var stateNames = [...]string{"IDLE", "REQ_SENT", "MRA_REQ_RCVD", "REQ_RCVD", "REP_SENT", "MRA_REP_RCVD",
	"REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT", "SIDR_REQ_SENT"}

func (s cmState) String() string { return stateNames[s] }

// evKind is what the agent tells the owner of a communication ID.
type evKind int

const (
	evREP      evKind = iota // REP received (REQ_SENT → REP_RCVD)
	evRTU                    // RTU received (REP_SENT → ESTABLISHED)
	evREJ                    // REJ received
	evTimeout                // the outstanding message ran out of retries
	evDREQ                   // DREQ received and answered with DREP
	evDREP                   // DREP received (DREQ_SENT → TIMEWAIT)
	evSIDRREP                // SIDR_REP received
	evFinished               // the ID left timewait (or was dropped): nothing more will come
)

type cmEvent struct {
	kind evKind
	rep  *mad.REP
	rej  *mad.REJ
	sidr *mad.SIDRREP
}

type remoteKey struct {
	id   uint32 // remote comm ID or remote QPN
	guid uint64 // remote CA GUID
}

// cmID is one communication ID (struct cm_id_private), owned by the agent's
// mutex. Its owner (Dial, a listener's setup goroutine, a Conn's watcher,
// DialUD) reads ev.
type cmID struct {
	state             cmState
	localID, remoteID uint32
	tid               uint64
	remoteGUID        uint64
	localQPN          uint32
	remoteQPN         uint32
	peer              madAddr

	// The outstanding message and its retransmission, as the MAD layer
	// does for a send with a timeout: msg is resent every timeout until
	// retries run out (then evTimeout).
	msg     []byte
	timeout time.Duration // this ID's timeout_ms
	msgTime time.Duration // msg's timeout: timeout, or an MRA's (ib_modify_mad)
	retries int           // left for msg
	maxRet  int           // max_cm_retries
	timer   *time.Timer
	gen     uint64

	avTimeout uint8 // cm_av.timeout: the path's packet life time + 1; after a REP, the ACK timeout

	// A passive ID from its REQ to its RTU is half-open: counted in
	// agent.halfOpen, ended at deadline (maxHalfOpenLife after the REQ),
	// its setup's QP transitions cancelled by abort when it is evicted.
	halfOpen bool
	deadline time.Time
	abort    context.CancelFunc

	rtu []byte // ESTABLISHED on the active side: the RTU, resent for a duplicate REP

	inRemote, inRemoteQP bool // in agent.byRemote / agent.byRemoteQP
	sidr                 bool
	sidrKey              sidrKey // passive SIDR: the pending request

	ev chan cmEvent
}

type sidrKey struct {
	id  uint32
	gid netip.Addr
}

// agent is a device's CM agent (one cm_port): the only user of class 0x07
// on the device's GSI.
type agent struct {
	dev   *qp.Device
	port  gsiPort
	unreg func()
	log   *slog.Logger
	guid  uint64
	ack   uint8 // local CA ACK delay (REP.TargetAckDelay)
	hiTID uint32

	mu          sync.Mutex
	refs        int
	dead        bool
	ids         map[uint32]*cmID
	byRemote    map[remoteKey]*cmID // (remote comm ID, CA GUID): duplicate REQ/REP (cm.remote_id_table)
	byRemoteQP  map[remoteKey]*cmID // (remote QPN, CA GUID): stale connections (cm.remote_qp_table)
	listeners   map[uint64]*listener
	udListeners map[uint64]*udListener
	sidrPending map[sidrKey]bool
	ports       map[uint16]bool // local ports Dial and DialUD use now
	halfOpen    []*cmID         // the half-open passive IDs, oldest first
	halfOpenBy  map[netip.Addr]int
	stats       Stats
}

var agents struct {
	mu sync.Mutex
	m  map[*qp.Device]*agent
}

// acquireAgent returns dev's agent with one more reference, creating it and
// registering it on the GSI on first use.
func acquireAgent(dev *qp.Device, log *slog.Logger) (*agent, error) {
	if dev == nil {
		return nil, errors.New("cm: nil device")
	}
	agents.mu.Lock()
	defer agents.mu.Unlock()
	if a := agents.m[dev]; a != nil {
		a.mu.Lock()
		if !a.dead {
			a.refs++
			a.mu.Unlock()
			return a, nil
		}
		a.mu.Unlock()
	}
	port, err := openGSI(dev)
	if err != nil {
		return nil, err
	}
	attr := dev.Attr()
	a := &agent{
		dev: dev, port: port, log: log,
		guid: attr.NodeGUID, ack: uint8(attr.LocalCAAckDelay), hiTID: rand.Uint32(),
		refs: 1, ids: map[uint32]*cmID{},
		byRemote: map[remoteKey]*cmID{}, byRemoteQP: map[remoteKey]*cmID{},
		listeners: map[uint64]*listener{}, udListeners: map[uint64]*udListener{},
		sidrPending: map[sidrKey]bool{}, ports: map[uint16]bool{}, halfOpenBy: map[netip.Addr]int{},
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	unreg, err := port.handle(a.receive)
	if err != nil {
		return nil, err
	}
	a.unreg = unreg
	if agents.m == nil {
		agents.m = map[*qp.Device]*agent{}
	}
	agents.m[dev] = a
	return a, nil
}

// release drops a reference taken by acquireAgent (or by a cmID). The last
// one unregisters the agent from the GSI. Never called with a.mu held.
func (a *agent) release() {
	a.mu.Lock()
	a.refs--
	last := a.refs == 0
	if last {
		a.dead = true
	}
	a.mu.Unlock()
	if last {
		a.finish()
	}
}

func (a *agent) finish() {
	agents.mu.Lock()
	if agents.m[a.dev] == a {
		delete(agents.m, a.dev)
	}
	agents.mu.Unlock()
	a.unreg()
}

// outbox collects what a locked section wants done after the unlock: MADs
// to send, events to deliver once they are sent, and references to drop.
type outbox struct {
	sends    []outMAD
	events   []outEvent
	releases int
}

// outEvent is an event delivered after the outbox's MADs went out: a
// DREQ's "disconnected" must not reach the application before the DREP
// answering it left, or a program that exits on it loses the DREP.
type outEvent struct {
	id *cmID
	e  cmEvent
}

type outMAD struct {
	to madAddr
	b  []byte
}

func (o *outbox) add(to madAddr, b []byte) {
	if b != nil {
		o.sends = append(o.sends, outMAD{to, b})
	}
}

// flush sends and releases; a.mu must not be held.
func (a *agent) flush(o *outbox) {
	for _, m := range o.sends {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := a.port.send(ctx, m.to, m.b); err != nil {
			a.log.Debug("cm: MAD send failed", "to", m.to.GID, "err", err)
		}
		cancel()
	}
	for _, ev := range o.events {
		ev.id.notify(ev.e)
	}
	for range o.releases {
		a.release()
	}
	*o = outbox{}
}

// marshal builds one CM MAD.
func marshal(tid uint64, m mad.Message) []byte {
	b := make([]byte, mad.MADLen)
	if err := mad.Marshal(mad.CMHeader(tid, m.AttrID()), m, b); err != nil {
		panic("cm: " + err.Error()) // every field is set from validated values
	}
	return b
}

// formTID is cm_form_tid: the agent's high half and the local comm ID (the
// REQ, DREQ and SIDR_REQ of an ID share it).
func (a *agent) formTID(id *cmID) uint64 { return uint64(a.hiTID)<<32 | uint64(id.localID) }

// newID allocates a communication ID holding an agent reference. Its local
// comm ID is random, never 0 and unique among the live IDs (those in
// timewait included). Linux's cm_alloc_id_priv XORs a cyclic counter with
// one random operand, so an attacker who saw one ID finds the next ones
// among a few dozen guesses (n ^ (n+1) is a run of low ones); a fresh
// random value each time leaves him 2^32. The REQ's, DREQ's and SIDR_REQ's
// TIDs carry it too (cm_form_tid). Called with a.mu held.
func (a *agent) newID() *cmID {
	for {
		v := rand.Uint32()
		if v == 0 || a.ids[v] != nil {
			continue
		}
		id := &cmID{localID: v, ev: make(chan cmEvent, 8)}
		a.ids[v] = id
		a.refs++
		return id
	}
}

// drop removes an ID for good (it is idle, or its timewait ended), telling
// the owner. Called with a.mu held.
func (a *agent) drop(o *outbox, id *cmID) {
	id.cancel()
	a.forgetRemote(id)
	a.leaveHalfOpen(id)
	if a.ids[id.localID] == id {
		delete(a.ids, id.localID)
		o.releases++
	}
	if id.sidrKey != (sidrKey{}) {
		delete(a.sidrPending, id.sidrKey)
	}
	id.state = stIdle
	id.notify(cmEvent{kind: evFinished})
}

func (a *agent) forgetRemote(id *cmID) {
	if id.inRemote {
		delete(a.byRemote, remoteKey{id.remoteID, id.remoteGUID})
		id.inRemote = false
	}
	if id.inRemoteQP {
		delete(a.byRemoteQP, remoteKey{id.remoteQPN, id.remoteGUID})
		id.inRemoteQP = false
	}
}

// enterTimewait is cm_enter_timewait: cm_cleanup_timewait forgets the
// remote comm ID and QPN (a REQ from them is new again), and the ID lives
// for the path's timeout (cm_convert_to_ms(av.timeout)) before it is
// dropped, its local comm ID not reused meanwhile. Called with a.mu held.
func (a *agent) enterTimewait(id *cmID) {
	id.cancel()
	a.forgetRemote(id)
	a.leaveHalfOpen(id)
	id.state = stTimewait
	id.msg = nil
	id.arm(a, min(cmMS(id.avTimeout), maxWait))
}

// enterHalfOpen counts a new passive ID against the half-open budget,
// evicting the oldest half-open ID of the same source when that source has
// its share, else the oldest of all when the budget is full. Called with
// a.mu held.
func (a *agent) enterHalfOpen(o *outbox, id *cmID) {
	src := id.peer.GID.Unmap()
	if a.halfOpenBy[src] >= halfOpenPerSource {
		for _, old := range a.halfOpen {
			if old.peer.GID.Unmap() == src {
				a.evict(o, old)
				break
			}
		}
	} else if len(a.halfOpen) >= halfOpenMax {
		a.evict(o, a.halfOpen[0])
	}
	id.halfOpen = true
	id.deadline = time.Now().Add(maxHalfOpenLife)
	a.halfOpen = append(a.halfOpen, id)
	a.halfOpenBy[src]++
}

// leaveHalfOpen takes an ID out of the half-open budget (established,
// rejected, timed out, dropped). Called with a.mu held.
func (a *agent) leaveHalfOpen(id *cmID) {
	if !id.halfOpen {
		return
	}
	id.halfOpen = false
	id.deadline = time.Time{}
	if i := slices.Index(a.halfOpen, id); i >= 0 {
		a.halfOpen = slices.Delete(a.halfOpen, i, i+1)
	}
	src := id.peer.GID.Unmap()
	if a.halfOpenBy[src]--; a.halfOpenBy[src] <= 0 {
		delete(a.halfOpenBy, src)
	}
}

// evict ends a half-open ID for a newer request, as a SYN cache drops its
// oldest entry: REJ "no resources" to its peer, its setup cancelled.
// Called with a.mu held.
func (a *agent) evict(o *outbox, id *cmID) {
	a.stats.Evicted++
	if id.abort != nil {
		id.abort()
	}
	a.leaveHalfOpen(id)
	a.sendREJ(o, id, mad.RejNoResources, nil, nil)
	id.notify(cmEvent{kind: evTimeout})
}

// notify hands an event to the ID's owner; the buffer is larger than the
// events one state can produce.
func (id *cmID) notify(e cmEvent) {
	select {
	case id.ev <- e:
	default:
	}
}

// send starts an outstanding message: sent now, resent every id.timeout,
// retries times. Called with a.mu held.
func (id *cmID) send(a *agent, o *outbox, b []byte, retries int) {
	id.msg = b
	id.retries = retries
	id.msgTime = id.timeout
	o.add(id.peer, b)
	id.armMsg(a)
}

// armMsg arms the outstanding message's retransmission, no later than a
// half-open ID's deadline.
func (id *cmID) armMsg(a *agent) {
	d := id.msgTime
	if !id.deadline.IsZero() {
		d = max(0, min(d, time.Until(id.deadline)))
	}
	id.arm(a, d)
}

func (id *cmID) arm(a *agent, d time.Duration) {
	id.cancel()
	g := id.gen
	id.timer = time.AfterFunc(d, func() { a.expire(id, g) })
}

func (id *cmID) cancel() {
	id.gen++
	if id.timer != nil {
		id.timer.Stop()
		id.timer = nil
	}
}

// expire runs when an ID's timer fires: retransmission, a send error once
// the retries are used up (cm_process_send_error), or the end of timewait.
func (a *agent) expire(id *cmID, gen uint64) {
	var o outbox
	a.mu.Lock()
	if id.gen != gen {
		a.mu.Unlock()
		return
	}
	id.timer = nil
	switch {
	case id.state == stTimewait:
		a.drop(&o, id)
	case id.msg != nil && id.retries > 0 && (id.deadline.IsZero() || time.Now().Before(id.deadline)):
		id.retries--
		a.stats.Retransmits++
		o.add(id.peer, id.msg)
		id.armMsg(a)
	default:
		a.sendError(&o, id)
	}
	a.mu.Unlock()
	a.flush(&o)
}

// sendError is cm_process_send_error: the peer never answered.
func (a *agent) sendError(o *outbox, id *cmID) {
	id.msg = nil
	switch id.state {
	case stReqSent, stMRAReqRcvd, stRepSent, stMRARepRcvd, stSIDRReqSent:
		id.notify(cmEvent{kind: evTimeout})
		a.drop(o, id)
	case stDreqSent:
		id.notify(cmEvent{kind: evTimeout})
		a.enterTimewait(id)
	}
}

// Stats count the CM messages of a device's agent.
type Stats struct {
	Received    uint64 // CM MADs received and parsed
	Invalid     uint64 // MADs that could not be parsed (or of another class version or method)
	Dropped     uint64 // parsed messages that matched no communication ID or state
	Duplicates  uint64 // duplicate REQ, REP, RTU, DREQ, SIDR_REQ, MRA
	Retransmits uint64 // REQ, REP, DREQ, SIDR_REQ resent on their timeout
	Rejects     uint64 // REJs sent
	// Evicted are the half-open connection requests (REQ received, no
	// RTU yet) ended for newer ones because the device's half-open budget
	// (1024), or one source's share of it (128), was full.
	Evicted uint64
}

// AgentStats returns the counters of dev's CM agent (zero when the device
// has none now).
func AgentStats(dev *qp.Device) Stats {
	agents.mu.Lock()
	a := agents.m[dev]
	agents.mu.Unlock()
	if a == nil {
		return Stats{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// receive is the GSI handler: one CM MAD.
func (a *agent) receive(from madAddr, b []byte) {
	h, m, err := mad.Parse(b)
	var o outbox
	a.mu.Lock()
	if err != nil || h.ClassVersion != mad.CMClassVersion || h.Method != mad.MethodSend {
		a.stats.Invalid++
		a.mu.Unlock()
		return
	}
	a.stats.Received++
	switch m := m.(type) {
	case *mad.REQ:
		a.onREQ(&o, from, h, m)
	case *mad.MRA:
		a.onMRA(from, m)
	case *mad.REJ:
		a.onREJ(&o, from, m)
	case *mad.REP:
		a.onREP(&o, from, m)
	case *mad.RTU:
		a.onRTU(from, m)
	case *mad.DREQ:
		a.onDREQ(&o, from, h, m)
	case *mad.DREP:
		a.onDREP(from, m)
	case *mad.SIDRREQ:
		a.onSIDRREQ(&o, from, h, m)
	case *mad.SIDRREP:
		a.onSIDRREP(&o, from, m)
	default:
		a.stats.Dropped++
	}
	a.mu.Unlock()
	a.flush(&o)
}

// acquire is cm_acquire_id: the ID with this local comm ID whose remote
// comm ID is remote. Remote 0 is how the replies to a REQ or SIDR_REQ (REP,
// REJ and MRA of the REQ, SIDR_REP) find their ID, which matches only while
// it has no remote ID yet: an established connection's ID is found only
// with both comm IDs.
//
// from must be the ID's peer: a message with the right IDs from another
// address is an attacker's who saw or guessed them (Linux relies on the
// IDs alone; an L2 neighbour can forge any GID, but then he must also
// guess two random 32-bit IDs).
func (a *agent) acquire(from madAddr, local, remote uint32) *cmID {
	id := a.ids[local]
	if id == nil || id.remoteID != remote || !samePeer(id.peer, from) {
		return nil
	}
	return id
}

// samePeer: a MAD from "from" comes from the peer of an ID whose MADs go to
// peer.
func samePeer(peer, from madAddr) bool { return peer.GID.Unmap() == from.GID.Unmap() }

// issueREJ is cm_issue_rej: a REJ answering a message that matched no ID.
func (a *agent) issueREJ(o *outbox, to madAddr, tid uint64, local, remote uint32,
	reason mad.RejectReason, rejected mad.MsgType) {
	a.stats.Rejects++
	o.add(to, marshal(tid, &mad.REJ{LocalCommID: local, RemoteCommID: remote, MsgRejected: rejected, Reason: reason}))
}

// rej is cm_format_rej: a REJ from an ID in its current state.
func (a *agent) rej(id *cmID, reason mad.RejectReason, ari []byte, private []byte) []byte {
	a.stats.Rejects++
	m := &mad.REJ{RemoteCommID: id.remoteID, Reason: reason, LocalCommID: id.localID, MsgRejected: mad.MsgTypeOther}
	switch id.state {
	case stReqRcvd:
		m.LocalCommID = 0
		m.MsgRejected = mad.MsgTypeREQ
	case stRepRcvd:
		m.MsgRejected = mad.MsgTypeREP
	}
	if len(ari) > 0 {
		m.RejInfoLen = uint8(copy(m.ARI[:], ari))
	}
	copy(m.PrivateData[:], private)
	return marshal(id.tid, m)
}

// sendREJ is ib_send_cm_rej from the ID's owner. Called with a.mu held.
func (a *agent) sendREJ(o *outbox, id *cmID, reason mad.RejectReason, ari, private []byte) {
	switch id.state {
	case stReqSent, stMRAReqRcvd, stReqRcvd, stRepRcvd:
		o.add(id.peer, a.rej(id, reason, ari, private))
		a.drop(o, id)
	case stRepSent, stMRARepRcvd:
		o.add(id.peer, a.rej(id, reason, ari, private))
		a.enterTimewait(id)
	}
}

func (a *agent) onREQ(o *outbox, from madAddr, h mad.Header, m *mad.REQ) {
	// cm_match_req: a REQ from a (comm ID, CA) pair already known is a
	// duplicate (cm_dup_req_handler: dropped while the REQ is being
	// handled or the REP is out, REJ stale connection in timewait).
	if dup := a.byRemote[remoteKey{m.LocalCommID, m.LocalCAGUID}]; dup != nil {
		a.stats.Duplicates++
		if dup.state == stTimewait {
			o.add(from, a.rej(dup, mad.RejStaleConn, nil, nil))
		}
		return
	}
	if stale := a.byRemoteQP[remoteKey{m.LocalQPN, m.LocalCAGUID}]; stale != nil {
		// The remote QP is still connected to (or in timewait with) an
		// earlier ID: REJ stale connection, and disconnect that one —
		// only when the REQ comes from that connection's peer. Anyone
		// can put a victim's QPN and CA GUID (both in its REQ or REP) into
		// a REQ; from elsewhere it is refused and the victim kept.
		a.issueREJ(o, from, h.TID, 0, m.LocalCommID, mad.RejStaleConn, mad.MsgTypeREQ)
		if stale.state == stEstablished && samePeer(stale.peer, from) {
			a.sendDREQ(o, stale)
		}
		return
	}
	l := a.listeners[m.ServiceID]
	if l == nil || l.closed {
		a.issueREJ(o, from, h.TID, 0, m.LocalCommID, mad.RejInvalidServiceID, mad.MsgTypeREQ)
		return
	}
	hdr, err := m.CMAHeader()
	if _, want := connSpace(l.o.QPType); err != nil || m.TransportType != want {
		a.log.Debug("cm: REQ with a bad cma_hdr or transport", "err", err, "transport", m.TransportType)
		a.issueREJ(o, from, h.TID, 0, m.LocalCommID, mad.RejConsumerDefined, mad.MsgTypeREQ)
		return
	}
	if l.addr.Addr().IsValid() && !l.addr.Addr().IsUnspecified() && hdr.Dst.Unmap() != l.addr.Addr() {
		// rdma_cm finds no listener bound to that address (cma_find_listener).
		a.issueREJ(o, from, h.TID, 0, m.LocalCommID, mad.RejInvalidServiceID, mad.MsgTypeREQ)
		return
	}
	if len(l.backlog) >= l.o.Backlog {
		// The accept queue is full (half-open requests do not count:
		// they have their own budget, enterHalfOpen).
		a.issueREJ(o, from, h.TID, 0, m.LocalCommID, mad.RejNoResources, mad.MsgTypeREQ)
		return
	}
	// cm_req_handler.
	id := a.newID()
	id.state = stReqRcvd
	id.remoteID = m.LocalCommID
	id.remoteGUID = m.LocalCAGUID
	id.remoteQPN = m.LocalQPN
	id.tid = h.TID
	id.peer = from
	id.timeout = min(cmMS(m.LocalCMResponseTimeout), maxPeerCMTimeout)
	id.maxRet = int(m.MaxCMRetries) // 4 bits: ≤ 15, CMA_MAX_CM_RETRIES
	pkt := m.Primary.LocalAckTimeout
	if pkt > 0 {
		pkt-- // cm_format_paths_from_req
	}
	id.avTimeout = pkt + 1
	a.byRemote[remoteKey{id.remoteID, id.remoteGUID}] = id
	id.inRemote = true
	a.byRemoteQP[remoteKey{id.remoteQPN, id.remoteGUID}] = id
	id.inRemoteQP = true
	a.enterHalfOpen(o, id)
	l.pending++
	req := *m
	l.wg.Add(1)
	go l.serve(id, &req, hdr, from)
}

func (a *agent) onMRA(from madAddr, m *mad.MRA) {
	// cm_acquire_mraed_id.
	var id *cmID
	switch m.MsgMRAed {
	case mad.MsgTypeREQ:
		id = a.acquire(from, m.RemoteCommID, 0)
	case mad.MsgTypeREP, mad.MsgTypeOther:
		id = a.acquire(from, m.RemoteCommID, m.LocalCommID)
	}
	if id == nil {
		a.stats.Dropped++
		return
	}
	// cm_mra_handler: the answer will take the service timeout longer;
	// ib_modify_mad gives the outstanding message that timeout from now
	// on and leaves its retries.
	timeout := min(cmMS(m.ServiceTimeout)+cmMS(id.avTimeout), maxWait)
	switch {
	case id.state == stReqSent && m.MsgMRAed == mad.MsgTypeREQ:
		id.state = stMRAReqRcvd
	case id.state == stRepSent && m.MsgMRAed == mad.MsgTypeREP:
		// Older kernels' rdma_cm active side MRAs every REP
		// (CMA_CM_MRA_SETTING); the REP stays outstanding.
		id.state = stMRARepRcvd
	default:
		a.stats.Duplicates++
		return
	}
	id.msgTime = timeout
	id.armMsg(a)
}

func (a *agent) onREJ(o *outbox, from madAddr, m *mad.REJ) {
	// cm_acquire_rejected_id: REJ timeout names the sender's comm ID and
	// CA GUID (its ARI), a REJ of a REQ our ID alone (it has no remote ID
	// yet), any other both IDs.
	var id *cmID
	switch {
	case m.Reason == mad.RejTimeout:
		var guid uint64
		if info := m.Info(); len(info) >= 8 {
			guid = uint64(info[0])<<56 | uint64(info[1])<<48 | uint64(info[2])<<40 | uint64(info[3])<<32 |
				uint64(info[4])<<24 | uint64(info[5])<<16 | uint64(info[6])<<8 | uint64(info[7])
		}
		if tw := a.byRemote[remoteKey{m.LocalCommID, guid}]; tw != nil {
			id = a.acquire(from, tw.localID, m.LocalCommID)
		}
	case m.MsgRejected == mad.MsgTypeREQ:
		id = a.acquire(from, m.RemoteCommID, 0)
	default:
		id = a.acquire(from, m.RemoteCommID, m.LocalCommID)
	}
	if id == nil {
		a.stats.Dropped++
		return
	}
	rej := *m
	switch id.state {
	case stReqSent, stMRAReqRcvd, stRepSent, stMRARepRcvd, stReqRcvd:
		id.cancel()
		id.notify(cmEvent{kind: evREJ, rej: &rej})
		if m.Reason == mad.RejStaleConn {
			a.enterTimewait(id)
		} else {
			a.drop(o, id)
		}
	case stDreqSent, stRepRcvd, stEstablished:
		id.notify(cmEvent{kind: evREJ, rej: &rej})
		a.enterTimewait(id)
	default:
		a.stats.Dropped++
	}
}

func (a *agent) onREP(o *outbox, from madAddr, m *mad.REP) {
	id := a.acquire(from, m.RemoteCommID, 0)
	if id == nil {
		// cm_dup_rep_handler: a REP for an ID that has its remote ID
		// already; the RTU again once established.
		if id = a.acquire(from, m.RemoteCommID, m.LocalCommID); id == nil {
			a.stats.Dropped++
			return
		}
		a.stats.Duplicates++
		if id.state == stEstablished && id.rtu != nil {
			o.add(from, id.rtu)
		}
		return
	}
	if id.state != stReqSent && id.state != stMRAReqRcvd {
		a.stats.Dropped++ // a SIDR ID, or a passive one
		return
	}
	key := remoteKey{m.LocalCommID, m.LocalCAGUID}
	if a.byRemote[key] != nil {
		a.stats.Duplicates++
		return
	}
	if a.byRemoteQP[remoteKey{m.LocalQPN, m.LocalCAGUID}] != nil {
		// cm_rep_handler: a stale connection.
		a.issueREJ(o, from, id.tid, m.RemoteCommID, m.LocalCommID, mad.RejStaleConn, mad.MsgTypeREP)
		return
	}
	id.cancel()
	id.msg = nil
	id.state = stRepRcvd
	id.remoteID = m.LocalCommID
	id.remoteGUID = m.LocalCAGUID
	id.remoteQPN = m.LocalQPN
	a.byRemote[key] = id
	id.inRemote = true
	a.byRemoteQP[remoteKey{id.remoteQPN, id.remoteGUID}] = id
	id.inRemoteQP = true
	id.avTimeout = cmAckTimeout(m.TargetAckDelay, id.avTimeout-1)
	rep := *m
	id.notify(cmEvent{kind: evREP, rep: &rep})
}

func (a *agent) onRTU(from madAddr, m *mad.RTU) {
	id := a.acquire(from, m.RemoteCommID, m.LocalCommID)
	if id == nil {
		a.stats.Dropped++
		return
	}
	if id.state != stRepSent && id.state != stMRARepRcvd {
		a.stats.Duplicates++
		return
	}
	id.cancel()
	id.msg = nil
	a.leaveHalfOpen(id)
	id.state = stEstablished
	id.notify(cmEvent{kind: evRTU})
}

// sendDREQ is ib_send_cm_dreq. Called with a.mu held.
func (a *agent) sendDREQ(o *outbox, id *cmID) {
	if id.state != stEstablished {
		return
	}
	id.state = stDreqSent
	id.send(a, o, marshal(a.formTID(id), &mad.DREQ{LocalCommID: id.localID, RemoteCommID: id.remoteID,
		RemoteQPN: id.remoteQPN}), id.maxRet)
}

func (a *agent) drep(id *cmID) []byte {
	return marshal(id.tid, &mad.DREP{LocalCommID: id.localID, RemoteCommID: id.remoteID})
}

func (a *agent) onDREQ(o *outbox, from madAddr, h mad.Header, m *mad.DREQ) {
	id := a.acquire(from, m.RemoteCommID, m.LocalCommID)
	if id == nil {
		// cm_issue_drep: whatever it was, it is gone.
		a.stats.Duplicates++
		o.add(from, marshal(h.TID, &mad.DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID}))
		return
	}
	if id.localQPN != m.RemoteQPN {
		a.stats.Dropped++
		return
	}
	switch id.state {
	case stRepSent, stDreqSent, stEstablished, stMRARepRcvd:
		id.cancel()
		id.msg = nil
	case stTimewait:
		a.stats.Duplicates++
		id.tid = h.TID
		o.add(from, a.drep(id))
		return
	default:
		a.stats.Duplicates++
		return
	}
	// DREQ_RCVD, answered at once (rdma_cm's consumer would call
	// rdma_disconnect; nothing else can happen to the connection).
	id.state = stDreqRcvd
	id.tid = h.TID
	a.enterTimewait(id)
	o.add(from, a.drep(id))
	o.events = append(o.events, outEvent{id, cmEvent{kind: evDREQ}})
}

func (a *agent) onDREP(from madAddr, m *mad.DREP) {
	id := a.acquire(from, m.RemoteCommID, m.LocalCommID)
	if id == nil {
		a.stats.Dropped++
		return
	}
	if id.state != stDreqSent && id.state != stDreqRcvd {
		a.stats.Duplicates++
		return
	}
	id.notify(cmEvent{kind: evDREP})
	a.enterTimewait(id)
}

func (a *agent) onSIDRREQ(o *outbox, from madAddr, h mad.Header, m *mad.SIDRREQ) {
	key := sidrKey{m.RequestID, from.GID}
	if a.sidrPending[key] {
		a.stats.Duplicates++
		return
	}
	l := a.udListeners[m.ServiceID]
	if l == nil || l.closed {
		// cm_sidr_req_handler: no listener, IB_SIDR_UNSUPPORTED.
		o.add(from, marshal(h.TID, &mad.SIDRREP{RequestID: m.RequestID, Status: mad.SIDRUnsupported,
			ServiceID: m.ServiceID}))
		return
	}
	hdr, err := m.CMAHeader()
	if err != nil || (l.addr.Addr().IsValid() && !l.addr.Addr().IsUnspecified() && hdr.Dst.Unmap() != l.addr.Addr()) {
		o.add(from, marshal(h.TID, &mad.SIDRREP{RequestID: m.RequestID, Status: mad.SIDRReject,
			ServiceID: m.ServiceID}))
		return
	}
	if len(a.sidrPending) >= maxSIDRPending {
		a.stats.Dropped++
		return
	}
	a.sidrPending[key] = true
	req := *m
	l.wg.Add(1)
	go l.serve(&req, hdr, h.TID, from, key)
}

func (a *agent) onSIDRREP(o *outbox, from madAddr, m *mad.SIDRREP) {
	id := a.acquire(from, m.RequestID, 0)
	if id == nil || !id.sidr || id.state != stSIDRReqSent {
		a.stats.Dropped++
		return
	}
	rep := *m
	id.notify(cmEvent{kind: evSIDRREP, sidr: &rep})
	a.drop(o, id)
}
