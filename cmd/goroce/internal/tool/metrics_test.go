package tool

import (
	"io"
	"net/http"
	"strings"
	"testing"

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
