package pingpong

import (
	"context"
	"fmt"
	"net"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
)

// Serve is pp_server_exch_dest with its socket: listen on port (every
// address family), tell listening the address, accept one client, read its
// len(peer) records into peer, call connect (which moves the QPs to RTS),
// answer with local and read "done". The errors are the tools' messages.
func Serve(ctx context.Context, port int, listening func(net.Addr), local, peer []Dest, connect func([]Dest) error) error {
	ln, err := Listen(port)
	if err != nil {
		return fmt.Errorf("Couldn't listen to port %d: %w", port, err)
	}
	if listening != nil {
		listening(ln.Addr())
	}
	conn, err := tool.AcceptOne(ctx, ln)
	if err != nil {
		return fmt.Errorf("accept() failed: %w", err)
	}
	defer conn.Close()
	defer tool.WithExchangeDeadline(ctx, conn)()
	var connErr error
	err = ServerExchangeN(conn, local, peer, func(d []Dest) error {
		connErr = connect(d)
		return connErr
	})
	switch {
	case connErr != nil:
		return fmt.Errorf("%w\nCouldn't connect to remote QP", connErr)
	case err != nil:
		return fmt.Errorf("Couldn't read remote address: %w", ctxErr(ctx, err))
	}
	return nil
}

// Dial is pp_client_exch_dest with its socket: connect to host:port, send
// local, read len(peer) records into peer, send "done".
func Dial(ctx context.Context, host string, port int, local, peer []Dest) error {
	conn, err := tool.DialPeer(ctx, "tcp", host, port)
	if err != nil {
		return fmt.Errorf("Couldn't connect to %s:%d: %w", host, port, ctxErr(ctx, err))
	}
	defer conn.Close()
	defer tool.WithExchangeDeadline(ctx, conn)()
	if err := ClientExchangeN(conn, local, peer); err != nil {
		return fmt.Errorf("Couldn't read/write remote address: %w", ctxErr(ctx, err))
	}
	return nil
}

// ctxErr names the context's cause when it ended an I/O error.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", context.Cause(ctx), err)
	}
	return err
}
