package probe

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/wire"
)

// The checks. Each runs on a fresh connection, so it starts at the PSN the
// probe advertised (s.psn), and the peer's QP is in RTS.
//
// What is required is IBTA's responder behaviour (vol. 1, chapter 9.7: PSN
// checks, duplicates, error classes and NAK codes of table 45), as Linux rxe
// implements it in rxe_resp.c (check_psn, check_op_seq, check_rkey,
// check_length, duplicate_request) and PROTOCOL.md summarises:
//
//   - an access the R_Key does not allow (unknown key, outside the region,
//     straddling its end, missing permission): NAK REMOTE_ACCESS_ERROR; the
//     responder's QP goes to the error state;
//   - a request it cannot accept (a length that disagrees with the packets
//     or exceeds 2^31, a MIDDLE without a FIRST, a misaligned atomic): NAK
//     INVALID_REQUEST, the QP to the error state;
//   - a PSN after the expected one: one NAK PSN_SEQUENCE_ERROR carrying the
//     expected PSN, the packet dropped, nothing executed;
//   - a duplicate (a PSN already executed): not executed again; a WRITE is
//     re-ACKed, a READ answered again, an atomic answered with the saved
//     original value;
//   - a packet with a bad ICRC, one shorter than its headers say, or one for
//     a QP that does not exist: silently dropped, the QP left as it was.
type check struct {
	name     string
	tests    []perftest.Test // the servers whose region the check needs
	required string
	run      func(s *session) (observed string, pass bool, err error)
	// rxe, when set, is how Linux rxe is known to answer this check instead
	// of what IBTA requires: a failing observation that matches it is
	// reported as a deviation ("rxe does X; IBTA requires Y"), not a pass.
	rxe *knownDeviation
}

// knownDeviation is a peer's documented departure from IBTA on one check.
type knownDeviation struct {
	does  string                // what the peer does, with its source
	match func(s *session) bool // the answers (s.last) are that behaviour
}

func (c *check) applies(t perftest.Test) bool {
	for _, x := range c.tests {
		if x == t {
			return true
		}
	}
	return false
}

func (c *check) needs() string {
	var n []string
	for _, t := range c.tests {
		n = append(n, t.String())
	}
	return strings.Join(n, " or ")
}

var (
	writeOnly  = []perftest.Test{perftest.WriteBW}
	readOnly   = []perftest.Test{perftest.ReadBW}
	atomicOnly = []perftest.Test{perftest.AtomicBW}
	anyServer  = []perftest.Test{perftest.WriteBW, perftest.ReadBW, perftest.AtomicBW}
)

// access builds the request the server's region allows (WRITE of 8 bytes,
// READ of 8 bytes, FETCH_ADD of 1), at va with rkey.
func (s *session) access(t perftest.Test, psn wire.PSN, va uint64, rkey uint32) frame {
	switch t {
	case perftest.ReadBW:
		return frame{op: wire.RCRDMAReadRequest, psn: psn, va: va, rkey: rkey, dmaLen: 8}
	case perftest.AtomicBW:
		return frame{op: wire.RCFetchAdd, psn: psn, va: va, rkey: rkey, swapAdd: 1}
	}
	return frame{op: wire.RCRDMAWriteOnly, psn: psn, va: va, rkey: rkey, dmaLen: 8, payload: []byte("goroce!!")}
}

// isAnswer reports whether a is the positive answer to the access at psn.
func isAnswer(t perftest.Test, a answer, psn wire.PSN) bool {
	if a.psn != psn {
		return false
	}
	switch t {
	case perftest.ReadBW:
		return a.op == wire.RCRDMAReadResponseOnly
	case perftest.AtomicBW:
		return a.op == wire.RCAtomicAcknowledge && a.aeth && a.syn.Kind() == wire.SynACK
	}
	return a.op == wire.RCAcknowledge && a.aeth && a.syn.Kind() == wire.SynACK
}

func isNAK(a answer, code wire.NAKCode, psn wire.PSN) bool {
	return a.op == wire.RCAcknowledge && a.aeth && a.syn.Kind() == wire.SynNAK && a.syn.NAK() == code && a.psn == psn
}

// one sends f and reports whether the single answer satisfies ok.
func (s *session) one(f frame, ok func(answer) bool) (string, bool, error) {
	if err := s.send(f); err != nil {
		return "", false, err
	}
	as := s.answers(1)
	s.last = as
	return describe(as), len(as) >= 1 && ok(as[0]), nil
}

// silentThenValid sends a bad frame, expects silence, then the valid
// access at the same PSN, which must be answered: the bad frame changed
// nothing.
func (s *session) silentThenValid(t perftest.Test, bad frame) (string, bool, error) {
	if err := s.send(bad); err != nil {
		return "", false, err
	}
	first := s.silence()
	valid := s.access(t, s.psn, s.peer.VAddr, s.peer.RKey)
	if err := s.send(valid); err != nil {
		return "", false, err
	}
	second := s.answers(1)
	obs := describe(first) + ", then for the valid request: " + describe(second)
	return obs, len(first) == 0 && len(second) >= 1 && isAnswer(t, second[0], s.psn), nil
}

