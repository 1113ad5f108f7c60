package cm

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// The hostile-peer tests (issue 20): an attacker on the same L2 forges CM
// MADs with any source address. Each test states the attack and what must
// survive it. ipC is an address nobody has: the attacker's spoofed source.

var ipC = netip.MustParseAddr("198.18.0.3")

// forge marshals m as a CM MAD.
func forge(tid uint64, m mad.Message) []byte { return marshal(tid, m) }

// ids returns a connection's local and remote comm IDs and state.
func ids(c *Conn) (local, remote uint32, st cmState) {
	a := c.c.a
	a.mu.Lock()
	defer a.mu.Unlock()
	return c.c.id.localID, c.c.id.remoteID, c.c.id.state
}

// stillUp checks that a connection survived: no Done, still ESTABLISHED, and
// a SEND still goes through.
func stillUp(t *testing.T, ctx context.Context, e endpoints) {
	t.Helper()
	synctest.Wait()
	for _, c := range []*Conn{e.client, e.server} {
		select {
		case <-c.Done():
			t.Fatalf("the connection was torn down: %v", c.Err())
		default:
		}
		if _, _, st := ids(c); st != stEstablished {
			t.Fatalf("state %v after the attack", st)
		}
	}
	sendOne(t, ctx, e.client, e.server)
}

// A REJ naming the server's comm ID as "the REQ's" (any remote, as for a
// rejected REQ) must not end an ESTABLISHED connection: Linux matches "any
// remote" only while the ID waits for its REP (remote ID 0).
func TestForgedREJAnyRemote(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		defer e.client.Close()
		defer e.server.Close()
		sl, _, _ := ids(e.server)
		cl, _, _ := ids(e.client)
		// Both sides' IDs, right local, wrong remote, every REJ flavour.
		for _, m := range []*mad.REJ{
			{LocalCommID: 0, RemoteCommID: sl, MsgRejected: mad.MsgTypeREQ, Reason: mad.RejConsumerDefined},
			{LocalCommID: 12345, RemoteCommID: sl, MsgRejected: mad.MsgTypeREQ, Reason: mad.RejConsumerDefined},
			{LocalCommID: 12345, RemoteCommID: sl, MsgRejected: mad.MsgTypeOther, Reason: mad.RejConsumerDefined},
		} {
			n.inject(ipA, ipB, forge(1, m))
		}
		for _, m := range []*mad.REJ{
			{LocalCommID: 0, RemoteCommID: cl, MsgRejected: mad.MsgTypeREQ, Reason: mad.RejConsumerDefined},
			{LocalCommID: 12345, RemoteCommID: cl, MsgRejected: mad.MsgTypeREP, Reason: mad.RejConsumerDefined},
		} {
			n.inject(ipB, ipA, forge(1, m))
		}
		stillUp(t, ctx, e)
	})
}

// Messages with both comm IDs right but from another address than the
// peer's are dropped: REJ, DREQ (with the right QPN), DREP, MRA, LAP-less
// replies. The attacker saw the IDs (or guessed them) but is not the peer.
func TestForgedFromWrongSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		defer e.client.Close()
		defer e.server.Close()
		sl, sr, _ := ids(e.server)
		cl, cr, _ := ids(e.client)
		for _, m := range []mad.Message{
			&mad.REJ{LocalCommID: sr, RemoteCommID: sl, MsgRejected: mad.MsgTypeOther, Reason: mad.RejConsumerDefined},
			&mad.DREQ{LocalCommID: sr, RemoteCommID: sl, RemoteQPN: e.server.QP().QPN()},
			&mad.MRA{LocalCommID: sr, RemoteCommID: sl, MsgMRAed: mad.MsgTypeOther, ServiceTimeout: 31},
			&mad.DREP{LocalCommID: sr, RemoteCommID: sl},
		} {
			n.inject(ipC, ipB, forge(1, m))
		}
		for _, m := range []mad.Message{
			&mad.REJ{LocalCommID: cr, RemoteCommID: cl, MsgRejected: mad.MsgTypeOther, Reason: mad.RejConsumerDefined},
			&mad.DREQ{LocalCommID: cr, RemoteCommID: cl, RemoteQPN: e.client.QP().QPN()},
		} {
			n.inject(ipC, ipA, forge(1, m))
		}
		stillUp(t, ctx, e)
		// The DREQ matched nothing, so it is answered with a DREP as any
		// DREQ for a gone connection is (cm_issue_drep), and counted a
		// duplicate; the others are dropped.
		if s := AgentStats(b); s.Dropped != 3 || s.Duplicates != 1 {
			t.Errorf("server stats %+v: the forged messages were not dropped", s)
		}
		// The real peer's DREQ still works.
		if err := e.client.Close(); err != nil {
			t.Fatal(err)
		}
		<-e.server.Done()
	})
}

