// Package interop runs the real Linux Soft-RoCE (rxe) as a peer for goroce's
// wire-compatibility tests, on machines whose own kernel has no RDMA: Debian's
// kernel with rdma_rxe boots in a qemu VM (TCG, no KVM needed) from a small
// initramfs that build-vm.sh makes from Debian packages, with the unmodified
// rdma-core tools (ibv_rc_pingpong, ibv_devinfo, rping, ...) and perftest.
//
// The model:
//
//	netns goroce-ix-<pid>  (the "bridge namespace"; qemu and tcpdump run here)
//	  br0 ── tap0 ── qemu VM 0: eth0 198.18.0.11/24, rxe0 on eth0
//	   │  ── tap1 ── qemu VM 1: eth0 198.18.0.12/24, rxe0 on eth0
//	   └──── vbr ═══ veth ═══╗
//	netns goroce-ix-<pid>-h  (the "host namespace": where a goroce endpoint runs)
//	  ix0 198.18.0.1/24 (MAC 02:00:c6:12:00:01), lo; no default route
//
// Every link carries Config.MTU. Nothing is routed out of the namespaces and
// only 198.18.0.0/24 is used. A harness is created by New and torn down by
// Close, which t.Cleanup also calls: qemu and tcpdump are stopped by the PID
// that was started and both namespaces are deleted.
//
// Jobs: each VM shares a host directory with the guest over 9p (mounted on
// /jobs). The host writes new/ID/cmd (atomically, by rename); the guest's job
// daemon (vm/jobd) moves it to run/ID, runs it with bash in its own session,
// and leaves out, err, pid and finally rc there. Run waits for rc; a job that
// outlives its timeout is killed (by a second job, kill -- -PGID). So several
// jobs can run at once in one VM, and a job's output is readable while it runs.
//
// A goroce endpoint runs in the host namespace: HostExec prepares a command
// to run there, HostDo runs a Go function on an OS thread switched into it
// (sockets opened inside stay in that namespace). The endpoint talks to the
// VMs at VMIP(i) on HostIface() with source HostIP(). A program that speaks
// RoCEv2 itself over AF_PACKET/AF_XDP should also bind a UDP socket to
// HostIP():4791, or the host namespace's kernel answers rxe's packets with ICMP
// port unreachable.
//
// It is Linux only (network namespaces, setns, qemu); on other systems the
// package holds only this documentation, so that ./... builds everywhere.
package interop
