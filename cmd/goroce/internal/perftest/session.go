package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Session is one perftest control connection, from either end. Its methods
// are the exchanges of src/perftest_communication.c; each follows the
// direction rule (client writes then reads, server reads then writes) and
// writes every message with one Write. A Session is not safe for concurrent
// use; deadlines and cancellation are the caller's, on the net.Conn (Run
// wires a context to them).
type Session struct {
	conn   net.Conn
	server bool

	// LocalVersion is what Hello advertises; NewSession sets Version.
	LocalVersion string
	// PeerVersion is what the peer advertised ("" until Hello, or with
	// DontExchangeVersions, in which case every version rule sees atof("") = 0
	// exactly as the C code does).
	PeerVersion string
	// DontExchangeVersions is --dont_xchg_versions: Hello sends nothing at all.
	DontExchangeVersions bool

	// Trace, when set, sees every message: out is true for what we send.
	Trace func(out bool, what string, b []byte)

	// CM is -R: the control connection is an rdma_cm RC QP whose every
	// Write is one SEND and every Read one RECV. The key messages are
	// binary struct pingpong_dest (EncodeCMKeyMsg) and the close is the
	// last handshake alone (no "done").
	CM bool
	// GIDIndex is what a CM key message carries in its gid_index field.
	GIDIndex int32
}

// NewSession wraps an established control connection. server is the role:
// the side that accepted the connection.
func NewSession(conn net.Conn, server bool) *Session {
	return &Session{conn: conn, server: server, LocalVersion: Version}
}

// Server reports the role.
func (s *Session) Server() bool { return s.server }

func (s *Session) write(what string, b []byte) error {
	if s.Trace != nil {
		s.Trace(true, what, b)
	}
	n, err := s.conn.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("perftest: writing %s: %w", what, err)
	}
	return nil
}

func (s *Session) read(what string, b []byte) error {
	if _, err := io.ReadFull(s.conn, b); err != nil {
		return fmt.Errorf("perftest: reading %s: %w", what, err)
	}
	if s.Trace != nil {
		s.Trace(false, what, b)
	}
	return nil
}

// xchg is ctx_xchg_data_ethernet: len(mine) bytes out, len(theirs) in, in
// the role's order.
func (s *Session) xchg(what string, mine, theirs []byte) error {
	if s.server {
		if err := s.read(what, theirs); err != nil {
			return err
		}
		return s.write(what, mine)
	}
	if err := s.write(what, mine); err != nil {
		return err
	}
	return s.read(what, theirs)
}

// ExchangeVersions is exchange_versions: 16 bytes each way.
func (s *Session) ExchangeVersions() error {
	mine := EncodeVersion(s.LocalVersion)
	var theirs [VersionSize]byte
	if err := s.xchg("version", mine[:], theirs[:]); err != nil {
		return err
	}
	s.PeerVersion = DecodeVersion(theirs[:])
	return nil
}

// ExchangeSysData is check_sys_data: when the peer is >= 5.32, the cycle
// buffer and the cache line size as 4-byte big-endian ints; it returns the
// larger of each pair (the local values when nothing is exchanged).
func (s *Session) ExchangeSysData(cycleBuffer, cacheLine int32) (int32, int32, error) {
	if !atLeast(s.PeerVersion, 5.32) || s.DontExchangeVersions {
		return cycleBuffer, cacheLine, nil
	}
	var mine, theirs [4]byte
	binary.BigEndian.PutUint32(mine[:], uint32(cycleBuffer))
	if err := s.xchg("cycle buffer", mine[:], theirs[:]); err != nil {
		return 0, 0, err
	}
	remCycle := int32(binary.BigEndian.Uint32(theirs[:]))
	binary.BigEndian.PutUint32(mine[:], uint32(cacheLine))
	if err := s.xchg("cache line size", mine[:], theirs[:]); err != nil {
		return 0, 0, err
	}
	remLine := int32(binary.BigEndian.Uint32(theirs[:]))
	return max(cycleBuffer, remCycle), max(cacheLine, remLine), nil
}

// ExchangeMTU is check_mtu for RC: when the peer is >= 5.1 (as a C float),
// the local active MTU enum in decimal, 2 bytes for peers >= 5.31 and 4
// otherwise; the result is the smaller one when the peer's is valid.
func (s *Session) ExchangeMTU(local MTU) (MTU, error) {
	if s.DontExchangeVersions || !atLeastFloat(s.PeerVersion, 5.1) {
		return local, nil
	}
	size := 4
	if atLeastFloat(s.PeerVersion, 5.31) {
		size = 2
	}
	theirs := make([]byte, size)
	if err := s.xchg("MTU", encodeMTU(local, size), theirs); err != nil {
		return 0, err
	}
	rem := decodeMTU(theirs)
	if rem.Valid() && local > rem {
		return rem, nil
	}
	return local, nil
}

// Negotiated is what Hello settled.
type Negotiated struct {
	PeerVersion string
	CycleBuffer int32 // max of both page sizes: BUFF_SIZE = max(size, CycleBuffer)
	CacheLine   int32
	MTU         MTU // the path MTU both sides use
}

