package tool

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

func TestSplitOptionsMetrics(t *testing.T) {
	for _, args := range [][]string{{"-s", "64", "--metrics", "127.0.0.1:9100", "host"}, {"-s", "64", "--metrics=127.0.0.1:9100", "host"}} {
		rest, o, err := SplitOptions(args)
		if err != nil || o.Metrics != "127.0.0.1:9100" || strings.Join(rest, " ") != "-s 64 host" {
			t.Errorf("SplitOptions(%q) = %q, %+v, %v", args, rest, o, err)
		}
	}
	for _, args := range [][]string{{"--metrics"}, {"--metrics", "9100"}} {
		if _, _, err := SplitOptions(args); err == nil {
			t.Errorf("SplitOptions(%q) accepted", args)
		}
	}
	if rest, o, _ := SplitOptions([]string{"--", "--metrics", "x"}); o.Metrics != "" || len(rest) != 3 {
		t.Errorf("--metrics after -- was taken: %q %+v", rest, o)
	}
}

// TestServeMetrics: both endpoints answer on loopback while the server
// runs, and Stop closes the listener.
func TestServeMetrics(t *testing.T) {
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	s, err := ServeMetrics(Env{}, "127.0.0.1:0", a, b)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr().String()
	for path, want := range map[string]string{"/metrics": "goroce_sent_pkts_total{device=", "/debug/vars": `"hw_counters"`} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), want) {
			t.Errorf("%s lacks %s:\n%.500s", path, want, body)
		}
	}
	s.Stop()
	if _, err := http.Get(base + "/metrics"); err == nil {
		t.Error("still serving after Stop")
	}
}

// TestMetricsExposure: a --metrics address on every interface is warned
// about (a loopback one is not), and /debug/vars leaves out expvar's
// "cmdline" unless --metrics-cmdline asks for it. The wildcard addresses
// are listened on only inside a network namespace of the test's own.
func TestMetricsExposure(t *testing.T) {
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	start := func(args ...string) (stderr string, vars string) {
		t.Helper()
		_, o, err := SplitOptions(args)
		if err != nil {
			t.Fatal(err)
		}
		var buf strings.Builder
		var addr string
		env := Env{Stderr: &buf, MetricsListening: func(a net.Addr) { addr = a.String() }}
		_, stop := StartMetrics(env, o, a)
		defer stop()
		if addr == "" {
			t.Fatalf("%q: not listening: %s", args, buf.String())
		}
		if strings.HasPrefix(addr, "127.") || strings.HasPrefix(addr, "[::1]") {
			resp, err := http.Get("http://" + addr + "/debug/vars")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			vars = string(body)
		}
		return buf.String(), vars
	}
	for _, c := range []struct {
		args    []string
		cmdline bool
	}{
		{[]string{"--metrics", "127.0.0.1:0"}, false},
		{[]string{"--metrics=127.0.0.1:0", "--metrics-cmdline"}, true},
	} {
		stderr, vars := start(c.args...)
		if stderr != "" {
			t.Errorf("%q: warned %q", c.args, stderr)
		}
		if got := strings.Contains(vars, `"cmdline"`); got != c.cmdline {
			t.Errorf("%q: /debug/vars has cmdline %v, want %v", c.args, got, c.cmdline)
		}
		if !strings.Contains(vars, `"goroce"`) {
			t.Errorf("%q: /debug/vars lacks the goroce counters", c.args)
		}
	}
	p := netns.NewPair(t, netns.Options{})
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		var stderr string
		if err := p.Do(netns.A, func() error { stderr, _ = start("--metrics", addr); return nil }); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stderr, "goroce: warning: --metrics "+addr+" serves the counters on every interface") ||
			!strings.Contains(stderr, "127.0.0.1:0 keeps them local") {
			t.Errorf("--metrics %s: warning %q", addr, stderr)
		}
	}
}
