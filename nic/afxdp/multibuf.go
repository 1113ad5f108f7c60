//go:build linux

package afxdp

// maxFrameDescs bounds the chunks one multi-buffer frame spans. In copy
// mode the kernel takes at most CONFIG_MAX_SKB_FRAGS+1 descriptors per
// transmitted packet, and that config is at least 17 (af_xdp.rst,
// "Multi-Buffer Support"); 16 stays below it on every kernel.
const maxFrameDescs = 16

// multiBufMTU is the IP MTU a multi-buffer socket carries with chunks of
// frameSize: maxFrameDescs received chunks, each minus the kernel's
// headroom, less an Ethernet header and a VLAN tag (61422 for 4096-byte
// chunks, so in practice the interface's MTU).
func multiBufMTU(frameSize int) int {
	return maxFrameDescs*(frameSize-xdpPacketHeadroom) - ethHeaderLen - vlanTagLen
}

// MultiBuffer reports whether the socket is bound with XDP_USE_SG and the
// program loaded frags-aware, so a frame may span several UMEM chunks. Open
// asks for it when the interface MTU exceeds what one chunk carries (and
// Options.SingleBuffer is false); a kernel without it (before 6.6, or
// BPF_F_XDP_HAS_FRAGS before 5.18) leaves the link single-buffer, with the
// MTU capped by the chunk and the reason logged.
func (l *Link) MultiBuffer() bool { return l.multiBuf }