// Local comm IDs are not guessable: after seeing one of a client's IDs, an
// attacker who spoofs the server's address sends 4096 REJs "for the REQ"
// to IDs near it (the neighbours a counter, or a counter XORed with a
// constant, would give next) while the client's second Dial waits for its
// REP. None hits; the Dial completes.
func TestSequentialGuessREJ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var reqIDs []uint32
		var n *fakeNet
		repSeen := 0
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			mu.Lock()
			defer mu.Unlock()
			switch m := m.(type) {
			case *mad.REQ:
				reqIDs = append(reqIDs, m.LocalCommID)
				if len(reqIDs) == 2 {
					v0 := reqIDs[0]
					go func() {
						k := 0
						send := func(g uint32) {
							k++
							n.inject(ipB, ipA, forge(uint64(k), &mad.REJ{RemoteCommID: g, MsgRejected: mad.MsgTypeREQ,
								Reason: mad.RejConsumerDefined}))
						}
						for j := 1; j <= 32; j++ {
							send(v0 ^ (1<<j - 1))
						}
						for d := uint32(1); k < 4096; d++ {
							send(v0 + d)
							send(v0 - d)
							send(v0 ^ d)
						}
					}()
				}
			case *mad.REP:
				repSeen++
				return repSeen == 2, false // the second Dial waits a REP timeout: the attacker's window
			}
			return false, false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		e.client.Close()
		e.server.Close()
		c, err := Dial(ctx, a, addrB, Options{})
		if err != nil {
			t.Fatalf("the second Dial, under 4096 guessed REJs: %v", err)
		}
		c.Close()
		if s := AgentStats(a); s.Dropped < 4000 {
			t.Errorf("client stats %+v", s)
		}
	})
}

// The stale-connection rule (cm_match_req): a REQ reusing a connected
// peer's (QPN, CA GUID) makes the server DREQ the old connection. From the
// peer's own address that is the rule (TestStaleREQ); from anyone else it
// is an attack: the REQ is refused, the connection stays.
func TestStaleREQFromElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var req mad.REQ
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			if r, ok := m.(*mad.REQ); ok {
				mu.Lock()
				req = *r
				mu.Unlock()
			}
			return false, false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		defer e.client.Close()
		defer e.server.Close()
		mu.Lock()
		m := req
		mu.Unlock()
		m.LocalCommID ^= 0x5A5A5A5A
		n.inject(ipC, ipB, forge(77, &m))
		stillUp(t, ctx, e)
		if k := n.count("DREQ"); k != 0 {
			t.Fatalf("%d DREQs after a stale REQ from %v", k, ipC)
		}
	})
}

