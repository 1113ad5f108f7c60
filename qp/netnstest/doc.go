// Package netnstest runs goroce's RC stack (qp over transport) over the real
// frame backends (nic/afxdp, nic/afpacket, nic/udp, opened with qp.OpenInterface)
// between two network namespaces joined by veth (internal/netns). It has
// only tests: every operation class with data checks, multi-packet messages
// at MTU 1500 and 9000, several QPs at once, mixed backends, and loss.
//
// Each endpoint opens its device inside its namespace (Pair.Do); the
// device's goroutines and the namespace-bound resolver then work from any
// thread. The tests need root; they skip with the reason otherwise and fail
// when skipped under CI=true.
package netnstest
