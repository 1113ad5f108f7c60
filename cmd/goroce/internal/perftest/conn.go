package perftest

import (
	"net"
	"strconv"
)

// Listen opens the server's socket as ethernet_server_connect does: IPv4
// (the default ai_family AF_INET), AI_PASSIVE on port, SO_REUSEADDR (Go's
// default on Linux listeners). The real server accepts one connection and
// closes the listener; see AcceptOne.
func Listen(port int) (net.Listener, error) {
	return net.Listen("tcp4", net.JoinHostPort("", strconv.Itoa(port)))
}

// AcceptOne accepts a single connection and closes ln, like the real server.
func AcceptOne(ln net.Listener) (net.Conn, error) {
	defer ln.Close()
	return ln.Accept()
}

// Dial connects to the server as ethernet_client_connect does (IPv4).
func Dial(host string, port int) (net.Conn, error) {
	return net.Dial("tcp4", net.JoinHostPort(host, strconv.Itoa(port)))
}
