package devinfocmd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// memInfo is the DeviceInfo of a memory-pair device (MAC 02:00:00:00:00:01
// or similar: whatever the pair gives, the test derives from it).
func memInfo(t *testing.T) *qp.DeviceInfo {
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	gid, _ := a.GID(a.IPv4GIDIndex())
	return &qp.DeviceInfo{Name: "goroce_test0", Ifname: "test0", Ifindex: 7, MAC: a.MAC(), IP: gid.Unmap(),
		Device: a.Attr(), Port: a.PortAttr(), GIDs: a.GIDTable()}
}

// TestDevinfoFormat: the lines ibv_devinfo prints, in its order and with
// its tabs, for rxe's values.
func TestDevinfoFormat(t *testing.T) {
	i := memInfo(t)
	out := Devinfo(i, true)
	mac := i.MAC
	guid := GUID(qp.NodeGUID(mac))
	for _, want := range []string{
		"hca_id:\tgoroce_test0\n\ttransport:\t\t\tInfiniBand (0)\n\tnode_guid:\t\t\t" + guid + "\n",
		"\tvendor_id:\t\t\t0xffffff\n",
		"\tphys_port_cnt:\t\t\t1\n",
		"\tmax_qp_wr:\t\t\t65536\n",
		"\t\t\t\t\tRC_RNR_NAK_GEN\n",
		"\tmax_qp_rd_atom:\t\t\t128\n",
		"\tmax_qp_init_rd_atom:\t\t128\n",
		"\tatomic_cap:\t\t\tATOMIC_HCA (1)\n",
		"\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t\t4096 (5)\n\t\t\tactive_mtu:\t\t1024 (3)\n",
		"\t\t\tlink_layer:\t\tEthernet\n",
		"\t\t\tphys_state:\t\tLINK_UP (5)\n",
		"\t\t\tGID[  1]:\t\t" + i.GIDs[1].GID.String() + ", RoCE v2\n",
		"\t\tGID[  0] from:\t\tmac " + mac.String() + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(Devinfo(i, false), "max_qp_wr") {
		t.Error("max_qp_wr without -v")
	}
	if g := GUID(0x505400fffe123456); g != "5054:00ff:fe12:3456" {
		t.Errorf("GUID = %s", g)
	}
	if l := Devices([]*qp.DeviceInfo{i}); !strings.Contains(l, "    goroce_test0    \t"+strings.ReplaceAll(guid, ":", "")+"\n") ||
		!strings.HasPrefix(l, "    device          \t   node GUID\n") {
		t.Errorf("ibv_devices listing:\n%s", l)
	}
	if l := Link(i); l != "link goroce_test0/1 state ACTIVE physical_state LINK_UP netdev test0\n" {
		t.Errorf("rdma link line %q", l)
	}
}

func TestDevinfoBadArgs(t *testing.T) {
	for _, args := range [][]string{{"-x"}, {"extra"}, {"-i", "2"}} {
		var out, errb bytes.Buffer
		if code := Run(tool.Env{Stdout: &out, Stderr: &errb}, args); code == 0 {
			t.Errorf("%q: exit 0", args)
		}
	}
}
