// Package pingpong speaks the out-of-band TCP exchange of rdma-core's
// ibv_rc_pingpong (libibverbs/examples/rc_pingpong.c and pingpong.c, checked
// at tag v44.0, the Debian bookworm rdma-core 44), so that `goroce pingpong`
// interoperates with the unmodified tool in both roles. It knows nothing of
// queue pairs: the RDMA side is reached through the onPeer callback of
// ServerExchange, and through the caller after ClientExchange.
//
// # The message
//
// Each side describes its QP in one record, the C string
//
//	sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, wire_gid)
//
// sent as exactly sizeof "0000:000000:000000:" + 32 = 52 bytes including the
// trailing NUL (pp_client_exch_dest / pp_server_exch_dest). wire_gid is the
// 16 GID bytes as 32 lowercase hex digits: gid_to_wire_gid prints 4 × %08x of
// htonl(u32 read from the raw GID), which round-trips the bytes in order. The
// tool sends an all-zero GID unless -g is given, and on RoCE -g is required.
// Decoding follows sscanf("%x:%x:%x:%s") and wire_gid_to_gid.
//
// # The sequence (TCP port 18515)
//
//  1. The client connects and writes its 52-byte record.
//  2. The server read()s 52 bytes in one call (a short read fails the real
//     tool), moves its QP to RTR and RTS (pp_connect_ctx) and only then
//     writes its own record.
//  3. The client reads the server's record and writes "done" plus its NUL
//     (sizeof "done" = 5 bytes). The v44 server insists on reading exactly 5
//     bytes; it does not look at them.
//  4. Both close. The client moves its QP to RTR/RTS after the exchange.
//
// Every message here is written with a single Write, because the real tool
// reads each one with a single read(). Our reads use io.ReadFull.
//
// The package also parses ibv_rc_pingpong's command line (getopt_long string
// "p:d:i:s:m:r:n:l:eg:oOPtcjN" plus one optional host) and formats its
// output lines byte for byte, including glibc's inet_ntop rendering of GIDs
// and the float (not double) microsecond count behind the timing lines, and
// the error lines of its completion handling (ibv_wc_status_str).
package pingpong
