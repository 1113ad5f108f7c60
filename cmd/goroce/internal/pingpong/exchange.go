package pingpong

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// ErrPeer is wrapped by the error ServerExchange returns when onPeer fails,
// so that a caller can tell a local QP failure from a broken exchange.
var ErrPeer = errors.New("pingpong: connecting to the peer's QP failed")

// writeAll writes b with one Write call: the real tool reads each message
// with a single read(), so it must leave in one piece. net.Conn.Write on a
// TCP socket loops over partial writes itself.
func writeAll(w io.Writer, b []byte, what string) error {
	n, err := w.Write(b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("pingpong: writing %s: %w", what, err)
	}
	return nil
}

func readRecord(r io.Reader) (Dest, error) {
	var m [MsgSize]byte
	if _, err := io.ReadFull(r, m[:]); err != nil {
		return Dest{}, fmt.Errorf("pingpong: reading the peer's address: %w", err)
	}
	return Decode(m[:])
}

// ServerExchange is pp_server_exch_dest on an accepted connection: read the
// client's record, call onPeer (which must move the local QP to RTR and RTS,
// as pp_connect_ctx does, before the client may send), write the local
// record, then read the client's 5-byte "done". It returns the client's
// record. It does not close conn. An onPeer error is returned wrapped in
// ErrPeer and nothing is written, so the client sees the connection close as
// the real server would have closed it.
func ServerExchange(conn net.Conn, local Dest, onPeer func(Dest) error) (Dest, error) {
	var peer [1]Dest
	err := ServerExchangeN(conn, []Dest{local}, peer[:], func(p []Dest) error {
		if onPeer == nil {
			return nil
		}
		return onPeer(p[0])
	})
	return peer[0], err
}

// ServerExchangeN is ServerExchange with len(local) records each way, as
// srq_pingpong exchanges one per QP (always MAX_QP of them, the unused ones
// zero): it reads len(peer) records into peer, calls onPeer, writes local,
// then reads "done".
func ServerExchangeN(conn net.Conn, local, peer []Dest, onPeer func([]Dest) error) error {
	for i := range peer {
		var err error
		if peer[i], err = readRecord(conn); err != nil {
			return err
		}
	}
	if onPeer != nil {
		if err := onPeer(peer); err != nil {
			return fmt.Errorf("%w: %w", ErrPeer, err)
		}
	}
	if err := writeRecords(conn, local); err != nil {
		return err
	}
	// v44 checks read(connfd, msg, sizeof msg) == sizeof "done" and ignores
	// the content; so do we.
	var done [len(Done)]byte
	if _, err := io.ReadFull(conn, done[:]); err != nil {
		return fmt.Errorf("pingpong: reading the client's \"done\": %w", err)
	}
	return nil
}

// writeRecords writes each record with its own write, as the tools do.
func writeRecords(conn net.Conn, local []Dest) error {
	for _, d := range local {
		m := Encode(d)
		if err := writeAll(conn, m[:], "the local address"); err != nil {
			return err
		}
	}
	return nil
}

// ClientExchange is pp_client_exch_dest on a connected socket: write the
// local record, read the server's, write "done\0". It does not close conn.
// The caller moves its QP to RTR and RTS afterwards.
func ClientExchange(conn net.Conn, local Dest) (Dest, error) {
	var peer [1]Dest
	err := ClientExchangeN(conn, []Dest{local}, peer[:])
	return peer[0], err
}

// ClientExchangeN is ClientExchange with len(local) records out and
// len(peer) records in (srq_pingpong's pp_client_exch_dest).
func ClientExchangeN(conn net.Conn, local, peer []Dest) error {
	if err := writeRecords(conn, local); err != nil {
		return err
	}
	for i := range peer {
		var err error
		if peer[i], err = readRecord(conn); err != nil {
			return err
		}
	}
	return writeAll(conn, Done[:], "\"done\"")
}

// Listen opens the server's socket as pp_server_exch_dest does: every
// address family (AF_UNSPEC, AI_PASSIVE) on port, SO_REUSEADDR (Go's
// default on Linux listeners). The real server accepts exactly one
// connection and closes the listener; see AcceptOne.
func Listen(port int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
}

// AcceptOne accepts a single connection and closes ln, like the real server.
func AcceptOne(ln net.Listener) (net.Conn, error) {
	defer ln.Close()
	return ln.Accept()
}