func (s *session) test() perftest.Test { return s.cfgTest }

var checks = []*check{
	{
		name: "access", tests: anyServer,
		required: "executed and answered (ACK, READ RESPONSE ONLY, ATOMIC ACKNOWLEDGE) at its PSN",
		run: func(s *session) (string, bool, error) {
			t := s.test()
			return s.one(s.access(t, s.psn, s.peer.VAddr, s.peer.RKey), func(a answer) bool { return isAnswer(t, a, s.psn) })
		},
	},
	{
		name: "wrong-rkey", tests: anyServer,
		required: "NAK REMOTE_ACCESS_ERROR at its PSN, nothing executed; the QP goes to the error state",
		run: func(s *session) (string, bool, error) {
			return s.one(s.access(s.test(), s.psn, s.peer.VAddr, s.peer.RKey^0x5A5A00),
				func(a answer) bool { return isNAK(a, wire.NAKRemoteAccessError, s.psn) })
		},
	},
	{
		name: "outside-region", tests: anyServer,
		required: "NAK REMOTE_ACCESS_ERROR (the access starts just past the end of the region)",
		run: func(s *session) (string, bool, error) {
			return s.one(s.access(s.test(), s.psn, s.peer.VAddr+s.regionN, s.peer.RKey),
				func(a answer) bool { return isNAK(a, wire.NAKRemoteAccessError, s.psn) })
		},
	},
	{
		name: "straddle-end", tests: []perftest.Test{perftest.WriteBW, perftest.ReadBW},
		required: "NAK REMOTE_ACCESS_ERROR (8 bytes from 4 bytes before the end of the region), nothing written",
		run: func(s *session) (string, bool, error) {
			return s.one(s.access(s.test(), s.psn, s.peer.VAddr+s.regionN-4, s.peer.RKey),
				func(a answer) bool { return isNAK(a, wire.NAKRemoteAccessError, s.psn) })
		},
	},
	{
		name: "length-mismatch", tests: writeOnly,
		required: "NAK INVALID_REQUEST (RDMA WRITE ONLY whose RETH says 16 bytes, carrying 8)",
		run: func(s *session) (string, bool, error) {
			f := s.access(perftest.WriteBW, s.psn, s.peer.VAddr, s.peer.RKey)
			f.dmaLen = 16
			return s.one(f, func(a answer) bool { return isNAK(a, wire.NAKInvalidRequest, s.psn) })
		},
	},
	{
		name: "middle-without-first", tests: writeOnly,
		required: "NAK INVALID_REQUEST (an RDMA WRITE MIDDLE at the expected PSN with no FIRST before it)",
		run: func(s *session) (string, bool, error) {
			f := frame{op: wire.RCRDMAWriteMiddle, psn: s.psn, payload: make([]byte, s.mtu)}
			return s.one(f, func(a answer) bool { return isNAK(a, wire.NAKInvalidRequest, s.psn) })
		},
	},
	{
		name: "misaligned-atomic", tests: atomicOnly,
		required: "NAK INVALID_REQUEST (FETCH_ADD at an address that is not 8-byte aligned), nothing changed",
		run: func(s *session) (string, bool, error) {
			return s.one(s.access(perftest.AtomicBW, s.psn, s.peer.VAddr+4, s.peer.RKey),
				func(a answer) bool { return isNAK(a, wire.NAKInvalidRequest, s.psn) })
		},
	},
	{
		name: "oversized-read", tests: readOnly,
		required: "NAK INVALID_REQUEST (a READ whose DMA length, 2^31+8, exceeds the largest message, 2^31 bytes)",
		run: func(s *session) (string, bool, error) {
			f := s.access(perftest.ReadBW, s.psn, s.peer.VAddr, s.peer.RKey)
			f.dmaLen = 1<<31 + 8
			return s.one(f, func(a answer) bool { return isNAK(a, wire.NAKInvalidRequest, s.psn) })
		},
		// Linux 6.1's rxe_resp.c check_length checks only the packet's
		// payload against the path MTU, not the RETH length against 2^31
		// (mainline added `if (dmalen > (1 << 31)) return
		// RESPST_ERR_LENGTH;` later); check_rkey's mr_check_range then fails
		// for 2^31+8 bytes from the region's start, RESPST_ERR_RKEY_VIOLATION,
		// which is NAK REMOTE_ACCESS_ERROR.
		rxe: &knownDeviation{
			does: "NAK REMOTE_ACCESS_ERROR (Linux 6.1 rxe_resp.c: check_length has no 2^31 limit, check_rkey's mr_check_range fails)",
			match: func(s *session) bool {
				return len(s.last) == 1 && isNAK(s.last[0], wire.NAKRemoteAccessError, s.psn)
			},
		},
	},
	{
		name: "psn-gap", tests: anyServer,
		required: "NAK PSN_SEQUENCE_ERROR carrying the expected PSN, the request dropped; the request at the expected PSN is then accepted",
		run: func(s *session) (string, bool, error) {
			return s.gap(1)
		},
	},
	{
		name: "far-future-psn", tests: anyServer,
		required: "NAK PSN_SEQUENCE_ERROR carrying the expected PSN (a PSN 2^22 ahead is out of sequence, not a duplicate)",
		run: func(s *session) (string, bool, error) {
			return s.gap(1 << 22)
		},
	},
	{
		name: "duplicate", tests: anyServer,
		required: "not executed again: a WRITE re-ACKed, a READ answered again with the same data, an atomic answered with the saved original value (and a FETCH_ADD of 0 then shows one addition)",
		run: func(s *session) (string, bool, error) {
			return s.duplicate()
		},
	},
	{
		name: "bad-icrc", tests: anyServer,
		required: "silently dropped; the valid request at the same PSN is then accepted",
		run: func(s *session) (string, bool, error) {
			f := s.access(s.test(), s.psn, s.peer.VAddr, s.peer.RKey)
			f.badICRC = true
			return s.silentThenValid(s.test(), f)
		},
	},
	{
		name: "truncated", tests: anyServer,
		required: "silently dropped (the frame ends 16 bytes into a WRITE's 64-byte payload, or 8 bytes into a READ's RETH or an atomic's AtomicETH); the valid request at the same PSN is then accepted",
		run: func(s *session) (string, bool, error) {
			t := s.test()
			hdrs := wire.EthernetLen + wire.IPv4Len + wire.UDPLen + wire.BTHLen
			f := s.access(t, s.psn, s.peer.VAddr, s.peer.RKey)
			f.cut = hdrs + 8
			if t == perftest.WriteBW {
				f = frame{op: wire.RCRDMAWriteOnly, psn: s.psn, va: s.peer.VAddr, rkey: s.peer.RKey, dmaLen: 64, payload: make([]byte, 64)}
				f.cut = hdrs + wire.RETHLen + 16
			}
			return s.silentThenValid(t, f)
		},
	},
	{
		name: "wrong-dest-qp", tests: anyServer,
		required: "silently dropped (a QPN that does not exist); the valid request to the real QP is then accepted",
		run: func(s *session) (string, bool, error) {
			f := s.access(s.test(), s.psn, s.peer.VAddr, s.peer.RKey)
			f.dqpn = s.peer.QPN ^ 0x800000
			return s.silentThenValid(s.test(), f)
		},
	},
}

