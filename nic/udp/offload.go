package udp

import "sync/atomic"

// offloadCounters are the Link's UDP GSO/GRO state and counters.
type offloadCounters struct {
	gsoOn, groOn      atomic.Bool
	gsoSends, gsoSegs atomic.Uint64
	groRecvs, groSegs atomic.Uint64
	gsoFallbacks      atomic.Uint64
}

// OffloadStats describes the link's use of UDP segmentation offload (GSO:
// one datagram carrying several equal-sized frames, cut by the kernel or
// the NIC) and receive offload (GRO: the kernel hands over several
// datagrams of one flow as one). Only the Linux socket path has them.
type OffloadStats struct {
	// GSO and GRO say whether the link uses them: Open turns them on when
	// the kernel has them and Config.NoOffload is false; GSO goes off for
	// good when the kernel refuses a segmented datagram (GSOFallbacks).
	GSO, GRO bool
	// GSOSends counts datagrams sent with more than one segment,
	// GSOSegments the frames they carried.
	GSOSends, GSOSegments uint64
	// GROReceives counts coalesced datagrams received, GROSegments the
	// frames they were split into.
	GROReceives, GROSegments uint64
	// GSOFallbacks counts segmented datagrams the kernel refused (EINVAL,
	// EIO); their frames were sent one by one.
	GSOFallbacks uint64
	// GSOPeers is the number of peers known to be goroce UDP links, the
	// only ones sent GSO datagrams.
	GSOPeers int
}

// OffloadStats returns the link's GSO/GRO state and counters.
func (l *Link) OffloadStats() OffloadStats {
	peers := l.peers.count()
	return OffloadStats{
		GSO:          l.gsoOn.Load(),
		GRO:          l.groOn.Load(),
		GSOSends:     l.gsoSends.Load(),
		GSOSegments:  l.gsoSegs.Load(),
		GROReceives:  l.groRecvs.Load(),
		GROSegments:  l.groSegs.Load(),
		GSOFallbacks: l.gsoFallbacks.Load(),
		GSOPeers:     peers,
	}
}
