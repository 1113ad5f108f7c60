//go:build linux

package interop

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRpingPersistent: a goroce persistent rping server (rping -s -P)
// serves the stock rping client twice in a row, each over a connection of
// its own: both clients print and validate (-V) every ping, and the
// server prints the pings of both. The goroce server runs until it is
// killed, as the stock one does.
func TestRpingPersistent(t *testing.T) {
	RequireRoot(t)
	bin := buildGoroce(t)
	h := New(t, Config{VMs: 1})
	host := h.HostIP()
	srv, err := h.HostStart(bin, "rping", "--dev", h.HostIface(), "--timeout", "120", "-s", "-P", "-v", "-a", host.String())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	refused := regexp.MustCompile(cmExamples.Refused)
	counts := []int{3, 5}
	for i, n := range counts {
		cmd := fmt.Sprintf("rping -c -a %v -p 7174 -C %d -v -V", host, n)
		var r Result
		for attempt := 0; ; attempt++ {
			r = h.Run(0, cmd, 60*time.Second)
			// The first client may come before the server listens.
			if r.OK() || i > 0 || attempt >= cmClientRetries || !refused.MatchString(r.Output()) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if !r.OK() || strings.Count(r.Stdout, "ping data: ") != n {
			t.Fatalf("stock client %d (-C %d) against goroce rping -s -P:\n%s\ngoroce server so far:\n%s", i+1, n, r, srv.Output())
		}
		t.Logf("stock client %d: %d pings in %.1fs", i+1, n, r.Elapsed.Seconds())
	}
	srv.Kill()
	s := srv.Wait(time.Second)
	if got, want := strings.Count(s.Stdout, "server ping data: "), counts[0]+counts[1]; got != want {
		t.Errorf("goroce server printed %d pings, want %d:\n%s%s", got, want, s.Stdout, s.Stderr)
	}
	if got := strings.Count(s.Stderr, "server DISCONNECT EVENT..."); got != len(counts) {
		t.Errorf("goroce server saw %d disconnects, want %d:\n%s", got, len(counts), s.Stderr)
	}
}
