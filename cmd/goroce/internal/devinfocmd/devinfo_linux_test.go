//go:build linux

package devinfocmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

// TestDevinfoNetns runs `goroce devinfo` on a veth inside a namespace: the
// node GUID is the veth MAC's EUI-64, GID 1 its IPv4 address, the port
// active at MTU 1024 for a 1500-byte netdev, and after `ip link set down`
// PORT_DOWN/DISABLED; -l and --json agree.
func TestDevinfoNetns(t *testing.T) {
	p := netns.NewPair(t, netns.Options{NoDAD: true})
	end := p.End(netns.A)
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		var code int
		if err := p.Do(netns.A, func() error {
			code = Run(tool.Env{Stdout: &out, Stderr: &errb}, append([]string{"-d", end.Ifname}, args...))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if code != 0 {
			t.Fatalf("devinfo %q: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	out := run("-v")
	guid := GUID(qp.NodeGUID(end.MAC))
	name := "goroce_" + end.Ifname
	for _, want := range []string{
		"hca_id:\t" + name + "\n",
		"\tnode_guid:\t\t\t" + guid + "\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tactive_mtu:\t\t1024 (3)\n",
		fmt.Sprintf("\t\t\tGID[  1]:\t\t::ffff:%v, RoCE v2\n", end.Addr),
		fmt.Sprintf("\t\tGID[  1] from:\t\tip %v\n", end.Addr),
		fmt.Sprintf("\t\tnetdev:\t\t\t%s (ifindex %d)\n", end.Ifname, end.Ifindex),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("devinfo -v lacks %q:\n%s", want, out)
		}
	}
	t.Logf("goroce devinfo -v -d %s:\n%s", end.Ifname, out)
	if l := run("-l"); !strings.Contains(l, name) || !strings.Contains(l, strings.ReplaceAll(guid, ":", "")) {
		t.Errorf("-l:\n%s", l)
	}
	var j struct {
		Name string `json:"hca_id"`
		Port struct {
			State     int `json:"state"`
			ActiveMTU int `json:"active_mtu"`
		} `json:"port"`
		GIDs []struct {
			GID, Type, Source, Addr string
		} `json:"gids"`
	}
	if err := json.Unmarshal([]byte(run("--json")), &j); err != nil {
		t.Fatal(err)
	}
	if j.Name != name || j.Port.State != 4 || j.Port.ActiveMTU != 3 || len(j.GIDs) != 2 || j.GIDs[1].Addr != end.Addr.String() || j.GIDs[1].Type != "RoCE v2" {
		t.Errorf("--json: %+v", j)
	}
	if out, err := p.Command(netns.A, "ip", "link", "set", "dev", end.Ifname, "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set down: %v %s", err, out)
	}
	if l := run("--link"); l != fmt.Sprintf("link %s/1 state DOWN physical_state DISABLED netdev %s\n", name, end.Ifname) {
		t.Errorf("--link after down: %q", l)
	}
}
