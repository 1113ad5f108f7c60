package qp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic/netaddr"
	"github.com/goroce/goroce/transport"
)

// AtomicCap is enum ibv_atomic_cap.
type AtomicCap int

const (
	AtomicNone AtomicCap = 0 // ATOMIC_NONE
	// AtomicHCA: atomics are atomic with respect to other atomics through
	// this device (IBV_ATOMIC_HCA, what rxe reports): goroce executes them
	// under the device's lock, not against the CPU's own atomic
	// instructions on the same memory.
	AtomicHCA  AtomicCap = 1 // ATOMIC_HCA
	AtomicGlob AtomicCap = 2 // ATOMIC_GLOB
)

func (c AtomicCap) String() string {
	switch c {
	case AtomicNone:
		return "ATOMIC_NONE"
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

// DeviceCapFlags are enum ibv_device_cap_flags.
type DeviceCapFlags uint32

const (
	DeviceBadPKeyCntr      DeviceCapFlags = 1 << 1
	DevicePortActiveEvent  DeviceCapFlags = 1 << 10
	DeviceSysImageGUID     DeviceCapFlags = 1 << 11
	DeviceRCRNRNAKGen      DeviceCapFlags = 1 << 12
	DeviceMemWindow        DeviceCapFlags = 1 << 17
	DeviceMemMgtExtensions DeviceCapFlags = 1 << 21
	DeviceMemWindowType2B  DeviceCapFlags = 1 << 24
)

// deviceCapNames are the flag names ibv_devinfo prints, in its order.
var deviceCapNames = []struct {
	f    DeviceCapFlags
	name string
}{
	{DeviceBadPKeyCntr, "BAD_PKEY_CNTR"},
	{DevicePortActiveEvent, "PORT_ACTIVE_EVENT"},
	{DeviceSysImageGUID, "SYS_IMAGE_GUID"},
	{DeviceRCRNRNAKGen, "RC_RNR_NAK_GEN"},
	{DeviceMemWindow, "MEM_WINDOW"},
	{DeviceMemMgtExtensions, "MEM_MGT_EXTENSIONS"},
	{DeviceMemWindowType2B, "MEM_WINDOW_TYPE_2B"},
}

// Names lists the flags set, as ibv_devinfo -v prints them.
func (f DeviceCapFlags) Names() []string {
	var out []string
	for _, n := range deviceCapNames {
		if f&n.f != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// DeviceAttr are a device's attributes (struct ibv_device_attr): goroce's
// real limits, which are rxe's (rxe_param.h, rxe_init_device_param) where
// goroce has the same limit and goroce's own where it differs (noted per
// field).
type DeviceAttr struct {
	FWVer           string         `json:"fw_ver"`         // rxe has none either
	NodeGUID        uint64         `json:"node_guid"`      // the MAC's EUI-64, as rxe
	SysImageGUID    uint64         `json:"sys_image_guid"` // = NodeGUID, as rxe
	VendorID        uint32         `json:"vendor_id"`      // rxe: RXE_VENDOR_ID 0xFFFFFF (IBTA A3.3.1: none)
	VendorPartID    uint32         `json:"vendor_part_id"` // 0, as rxe
	HWVer           uint32         `json:"hw_ver"`         // 0, as rxe
	MaxMRSize       uint64         `json:"max_mr_size"`    // rxe: RXE_MAX_MR_SIZE (-1); goroce: a Go slice, so MaxInt
	PageSizeCap     uint64         `json:"page_size_cap"`  // rxe's RXE_PAGE_SIZE_CAP
	MaxQP           int            `json:"max_qp"`         // QPNs 0x11..0xFFFFFF
	MaxQPWR         int            `json:"max_qp_wr"`      // goroce: 65536 (rxe 1<<20)
	CapFlags        DeviceCapFlags `json:"device_cap_flags"`
	MaxSGE          int            `json:"max_sge"`             // goroce: 16 (rxe 32)
	MaxSGERd        int            `json:"max_sge_rd"`          // goroce: 16 (rxe 32)
	MaxCQ           int            `json:"max_cq"`              // no limit but memory: rxe's 1<<20
	MaxCQE          int            `json:"max_cqe"`             // goroce: 1<<20 (rxe 1<<15)
	MaxMR           int            `json:"max_mr"`              // memreg.MaxMRs
	MaxPD           int            `json:"max_pd"`              // no limit but memory: rxe's 1<<20
	MaxQPRdAtom     int            `json:"max_qp_rd_atom"`      // 128, as rxe
	MaxResRdAtom    int            `json:"max_res_rd_atom"`     // rxe's 0x3f000
	MaxQPInitRdAtom int            `json:"max_qp_init_rd_atom"` // 128, as rxe
	AtomicCap       AtomicCap      `json:"atomic_cap"`          // ATOMIC_HCA, as rxe
	MaxMW           int            `json:"max_mw"`              // memreg.MaxMWs: rxe's window index range
	MaxAH           int            `json:"max_ah"`              // rxe's 0x3fff (RXE_MAX_AH); goroce keeps no AH table
	MaxSRQ          int            `json:"max_srq"`             // 1<<20, as rxe's order of magnitude
	MaxSRQWR        int            `json:"max_srq_wr"`
	MaxSRQSGE       int            `json:"max_srq_sge"`
	MaxPKeys        int            `json:"max_pkeys"`          // 1: only 0xFFFF
	LocalCAAckDelay int            `json:"local_ca_ack_delay"` // 15, as rxe
	MaxInlineData   int            `json:"max_inline_data"`    // transport.MaxInlineData (rxe's old 400)
	PhysPortCnt     int            `json:"phys_port_cnt"`      // 1
}

// Attr returns the device's attributes (ibv_query_device).
func (d *Device) Attr() DeviceAttr { return deviceAttr(d.mac[:]) }

func deviceAttr(mac net.HardwareAddr) DeviceAttr {
	guid := NodeGUID(mac)
	return DeviceAttr{
		NodeGUID: guid, SysImageGUID: guid, VendorID: 0xFFFFFF,
		MaxMRSize: 1<<63 - 1, PageSizeCap: 0xfffff000,
		MaxQP: maxQPN - minQPN + 1, MaxQPWR: 1 << 16,
		CapFlags: DeviceBadPKeyCntr | DevicePortActiveEvent | DeviceSysImageGUID | DeviceRCRNRNAKGen | DeviceMemWindow |
			DeviceMemMgtExtensions | DeviceMemWindowType2B,
		MaxSGE: transport.MaxSGE, MaxSGERd: transport.MaxSGE,
		MaxCQ: 1 << 20, MaxCQE: 1 << 20, MaxMR: memreg.MaxMRs, MaxMW: memreg.MaxMWs, MaxPD: 1 << 20,
		MaxQPRdAtom: transport.MaxRdAtomic, MaxResRdAtom: 0x3f000, MaxQPInitRdAtom: transport.MaxRdAtomic,
		AtomicCap: AtomicHCA, MaxPKeys: 1, LocalCAAckDelay: 15,
		MaxInlineData: transport.MaxInlineData, PhysPortCnt: 1,
		MaxSRQ: 1 << 20, MaxSRQWR: transport.MaxSRQWR, MaxSRQSGE: transport.MaxSGE, MaxAH: 0x3fff,
	}
}

// NodeGUID is the EUI-64 of a MAC as a GUID (rxe: addrconf_addr_eui48 of
// the netdev's address): 52:54:00:12:34:56 gives 0x505400fffe123456.
func NodeGUID(mac net.HardwareAddr) uint64 {
	if len(mac) != 6 {
		return 0
	}
	var b [8]byte
	b[0], b[1], b[2] = mac[0]^2, mac[1], mac[2]
	b[3], b[4] = 0xff, 0xfe
	b[5], b[6], b[7] = mac[3], mac[4], mac[5]
	return binary.BigEndian.Uint64(b[:])
}

// PortState is enum ibv_port_state.
type PortState int

const (
	PortDown   PortState = 1 // PORT_DOWN
	PortInit   PortState = 2 // PORT_INIT
	PortArmed  PortState = 3 // PORT_ARMED
	PortActive PortState = 4 // PORT_ACTIVE
)

func (s PortState) String() string {
	switch s {
	case PortDown:
		return "PORT_DOWN"
	case PortInit:
		return "PORT_INIT"
	case PortArmed:
		return "PORT_ARMED"
	case PortActive:
		return "PORT_ACTIVE"
	}
	return "invalid state"
}

// PhysState is the port's physical state (ibv_port_attr.phys_state).
type PhysState int

const (
	PhysStateSleep    PhysState = 1 // SLEEP
	PhysStatePolling  PhysState = 2 // POLLING
	PhysStateDisabled PhysState = 3 // DISABLED
	PhysStateLinkUp   PhysState = 5 // LINK_UP
)

func (s PhysState) String() string {
	switch s {
	case PhysStateSleep:
		return "SLEEP"
	case PhysStatePolling:
		return "POLLING"
	case PhysStateDisabled:
		return "DISABLED"
	case PhysStateLinkUp:
		return "LINK_UP"
	}
	return "invalid physical state"
}

// GIDTypeRoCEv2 is the type of every goroce GID (IBV_GID_TYPE_ROCE_V2):
// goroce speaks RoCE v2 only.
const GIDTypeRoCEv2 = "RoCE v2"

// PortAttr are port 1's attributes (struct ibv_port_attr), with rxe's
// values (rxe_param.h rxe_port_param, rxe_query_port) for what goroce
// does not change.
type PortAttr struct {
	State     PortState `json:"state"`
	MaxMTU    MTU       `json:"max_mtu"`    // 4096, as rxe
	ActiveMTU MTU       `json:"active_mtu"` // the largest IB MTU ≤ netdev MTU − 80
	// NetdevMTU is the interface's IP MTU (rxe: ndev->mtu).
	NetdevMTU     int       `json:"netdev_mtu"`
	GIDTblLen     int       `json:"gid_tbl_len"`
	PortCapFlags  uint32    `json:"port_cap_flags"` // IB_PORT_CM_SUP, as rxe
	MaxMsgSz      uint32    `json:"max_msg_sz"`     // 2^31, as rxe
	BadPKeyCntr   uint32    `json:"bad_pkey_cntr"`
	QKeyViolCntr  uint32    `json:"qkey_viol_cntr"`
	PKeyTblLen    int       `json:"pkey_tbl_len"` // 1, as rxe
	LID           uint16    `json:"lid"`
	SMLID         uint16    `json:"sm_lid"`
	LMC           uint8     `json:"lmc"`
	MaxVLNum      uint8     `json:"max_vl_num"`
	SMSL          uint8     `json:"sm_sl"`
	SubnetTimeout uint8     `json:"subnet_timeout"`
	InitTypeReply uint8     `json:"init_type_reply"`
	ActiveWidth   uint8     `json:"active_width"` // IB_WIDTH_1X code, as rxe
	ActiveSpeed   uint8     `json:"active_speed"` // 2.5 Gbps code, as rxe
	PhysState     PhysState `json:"phys_state"`
	LinkLayer     string    `json:"link_layer"` // "Ethernet"
}

// portCMSup is IB_PORT_CM_SUP.
const portCMSup = 1 << 16

func portAttr(active, up bool, netdevMTU, gids int) PortAttr {
	a := PortAttr{
		State: PortActive, MaxMTU: MTU4096, ActiveMTU: PathMTU(netdevMTU), NetdevMTU: netdevMTU,
		GIDTblLen: gids, PortCapFlags: portCMSup, MaxMsgSz: 1 << 31, PKeyTblLen: 1,
		MaxVLNum: 1, ActiveWidth: 1, ActiveSpeed: 1, PhysState: PhysStateLinkUp, LinkLayer: "Ethernet",
	}
	// rxe_query_port: LINK_UP while active, POLLING when the netdev is up
	// without carrier, DISABLED when it is down.
	switch {
	case active:
	case up:
		a.State, a.PhysState = PortDown, PhysStatePolling
	default:
		a.State, a.PhysState = PortDown, PhysStateDisabled
	}
	return a
}

// PortAttr returns port 1's attributes (ibv_query_port). The state
// follows the interface of a device opened with OpenInterface (Linux);
// other devices' ports are always active.
func (d *Device) PortAttr() PortAttr {
	d.mu.Lock()
	active, up := !d.ev.portDown, !d.ev.ifDown
	d.mu.Unlock()
	return portAttr(active, up, d.cfg.Link.MTU(), len(d.gids))
}

// GIDEntry is one GID table entry with where it comes from.
type GIDEntry struct {
	Index int    `json:"index"`
	GID   GID    `json:"gid"`
	Type  string `json:"type"` // GIDTypeRoCEv2
	// Source says what the GID is made of: "mac" for the link-local
	// EUI-64 GID at index 0, "ip" for the device's address.
	Source string `json:"source"`
	// Addr is the MAC (as text) or IP address the GID comes from.
	Addr string `json:"addr"`
}

// IPv4GIDIndex returns the index of the device's IPv4-mapped GID
// (::ffff:a.b.c.d), the RoCEv2 GID of its IPv4 address: the gid_index
// and sgid_index an rdma-core program passes (1, as on rxe), and what
// Device.GID takes to give the GID a peer connects to. It returns -1 when
// the device has no IPv4 address.
func (d *Device) IPv4GIDIndex() int {
	for i, g := range d.gids {
		if g.Is4In6() {
			return i
		}
	}
	return -1
}

// GIDTable returns the GID table with the types and sources.
func (d *Device) GIDTable() []GIDEntry { return gidTable(d.gids, d.mac[:]) }

func gidTable(gids []GID, mac net.HardwareAddr) []GIDEntry {
	out := make([]GIDEntry, len(gids))
	for i, g := range gids {
		e := GIDEntry{Index: i, GID: g, Type: GIDTypeRoCEv2, Source: "ip", Addr: g.Unmap().String()}
		if i == 0 {
			e.Source, e.Addr = "mac", mac.String()
		}
		out[i] = e
	}
	return out
}

// DeviceInfo describes the device OpenInterface opens on an interface, as
// `ibv_devinfo -v` and `rdma link` describe an rxe device: DescribeInterface
// computes it without opening anything.
type DeviceInfo struct {
	Name    string           `json:"hca_id"`
	Ifname  string           `json:"netdev"`
	Ifindex int              `json:"ifindex"`
	MAC     net.HardwareAddr `json:"-"`
	MACText string           `json:"mac"`
	IP      netip.Addr       `json:"ip"`
	Device  DeviceAttr       `json:"device"`
	Port    PortAttr         `json:"port"`
	GIDs    []GIDEntry       `json:"gids"`
}

// DescribeInterface returns what a device opened on ifname with o would
// report (its name, DeviceAttr, PortAttr and GID table), reading the
// interface's address, MTU and state in the calling thread's network
// namespace. It opens no socket and needs no privileges.
func DescribeInterface(ifname string, o InterfaceOptions) (*DeviceInfo, error) {
	if err := o.defaults(ifname); err != nil {
		return nil, err
	}
	ifc, err := netaddr.Lookup(ifname)
	if err != nil {
		return nil, fmt.Errorf("qp: describe interface: %w", err)
	}
	ip, err := chooseIP(ifc, o.IP)
	if err != nil {
		return nil, err
	}
	ni, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("qp: describe interface: %w", err)
	}
	var mac [6]byte
	copy(mac[:], ifc.MAC)
	gids := deviceGIDs(mac, ip)
	up := ni.Flags&net.FlagUp != 0
	active := up && ni.Flags&net.FlagRunning != 0
	return &DeviceInfo{
		Name: o.Name, Ifname: ifname, Ifindex: ifc.Index, MAC: ifc.MAC, MACText: ifc.MAC.String(), IP: ip,
		Device: deviceAttr(ifc.MAC), Port: portAttr(active, up, ifc.MTU, len(gids)),
		GIDs: gidTable(gids, ifc.MAC),
	}, nil
}

// deviceGIDs is the GID table Open builds: index 0 the IPv6 link-local GID
// from the MAC, index 1 ::ffff:IP for IPv4 (or the IPv6 address), as rxe.
func deviceGIDs(mac [6]byte, ip netip.Addr) []GID {
	gids := []GID{linkLocal(mac)}
	ip = ip.Unmap()
	if ip.Is4() {
		return append(gids, netip.AddrFrom16(ip.As16()))
	}
	return append(gids, ip)
}
