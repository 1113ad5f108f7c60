//go:build linux

package perftestcmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

// scrape is one side's /metrics and /debug/vars, fetched at the end of
// its run (the "final" hook) while --metrics still serves.
type scrape struct {
	prom map[string]float64 // series (name{labels}) → value
	text string
	vars map[string]json.RawMessage
}

// get fetches url with a client whose connections are made inside side
// s's namespace (net/http dials from goroutines of its own, which are in
// the host's).
func get(t *testing.T, p *netns.Pair, s netns.Side, url string) []byte {
	dial := func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = p.Do(s, func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	client := &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return b
}

func parseProm(b []byte) map[string]float64 {
	m := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err == nil {
			m[l[:i]] = v
		}
	}
	return m
}

// TestMetricsScrape runs write_bw between two namespaces (UDP backend, so
// the devices are what any user gets without AF_XDP) with --metrics on the
// namespace's own address, scrapes both ends at the end of the run and
// checks the counters against the run: 200 WRITEs of 4096 bytes at path
// MTU 1024 are 800 request packets, every one received, answered by ACKs
// the client counts as received, and the port counters cover them.
func TestMetricsScrape(t *testing.T) {
	p := netns.NewPair(t, netns.Options{NoDAD: true})
	const iters, size = 200, 4096
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func(s netns.Side) func(context.Context, string) (*qp.Device, error) {
		return func(ctx context.Context, _ string) (*qp.Device, error) {
			d, _, err := qp.OpenInterface(ctx, p.End(s).Ifname, qp.InterfaceOptions{Backend: qp.BackendUDP, Logger: quiet})
			return d, err
		}
	}
	var (
		wg       sync.WaitGroup
		portc    = make(chan int, 1)
		results  [2]scrape
		codes    [2]int
		outs     [2]string
		metricAt [2]string
	)
	run := func(s netns.Side, args []string, listening func(net.Addr)) {
		defer wg.Done()
		var out bytes.Buffer
		env := tool.Env{Ctx: ctx, Stdout: &out, Stderr: &out, Open: open(s), Listening: listening,
			MetricsListening: func(a net.Addr) { metricAt[s] = a.String() },
			Buffers: func(stage string, _ []byte) {
				if stage != "final" {
					return
				}
				base := "http://" + metricAt[s]
				text := get(t, p, s, base+"/metrics")
				results[s].text = string(text)
				results[s].prom = parseProm(text)
				json.Unmarshal(get(t, p, s, base+"/debug/vars"), &results[s].vars)
			}}
		err := p.Do(s, func() error {
			codes[s] = Run(env, perftest.WriteBW, args)
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		outs[s] = out.String()
	}
	metrics := func(s netns.Side) string { return net.JoinHostPort(p.End(s).Addr.String(), "0") }
	common := []string{"-n", strconv.Itoa(iters), "-s", strconv.Itoa(size), "-x", "1", "--timeout", "50", "--metrics"}
	wg.Add(1)
	go run(netns.A, append([]string{"-p", "0"}, append(common, metrics(netns.A))...), func(a net.Addr) {
		portc <- a.(*net.TCPAddr).Port
	})
	var port int
	select {
	case port = <-portc:
	case <-ctx.Done():
		t.Fatal("server never listened")
	}
	wg.Add(1)
	go run(netns.B, append([]string{"-p", strconv.Itoa(port)}, append(common, metrics(netns.B), p.End(netns.A).Addr.String())...), nil)
	wg.Wait()
	if codes != [2]int{} {
		t.Fatalf("exit codes %v\nserver:\n%s\nclient:\n%s", codes, outs[0], outs[1])
	}
	srv, cli := results[netns.A], results[netns.B]
	if srv.prom == nil || cli.prom == nil {
		t.Fatal("no scrape")
	}
	v := func(s scrape, series string) float64 {
		t.Helper()
		x, ok := s.prom[series]
		if !ok {
			t.Fatalf("no series %s in\n%s", series, s.text)
		}
		return x
	}
	sdev, cdev := `{device="goroce_`+p.End(netns.A).Ifname+`"}`, `{device="goroce_`+p.End(netns.B).Ifname+`"}`
	want := float64(iters * size / 1024)
	sent := v(cli, "goroce_sent_pkts_total"+cdev) - v(cli, "goroce_retransmitted_pkts_total"+cdev)
	if sent != want {
		t.Errorf("client sent %v request packets (retransmissions aside), want %v", sent, want)
	}
	if got := v(srv, "goroce_rcvd_pkts_total"+sdev); got < want {
		t.Errorf("server received %v packets, want at least %v", got, want)
	}
	if s, c := v(srv, "goroce_sent_pkts_total"+sdev), v(cli, "goroce_rcvd_pkts_total"+cdev); s != c || s == 0 {
		t.Errorf("server sent %v ACKs, client received %v", s, c)
	}
	if got := v(cli, "goroce_port_xmit_packets_total"+cdev); got < want {
		t.Errorf("client port_xmit_packets %v < %v", got, want)
	}
	if got := v(srv, "goroce_port_rcv_bytes_total"+sdev); got < want*1024 {
		t.Errorf("server port_rcv_bytes %v < %v payload bytes", got, want*1024)
	}
	var g map[string]map[string]any
	if err := json.Unmarshal(srv.vars["goroce"], &g); err != nil {
		t.Fatalf("/debug/vars goroce: %v", err)
	}
	hw, _ := g["goroce_"+p.End(netns.A).Ifname]["hw_counters"].(map[string]any)
	if hw["rcvd_pkts"] != v(srv, "goroce_rcvd_pkts_total"+sdev) {
		t.Errorf("/debug/vars rcvd_pkts %v, /metrics %v", hw["rcvd_pkts"], v(srv, "goroce_rcvd_pkts_total"+sdev))
	}
	if _, ok := srv.vars["memstats"]; !ok {
		t.Error("/debug/vars lacks expvar's memstats")
	}
	t.Logf("client /metrics excerpt:\n%s", excerpt(cli.text))
}

func excerpt(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		for _, p := range []string{"goroce_sent_pkts", "goroce_rcvd_pkts", "goroce_retransmitted", "goroce_port_", "goroce_qp_sent_pkts", "goroce_qp_state", "goroce_rdma_"} {
			if strings.HasPrefix(l, p) {
				fmt.Fprintln(&b, l)
				break
			}
		}
	}
	return b.String()
}