// gap sends the access d PSNs ahead, expects the sequence NAK, then the
// access at the expected PSN, which must be executed.
func (s *session) gap(d uint32) (string, bool, error) {
	t := s.test()
	if err := s.send(s.access(t, s.psn.Add(d), s.peer.VAddr, s.peer.RKey)); err != nil {
		return "", false, err
	}
	first := s.answers(1)
	if err := s.send(s.access(t, s.psn, s.peer.VAddr, s.peer.RKey)); err != nil {
		return "", false, err
	}
	second := s.answers(1)
	obs := describe(first) + ", then for the request at the expected PSN: " + describe(second)
	return obs, len(first) == 1 && isNAK(first[0], wire.NAKPSNSequenceError, s.psn) && len(second) >= 1 && isAnswer(t, second[0], s.psn), nil
}

// duplicate executes an access, repeats it at the same PSN, and compares.
func (s *session) duplicate() (string, bool, error) {
	t := s.test()
	f := s.access(t, s.psn, s.peer.VAddr, s.peer.RKey)
	if err := s.send(f); err != nil {
		return "", false, err
	}
	first := s.answers(1)
	if t == perftest.WriteBW {
		f.payload = []byte("DUPLICAT")
	}
	if err := s.send(f); err != nil {
		return "", false, err
	}
	second := s.answers(1)
	obs := describe(first) + ", then for the duplicate: " + describe(second)
	if len(first) == 0 || len(second) == 0 || !isAnswer(t, first[0], s.psn) || !isAnswer(t, second[0], s.psn) {
		return obs, false, nil
	}
	switch t {
	case perftest.ReadBW:
		same := bytes.Equal(first[0].data, second[0].data)
		if !same {
			obs += " (different data)"
		}
		return obs, same, nil
	case perftest.AtomicBW:
		if first[0].orig != second[0].orig {
			return obs + " (a different original value: executed twice)", false, nil
		}
		// A FETCH_ADD of 0 at the next PSN reads the word: one addition.
		g := s.access(t, s.psn.Add(1), s.peer.VAddr, s.peer.RKey)
		g.swapAdd = 0
		if err := s.send(g); err != nil {
			return "", false, err
		}
		third := s.answers(1)
		obs += ", then FETCH_ADD 0: " + describe(third)
		once := len(third) >= 1 && isAnswer(t, third[0], s.psn.Add(1)) && third[0].orig == first[0].orig+1
		if !once {
			obs += fmt.Sprintf(" (want orig %#x: added once)", first[0].orig+1)
		}
		return obs, once, nil
	}
	return obs, true, nil
}