// devPairResolving is devPair whose server (b) resolves every address to
// the client's MAC, as a host on a LAN where every spoofed source answers
// ARP (or the MAC is taken from the request): a forged REQ from any
// address then becomes a half-open connection.
func devPairResolving(t *testing.T) (a, b *qp.Device) {
	t.Helper()
	la, lb := nic.NewMemPair(nic.MemConfig{})
	a, err := qp.Open(qp.Config{Name: "goroce-a", Link: la, IP: ipA,
		Neighbors: map[netip.Addr]net.HardwareAddr{ipB: lb.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	b, err = qp.Open(qp.Config{Name: "goroce-b", Link: lb, IP: ipB,
		Resolve: func(context.Context, netip.Addr) (net.HardwareAddr, error) { return la.HardwareAddr(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
	})
	return a, b
}

// floodREQ is an attacker's REQ for addrB from src: its own comm ID, QPN
// and CA GUID (i), and the longest timeouts and most retries the fields
// hold: local CM response timeout 31 (2^23 ms), 15 CM retries, the path's
// ACK timeout 31 (timewait 2^23 ms).
func floodREQ(i int, src netip.Addr) []byte {
	var priv [mad.REQPrivateDataLen]byte
	h := mad.CMAHeader{IPVersion: 4, SrcPort: uint16(1024 + i), Src: src, Dst: ipB}
	h.Marshal(priv[:])
	req := &mad.REQ{
		LocalCommID: uint32(0x10000 + i), ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7174),
		LocalCAGUID: uint64(0xA77AC4 + i), LocalQPN: uint32(0x100 + i),
		ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 31, TransportType: mad.TransportRC,
		StartingPSN: 1, LocalCMResponseTimeout: 31, RetryCount: 7, PKey: defaultPKey, PathMTU: uint8(qp.MTU1024),
		RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: mad.Path{LocalLID: permissiveLID, RemoteLID: permissiveLID, LocalGID: gid16(src),
			RemoteGID: gid16(ipB), HopLimit: 64, LocalAckTimeout: 31},
		PrivateData: priv,
	}
	return forge(uint64(i), req)
}

// The half-open flood: 200 REQs from one source (the client's own
// address), then 1100 from as many spoofed ones, none ever sending its
// RTU. A legitimate Dial from the flooded source still completes at once
// (no REQ resend), the flood's state is bounded by the budgets while it
// lasts, and a simulated 10 hours later nothing of it is left.
func TestHalfOpenFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &fakeNet{}
		t.Cleanup(func() { time.Sleep(time.Minute) })
		n.install(t)
		a, b := devPairResolving(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Hour)
		defer cancel()
		l, err := Listen(ctx, b, addrB, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ag := l.l.a
		check := func(what string) {
			t.Helper()
			synctest.Wait()
			start := time.Now()
			dctx, dcancel := context.WithTimeout(ctx, time.Minute)
			defer dcancel()
			c, err := Dial(dctx, a, addrB, Options{})
			if err != nil {
				t.Fatalf("after %s: Dial: %v", what, err)
			}
			if d := time.Since(start); d >= reqTimeout {
				t.Errorf("after %s: Dial took %v (the REQ was resent)", what, d)
			}
			s, err := l.Accept(dctx)
			if err != nil {
				t.Fatalf("after %s: Accept: %v", what, err)
			}
			sendOne(t, ctx, c, s)
			c.Close()
			s.Close()
			ag.mu.Lock()
			h, hA := len(ag.halfOpen), ag.halfOpenBy[ipA]
			ag.mu.Unlock()
			if h > halfOpenMax || hA > halfOpenPerSource {
				t.Errorf("after %s: %d half-open, %d from %v", what, h, hA, ipA)
			}
		}
		for i := range 200 {
			n.inject(ipA, ipB, floodREQ(i, ipA))
		}
		check("200 REQs from the client's address")
		for i := range 1100 {
			src := netip.AddrFrom4([4]byte{198, 18, 1 + byte(i/250), 1 + byte(i%250)})
			n.inject(src, ipB, floodREQ(1000+i, src))
		}
		check("1100 REQs from spoofed addresses")
		s := AgentStats(b)
		t.Logf("server agent after the floods: %+v", s)
		if s.Evicted == 0 {
			t.Errorf("nothing evicted")
		}
		time.Sleep(10 * time.Hour)
		ag.mu.Lock()
		left, h, pending := len(ag.ids), len(ag.halfOpen), l.l.pending
		ag.mu.Unlock()
		if left != 0 || h != 0 || pending != 0 {
			t.Fatalf("10 h after the flood: %d IDs, %d half-open, %d pending", left, h, pending)
		}
	})
}

// Spoofed sources cost the dispatch nothing: ten MADs from an address
// nobody answers ARP for (REQs for the listener and for a port nobody
// listens on, DREQs for gone connections), each needing an answer, then a
// legitimate Dial: it completes without waiting at all on the fake clock.
// The answers go to the MADs' Ethernet source (madAddr.MAC), which needs
// no resolution; resolving ipC would take each one a second on the single
// dispatch goroutine.
func TestSpoofedSourcesDoNotStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		l, err := Listen(ctx, b, addrB, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for i := range 4 {
			n.inject(ipC, ipB, floodREQ(i, ipC))
		}
		for i := range 3 {
			r := forge(uint64(i), &mad.REQ{LocalCommID: uint32(100 + i), ServiceID: mad.ServiceID(mad.PortSpaceTCP, 9),
				TransportType: mad.TransportRC})
			n.inject(ipC, ipB, r)
		}
		for i := range 3 {
			n.inject(ipC, ipB, forge(uint64(i), &mad.DREQ{LocalCommID: uint32(200 + i), RemoteCommID: uint32(300 + i)}))
		}
		start := time.Now()
		c, err := Dial(ctx, a, addrB, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Dial took %v on the fake clock after ten MADs from %v", d, ipC)
		}
		s, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		s.Close()
		// Each got its answer: REP for the listener's (its path's MAC is
		// the REQ's source too, nothing resolved), REJ, DREP.
		synctest.Wait()
		k := 0
		for _, l := range n.trace() {
			if strings.HasPrefix(l, "198.18.0.2>198.18.0.3 ") {
				k++
			}
		}
		if k < 10 {
			t.Errorf("%d answers to the ten MADs", k)
		}
	})
}

