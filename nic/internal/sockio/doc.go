// Package sockio holds the Linux socket plumbing the nic backends share:
// an eventfd Stopper that wakes blocked polls (gVisor's link/stopfd model),
// and preallocated sendmmsg/recvmmsg batches so that a batch of frames costs
// one system call and no allocation.
//
// It is Linux only (nic/udp's recvmmsg/sendmmsg path, nic/afpacket); on
// other systems the package is empty.
package sockio
