// Package devinfocmd is `goroce devinfo`: the goroce device on a network
// interface described the way `ibv_devinfo` (rdma-core
// libibverbs/examples/devinfo.c), `ibv_devices` and `rdma link` describe an
// rxe device. It opens nothing: qp.DescribeInterface computes what a
// device opened there would report, so it needs no privileges.
package devinfocmd

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// Summary is the line of goroce's usage.
const Summary = "ibv_devinfo / ibv_devices / rdma link for the goroce device on an interface (no root)"

const usageText = `Usage: goroce devinfo [options]
  -d, --ib-dev=<ifname>  the network interface (default: the first one up with an IPv4 address)
  -i, --ib-port=<port>   the port (goroce devices have port 1 only)
  -l, --list             one line per device, as ibv_devices prints it
  -v, --verbose          every attribute, with the GID table (ibv_devinfo -v)
      --link             the rdma link line (` + "`rdma link show`" + `)
      --json             the attributes as JSON
Environment: GOROCE_BACKEND names the backend a device would use (the device name does not
depend on it).
`

// Run prints the description and returns the exit code.
func Run(env tool.Env, args []string) int {
	fs := flag.NewFlagSet("devinfo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var dev string
	var port int
	var list, verbose, link, asJSON bool
	fs.StringVar(&dev, "d", "", "")
	fs.StringVar(&dev, "ib-dev", "", "")
	fs.IntVar(&port, "i", 0, "")
	fs.IntVar(&port, "ib-port", 0, "")
	fs.BoolVar(&list, "l", false, "")
	fs.BoolVar(&list, "list", false, "")
	fs.BoolVar(&verbose, "v", false, "")
	fs.BoolVar(&verbose, "verbose", false, "")
	fs.BoolVar(&link, "link", false, "")
	fs.BoolVar(&asJSON, "json", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(env.Stdout, usageText)
			return 0
		}
		fmt.Fprintf(env.Stderr, "goroce devinfo: %v\n%s", err, usageText)
		return tool.ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "goroce devinfo: unexpected argument %q\n%s", fs.Arg(0), usageText)
		return tool.ExitUsage
	}
	if port != 0 && port != 1 {
		fmt.Fprintf(env.Stderr, "Invalid port requested for device\n")
		return tool.ExitUsage // devinfo.c exits 4
	}
	if dev == "" {
		ifname, err := tool.DefaultInterface()
		if err != nil {
			fmt.Fprintf(env.Stderr, "goroce devinfo: %v\n", err)
			return 1
		}
		dev = ifname
	}
	o := qp.InterfaceOptions{Backend: os.Getenv("GOROCE_BACKEND")}
	info, err := qp.DescribeInterface(dev, o)
	if err != nil {
		fmt.Fprintf(env.Stderr, "goroce devinfo: %v\n", err)
		return 1
	}
	switch {
	case asJSON:
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(info); err != nil {
			fmt.Fprintf(env.Stderr, "goroce devinfo: %v\n", err)
			return 1
		}
	case list:
		fmt.Fprint(env.Stdout, Devices([]*qp.DeviceInfo{info}))
	case link:
		fmt.Fprint(env.Stdout, Link(info))
	default:
		fmt.Fprint(env.Stdout, Devinfo(info, verbose))
	}
	return 0
}

// GUID formats a GUID as devinfo.c's guid_str.
func GUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// Devices is ibv_devices' listing.
func Devices(infos []*qp.DeviceInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "    %-16s\t   node GUID\n", "device")
	fmt.Fprintf(&b, "    %-16s\t----------------\n", "------")
	for _, i := range infos {
		fmt.Fprintf(&b, "    %-16s\t%016x\n", i.Name, i.Device.NodeGUID)
	}
	return b.String()
}

// Link is `rdma link show`'s line for the device's port.
func Link(i *qp.DeviceInfo) string {
	state := strings.TrimPrefix(i.Port.State.String(), "PORT_")
	return fmt.Sprintf("link %s/1 state %s physical_state %v netdev %s\n", i.Name, state, i.Port.PhysState, i.Ifname)
}