// Floods do not grow goroutines without bound: 2000 SIDR_REQs for a UD
// listener whose Accept is slow (it blocks until released) and 3000 REQs
// from spoofed sources for an RC listener. At most maxSIDRPending SIDR
// handlers and halfOpenMax REQ handlers run at once; the rest is dropped
// or evicted. Counted with runtime.NumGoroutine during the floods.
func TestFloodGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &fakeNet{}
		t.Cleanup(func() { time.Sleep(time.Minute) })
		n.install(t)
		_, b := devPairResolving(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		release := make(chan struct{})
		ul, err := ListenUD(ctx, b, "198.18.0.2:7000", Options{Accept: func(*Request) ([]byte, error) {
			<-release
			return nil, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		l, err := Listen(ctx, b, addrB, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		synctest.Wait()
		base := runtime.NumGoroutine()
		var hdr [mad.SIDRREQPrivateDataLen]byte
		for i := range 2000 {
			src := netip.AddrFrom4([4]byte{198, 18, 2 + byte(i/250), 1 + byte(i%250)})
			h := mad.CMAHeader{IPVersion: 4, SrcPort: 1, Src: src, Dst: ipB}
			h.Marshal(hdr[:])
			n.inject(src, ipB, forge(uint64(i), &mad.SIDRREQ{RequestID: uint32(i + 1), PKey: defaultPKey,
				ServiceID: mad.ServiceID(mad.PortSpaceUDP, 7000), PrivateData: hdr}))
		}
		synctest.Wait()
		sidr := runtime.NumGoroutine() - base
		for i := range 3000 {
			src := netip.AddrFrom4([4]byte{198, 18, 20 + byte(i/250), 1 + byte(i%250)})
			n.inject(src, ipB, floodREQ(i, src))
		}
		synctest.Wait()
		all := runtime.NumGoroutine() - base
		close(release)
		t.Logf("goroutines: %d more under 2000 SIDR_REQs, %d more with 3000 REQs too", sidr, all)
		if sidr > maxSIDRPending+8 {
			t.Errorf("%d goroutines for 2000 SIDR_REQs (bound %d)", sidr, maxSIDRPending)
		}
		if all > maxSIDRPending+halfOpenMax+16 {
			t.Errorf("%d goroutines for the floods (bound %d + %d)", all, maxSIDRPending, halfOpenMax)
		}
	})
}
