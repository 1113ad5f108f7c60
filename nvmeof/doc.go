// Package nvmeof is NVMe over Fabrics on RDMA, on top of goroce's cm and
// qp: a target (Target, the role of the kernel's nvmet-rdma) that serves
// namespaces backed by memory or a file, with a discovery controller, and
// a host (Dial, Discover; the role of nvme-rdma) whose namespaces are
// io.ReaderAt and io.WriterAt.
//
// The wire format and the behaviour follow the Linux kernel
// (drivers/nvme/host/rdma.c, drivers/nvme/target/*.c, include/linux/nvme.h
// and nvme-rdma.h); docs/nvmeof.md has the protocol notes: the rdma_cm
// private data, 64-byte command capsules with in-capsule data, 16-byte
// completions, keyed SGLs answered with RDMA READ (host writes) or RDMA
// WRITE followed by the completion's SEND (host reads), SEND_WITH_INV for
// the invalidate subtype.
package nvmeof