func mtuStr(m qp.MTU) string {
	if n := m.Bytes(); n > 0 {
		return fmt.Sprint(n)
	}
	return "invalid MTU"
}

// Devinfo is ibv_devinfo's output (print_hca_cap) for the device, -v
// included when verbose, followed by goroce's own lines: the netdev and
// where each GID comes from. Attributes an rxe device has and goroce
// does not (ODP, TSO, RSS, device memory, tag matching) print as
// ibv_devinfo prints them for an rxe device without them.
func Devinfo(i *qp.DeviceInfo, verbose bool) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	d, pa := &i.Device, &i.Port
	p("hca_id:\t%s\n", i.Name)
	p("\ttransport:\t\t\tInfiniBand (0)\n")
	if d.FWVer != "" {
		p("\tfw_ver:\t\t\t\t%s\n", d.FWVer)
	}
	p("\tnode_guid:\t\t\t%s\n", GUID(d.NodeGUID))
	p("\tsys_image_guid:\t\t\t%s\n", GUID(d.SysImageGUID))
	p("\tvendor_id:\t\t\t0x%04x\n", d.VendorID)
	p("\tvendor_part_id:\t\t\t%d\n", d.VendorPartID)
	p("\thw_ver:\t\t\t\t0x%X\n", d.HWVer)
	p("\tphys_port_cnt:\t\t\t%d\n", d.PhysPortCnt)
	if verbose {
		p("\tmax_mr_size:\t\t\t0x%x\n", d.MaxMRSize)
		p("\tpage_size_cap:\t\t\t0x%x\n", d.PageSizeCap)
		p("\tmax_qp:\t\t\t\t%d\n", d.MaxQP)
		p("\tmax_qp_wr:\t\t\t%d\n", d.MaxQPWR)
		p("\tdevice_cap_flags:\t\t0x%08x\n", uint32(d.CapFlags))
		for _, n := range d.CapFlags.Names() {
			p("\t\t\t\t\t%s\n", n)
		}
		p("\tmax_sge:\t\t\t%d\n", d.MaxSGE)
		p("\tmax_sge_rd:\t\t\t%d\n", d.MaxSGERd)
		p("\tmax_cq:\t\t\t\t%d\n", d.MaxCQ)
		p("\tmax_cqe:\t\t\t%d\n", d.MaxCQE)
		p("\tmax_mr:\t\t\t\t%d\n", d.MaxMR)
		p("\tmax_pd:\t\t\t\t%d\n", d.MaxPD)
		p("\tmax_qp_rd_atom:\t\t\t%d\n", d.MaxQPRdAtom)
		p("\tmax_ee_rd_atom:\t\t\t0\n")
		p("\tmax_res_rd_atom:\t\t%d\n", d.MaxResRdAtom)
		p("\tmax_qp_init_rd_atom:\t\t%d\n", d.MaxQPInitRdAtom)
		p("\tmax_ee_init_rd_atom:\t\t0\n")
		p("\tatomic_cap:\t\t\t%v (%d)\n", d.AtomicCap, d.AtomicCap)
		p("\tmax_ee:\t\t\t\t0\n")
		p("\tmax_rdd:\t\t\t0\n")
		p("\tmax_mw:\t\t\t\t%d\n", d.MaxMW)
		p("\tmax_raw_ipv6_qp:\t\t0\n")
		p("\tmax_raw_ethy_qp:\t\t0\n")
		p("\tmax_mcast_grp:\t\t\t0\n")
		p("\tmax_mcast_qp_attach:\t\t0\n")
		p("\tmax_total_mcast_qp_attach:\t0\n")
		p("\tmax_ah:\t\t\t\t%d\n", d.MaxAH)
		p("\tmax_fmr:\t\t\t0\n")
		p("\tmax_srq:\t\t\t%d\n", d.MaxSRQ)
		if d.MaxSRQ > 0 {
			p("\tmax_srq_wr:\t\t\t%d\n", d.MaxSRQWR)
			p("\tmax_srq_sge:\t\t\t%d\n", d.MaxSRQSGE)
		}
		p("\tmax_pkeys:\t\t\t%d\n", d.MaxPKeys)
		p("\tlocal_ca_ack_delay:\t\t%d\n", d.LocalCAAckDelay)
		p("\tgeneral_odp_caps:\n")
		for _, t := range []string{"rc", "uc", "ud", "xrc"} {
			p("\t%s_odp_caps:\n\t\t\t\t\tNO SUPPORT\n", t)
		}
		p("\tcompletion_timestamp_mask not supported\n")
		p("\tcore clock not supported\n")
		p("\tdevice_cap_flags_ex:\t\t0x%X\n", uint64(d.CapFlags))
		p("\ttso_caps:\n\tmax_tso:\t\t\t0\n")
		p("\trss_caps:\n\t\tmax_rwq_indirection_tables:\t\t\t0\n\t\tmax_rwq_indirection_table_size:\t\t\t0\n")
		p("\t\trx_hash_function:\t\t\t\t0x0\n\t\trx_hash_fields_mask:\t\t\t\t0x0\n")
		p("\tmax_wq_type_rq:\t\t\t0\n")
		p("\tpacket_pacing_caps:\n\t\tqp_rate_limit_min:\t0kbps\n\t\tqp_rate_limit_max:\t0kbps\n")
		p("\ttag matching not supported\n")
	}
	p("\t\tport:\t1\n")
	p("\t\t\tstate:\t\t\t%v (%d)\n", pa.State, pa.State)
	p("\t\t\tmax_mtu:\t\t%s (%d)\n", mtuStr(pa.MaxMTU), pa.MaxMTU)
	p("\t\t\tactive_mtu:\t\t%s (%d)\n", mtuStr(pa.ActiveMTU), pa.ActiveMTU)
	p("\t\t\tsm_lid:\t\t\t%d\n", pa.SMLID)
	p("\t\t\tport_lid:\t\t%d\n", pa.LID)
	p("\t\t\tport_lmc:\t\t0x%02x\n", pa.LMC)
	p("\t\t\tlink_layer:\t\t%s\n", pa.LinkLayer)
	if verbose {
		p("\t\t\tmax_msg_sz:\t\t0x%x\n", pa.MaxMsgSz)
		p("\t\t\tport_cap_flags:\t\t0x%08x\n", pa.PortCapFlags)
		p("\t\t\tport_cap_flags2:\t0x%04x\n", 0)
		p("\t\t\tmax_vl_num:\t\t1 (%d)\n", pa.MaxVLNum)
		p("\t\t\tbad_pkey_cntr:\t\t0x%x\n", pa.BadPKeyCntr)
		p("\t\t\tqkey_viol_cntr:\t\t0x%x\n", pa.QKeyViolCntr)
		p("\t\t\tsm_sl:\t\t\t%d\n", pa.SMSL)
		p("\t\t\tpkey_tbl_len:\t\t%d\n", pa.PKeyTblLen)
		p("\t\t\tgid_tbl_len:\t\t%d\n", pa.GIDTblLen)
		p("\t\t\tsubnet_timeout:\t\t%d\n", pa.SubnetTimeout)
		p("\t\t\tinit_type_reply:\t%d\n", pa.InitTypeReply)
		p("\t\t\tactive_width:\t\t1X (%d)\n", pa.ActiveWidth)
		p("\t\t\tactive_speed:\t\t2.5 Gbps (%d)\n", pa.ActiveSpeed)
		p("\t\t\tphys_state:\t\t%v (%d)\n", pa.PhysState, pa.PhysState)
		for _, g := range i.GIDs {
			p("\t\t\tGID[%3d]:\t\t%s, %s\n", g.Index, g.GID, g.Type)
		}
	}
	p("\n")
	p("\tgoroce:\n")
	p("\t\tnetdev:\t\t\t%s (ifindex %d)\n", i.Ifname, i.Ifindex)
	p("\t\tnetdev_mtu:\t\t%d\n", pa.NetdevMTU)
	for _, g := range i.GIDs {
		p("\t\tGID[%3d] from:\t\t%s %s\n", g.Index, g.Source, g.Addr)
	}
	return b.String()
}
