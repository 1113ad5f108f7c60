// Package perftest speaks the out-of-band exchange of linux-rdma's
// perftest (ib_{write,read,send,atomic}_{bw,lat}), over TCP in its Ethernet
// mode and over an rdma_cm control QP with -R (see "rdma_cm" below), so
// that goroce's tools interoperate with the unmodified
// binaries in both roles: perftest 4.5-0.17 as shipped in Debian bookworm
// (its configure.ac says VERSION "6.06") and the current upstream HEAD
// (6.29 and later). It knows nothing of queue pairs; the RDMA side is reached
// through Hooks (Setup, Connect, Traffic) at the points where the real tools
// create resources, call ctx_connect and run the test.
//
// # Direction rule
//
// Every exchange is ctx_hand_shake (a key message each way) or
// ctx_xchg_data_ethernet (a fixed-size blob each way), and in both the
// client writes first and then reads, the server reads first and then writes
// (src/perftest_communication.c). The real tools read each message with one
// read() that must return the full size, so every message here leaves in one
// Write. Our reads use io.ReadFull.
//
// # Hello (exchange_versions, check_sys_data, check_mtu)
//
//  1. Versions: a 16-byte NUL-padded string each way ("6.06"). We always
//     advertise Version = "6.06", whatever the peer says.
//  2. If atof(peer version) >= 5.32: the cycle buffer (page size) and then the
//     cache line size, each a 4-byte big-endian int; each side keeps the max.
//  3. If the peer's version, as a C float, is >= 5.1: the active MTU enum as
//     decimal ASCII, in 2 bytes ("3\0") for peers >= 5.31 and in 4 bytes
//     (sizeof int) for older ones. Both sides use the smaller valid value.
//
// HEAD adds check_version_compatibility (it exits if the peer is older than
// 5.70) and negotiate_params (src/perftest_negotiation.c), which returns
// without a byte on the wire when atof(user_param->rem_version) < 6.28: the
// test is on the PEER's version, not the minimum. Because we advertise 6.06,
// a HEAD peer skips it; and we, emulating 6.06, never negotiate, whatever the
// peer advertises. Both ends therefore agree with either release. The
// 6.06 rules that depend on the peer's version (sys data, MTU width, the
// width of the iteration count in the reports) are applied to what the peer
// advertises, so a HEAD peer gets exactly what a 6.06 peer would.
//
// # Key message (ctx_hand_shake with a GID, always the case on Ethernet)
//
//	"%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 × "%02x:" + "%08x:" + NUL
//
// lid, out_reads, qpn, psn, rkey, vaddr, the 16 GID bytes and srqn: 107
// characters and the NUL, KeyMsgSize = 108 bytes.
//
// # Per-test sequences (Steps)
//
// After Hello and Setup each tool repeats the same key handshake a fixed
// number of times around ctx_connect, runs the test, and closes; Steps
// returns that list for a test and role, and Run interprets it. The counts
// were checked against the captures in testdata/rxe (write_bw, read_bw,
// send_bw, atomic_bw, write_lat) and, for the others, against the main()
// of the Debian 4.5-0.17 binaries (calls of ctx_hand_shake and
// ctx_close_connection) and the upstream sources of read_bw.c, send_bw.c,
// send_lat.c, read_lat.c and atomic_lat.c:
//
//	write/read/atomic_bw  Keys, Connect, Keys, Sync, [client: Traffic], Sync, Reports, Close
//	send_bw, send_lat     Keys, Connect, Sync, Keys, Prepare, Sync, Traffic (both sides), Close
//	read/atomic_lat       Sync, Keys, Connect, Keys, Sync, [client: Traffic], Close
//	write_lat             Sync, Keys, Connect, Keys, Sync, Traffic (both sides), (no close in 6.06)
//
// With -b (PlanConfig.Duplex) both sides of a BW test run the traffic:
// write/read/atomic_bw do Sync, Traffic, [Sync with -a], Reports per size
// after the after-RTR handshake (--run_infinitely: Traffic only), send_bw
// adds Reports after each size's Traffic unless the run is timed. Neither
// release exchanges the flag itself (6.06 has no negotiation; HEAD's is
// skipped with a 6.06 peer): both ends must be given -b, as with -q.
//
// Reports (xchg_bw_reports) is five blobs, big-endian: size (u64), iters (u64
// for peers >= 5.33 as a C float, else u32), bw_peak, bw_avg and msgRate_avg
// as IEEE doubles (hton_double byte-swaps the u64), plus four more doubles
// with --report-per-port. The non-duplex server sends whatever is in its
// uninitialised report and prints the client's.
//
// Close (ctx_close_connection) is one more key handshake; 6.06 then writes
// "done\0", which nobody reads, and closes; HEAD only closes. We write it
// (a peer that already closed just resets the connection), then read the
// peer's own "done" or EOF for at most half a second so that our close is a
// clean FIN. write_lat has no close in 6.06 nor in the upstream sources
// read; in case a newer peer adds one, our write_lat ends with a lenient
// close that answers a key handshake if one comes and is content with EOF.
//
// Where the steps stand relative to the RDMA work matters in one place: a
// send test's receiver must post its receives (Prepare) before the handshake
// after which the peer sends, as ctx_set_recv_wqes precedes it in
// send_bw.c and send_lat.c.
//
// Hooks.After runs after every step, with what the run learned so far: the
// tools print their address lines after the second key exchange and a BW
// server its table line after Reports, and a caller checks there that the
// second exchange repeated the first (a different -q on the two sides puts
// them out of step, which the C tools only notice by hanging).
//
// # rdma_cm (-R)
//
// With -R (PlanConfig.RDMACM, Session.CM) perftest connects twice through
// rdma_cm on its port (18515): first a control QP (one SEND and one RECV
// of sizeof(struct pingpong_dest) = 56 bytes outstanding,
// rdma_client_connect / rdma_server_connect), over which every exchange
// above travels as one SEND per message (ctx_xchg_data_rdma, the same
// direction rule), then, inside create_rdma_cm_connection, the data QPs,
// between two handshakes that still carry an all-zero my_dest. rdma_cm
// moves the QPs itself, so there is no Connect step; the key messages are
// the binary struct pingpong_dest with big-endian fields (EncodeCMKeyMsg,
// rdma_write_keys with HAVE_ENDIAN) instead of the text one; and Close is
// the handshake alone (no "done"), the connections then torn down with
// DREQ/DREP. The -R sequences are the ones above with
//
//	Hello, Sync, CMConnect, Sync, Setup, ... (no Connect)
//
// (checked against testdata/rxe/send_bw_rdma_cm.pcap).
//
// # Timeouts
//
// Config.ExchangeTimeout bounds each exchange, so that a dead or wedged
// peer fails the run, except the exchanges that legitimately wait for the
// end of a traffic phase of either side (WaitsForTraffic: a write_bw
// server's Sync during the client's run, the close after a send test):
// those are as long as the test. Cancelling the context unblocks any of
// them.
//
// The package also parses perftest's command line and prints its tables
// byte for byte as 4.5-0.17 does (see the logs in testdata/rxe).
package perftest