// PeerNegotiates reports whether the peer is a release that would run
// negotiate_params with a peer of its own version (>= 6.28). It does not run
// it with us, because we advertise 6.06; this is for diagnostics only.
func (n Negotiated) PeerNegotiates() bool { return atLeast(n.PeerVersion, 6.28) }

// Hello runs exchange_versions, check_sys_data and check_mtu in that order.
func (s *Session) Hello(cycleBuffer, cacheLine int32, mtu MTU) (Negotiated, error) {
	if !s.DontExchangeVersions {
		if err := s.ExchangeVersions(); err != nil {
			return Negotiated{}, err
		}
	}
	cb, cl, err := s.ExchangeSysData(cycleBuffer, cacheLine)
	if err != nil {
		return Negotiated{}, err
	}
	m, err := s.ExchangeMTU(mtu)
	if err != nil {
		return Negotiated{}, err
	}
	return Negotiated{PeerVersion: s.PeerVersion, CycleBuffer: cb, CacheLine: cl, MTU: m}, nil
}

// HandShake is ctx_hand_shake: one key message each way.
func (s *Session) HandShake(local KeyMsg) (KeyMsg, error) {
	if s.CM {
		mine := EncodeCMKeyMsg(local, s.GIDIndex)
		var theirs [CMKeyMsgSize]byte
		if err := s.xchg("key message", mine[:], theirs[:]); err != nil {
			return KeyMsg{}, err
		}
		return DecodeCMKeyMsg(theirs[:])
	}
	mine := EncodeKeyMsg(local)
	var theirs [KeyMsgSize]byte
	if err := s.xchg("key message", mine[:], theirs[:]); err != nil {
		return KeyMsg{}, err
	}
	return DecodeKeyMsg(theirs[:])
}

// ExchangeKeys is the per-QP loop of ctx_hand_shake calls: local[i] for
// peer[i]. Both sides must have the same number of QPs (-q).
func (s *Session) ExchangeKeys(local []KeyMsg) ([]KeyMsg, error) {
	peer := make([]KeyMsg, len(local))
	for i, k := range local {
		p, err := s.HandShake(k)
		if err != nil {
			return nil, fmt.Errorf("QP %d: %w", i, err)
		}
		peer[i] = p
	}
	return peer, nil
}

// ExchangeReports is xchg_bw_reports: our report out, the peer's in. The
// iteration count is 8 bytes when the peer is >= 5.33 (as a C float), else 4.
func (s *Session) ExchangeReports(local BWReport, perPort bool) (BWReport, error) {
	wide := atLeastFloat(s.PeerVersion, 5.33)
	var rem BWReport
	for i, b := range local.blobs(wide, perPort) {
		theirs := make([]byte, len(b))
		if err := s.xchg("report", b, theirs); err != nil {
			return BWReport{}, err
		}
		rem.setBlob(i, theirs)
	}
	return rem, nil
}

// closeDrain bounds how long Close waits for the peer's "done" or EOF.
const closeDrain = 500 * time.Millisecond

// Close is 6.06's ctx_close_connection: a last key handshake, then
// "done\0" (never read by the peer; an error writing it is ignored since the
// peer may already be gone), then the socket is closed. Before closing it
// reads what the peer still sends (a 6.06 peer's own "done", nothing from
// HEAD) until EOF or for at most half a second, so that our close is a FIN
// and not a reset that could race the peer's last read.
func (s *Session) Close(local KeyMsg) error {
	_, err := s.HandShake(local)
	if err == nil && !s.CM {
		_ = s.write("done", Done[:])
		if s.conn.SetReadDeadline(time.Now().Add(closeDrain)) == nil {
			var b [len(Done)]byte
			_, _ = io.ReadFull(s.conn, b[:])
		}
	}
	if cerr := s.conn.Close(); err == nil && cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = cerr
	}
	return err
}

// LingerClose ends a test whose 6.06 tool has no close handshake
// (write_lat) while staying correct with a peer that has one: the client
// offers its key message and waits for the reply or for EOF; the server
// waits for a key message (answering it) or for EOF. Either way the socket
// is then closed. A reset or EOF from the peer is not an error.
func (s *Session) LingerClose(local KeyMsg) error {
	defer s.conn.Close()
	if s.CM {
		mine := EncodeCMKeyMsg(local, s.GIDIndex)
		var theirs [CMKeyMsgSize]byte
		return s.lingerClose(mine[:], theirs[:])
	}
	mine := EncodeKeyMsg(local)
	var theirs [KeyMsgSize]byte
	return s.lingerClose(mine[:], theirs[:])
}

func (s *Session) lingerClose(mine, theirs []byte) error {
	gone := func(err error) bool {
		return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isReset(err)
	}
	if !s.server {
		if err := s.write("closing key message", mine); err != nil {
			if gone(err) {
				return nil
			}
			return err
		}
		if err := s.read("closing key message", theirs); err != nil && !gone(err) {
			return err
		}
		return nil
	}
	if err := s.read("closing key message", theirs); err != nil {
		if gone(err) {
			return nil
		}
		return err
	}
	if err := s.write("closing key message", mine); err != nil && !gone(err) {
		return err
	}
	return nil
}
