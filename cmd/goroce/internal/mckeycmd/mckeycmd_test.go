package mckeycmd

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

// syncBuf is a bytes.Buffer the test reads while the tool writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const joined = "mckey: joined dgid: ::ffff:239.1.2.3 mlid 0x0 sl 0\n"

// TestMckeyMem: a goroce mckey receiver (-c 2: two QPs attached to the
// group on one device) and a goroce mckey sender over the in-memory link:
// every datagram of the sender reaches both receiving QPs, and both print
// mckey's lines.
func TestMckeyMem(t *testing.T) {
	for _, c := range []struct {
		name       string
		recv, send []string
	}{
		{"one", []string{"--dev", "b", "-m", "239.1.2.3", "-C", "20", "-S", "512"}, []string{"--dev", "a", "-m", "239.1.2.3", "-s", "-C", "20", "-S", "512"}},
		{"two-receivers-send-only-bound", []string{"--dev", "b", "-m", "239.1.2.3", "-c", "2", "-b", "198.18.0.2"},
			[]string{"--dev", "a", "-m", "239.1.2.3", "-s", "-o", "-l", "-b", "198.18.0.1", "-p", "0x13f"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var rout, rerr syncBuf
			code := make(chan int, 1)
			go func() {
				code <- Run(tool.Env{Ctx: ctx, Stdout: &rout, Stderr: &rerr, Open: open}, append([]string{"--pause", "0"}, c.recv...))
			}()
			for !strings.Contains(rout.String(), "receiving data transfers") {
				select {
				case rc := <-code:
					t.Fatalf("receiver ended first: %d\n%s%s", rc, rout.String(), rerr.String())
				case <-ctx.Done():
					t.Fatalf("receiver never joined:\n%s%s", rout.String(), rerr.String())
				case <-time.After(time.Millisecond):
				}
			}
			var sout, serr bytes.Buffer
			if sc := Run(tool.Env{Ctx: ctx, Stdout: &sout, Stderr: &serr, Open: open}, append([]string{"--pause", "0"}, c.send...)); sc != 0 {
				t.Fatalf("sender exit %d\n%s%s", sc, sout.String(), serr.String())
			}
			if rc := <-code; rc != 0 {
				t.Fatalf("receiver exit %d\n%s%s", rc, rout.String(), rerr.String())
			}
			nodes := 1
			if strings.Contains(strings.Join(c.recv, " "), "-c 2") {
				nodes = 2
			}
			wantR := "mckey: starting server\nmckey: joining\n" + strings.Repeat(joined, nodes) +
				"receiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
			if rout.String() != wantR {
				t.Errorf("receiver printed\n%s\nwant\n%s", rout.String(), wantR)
			}
			wantS := "mckey: starting client\nmckey: joining\n" + joined + "initiating data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
			if sout.String() != wantS {
				t.Errorf("sender printed\n%s\nwant\n%s", sout.String(), wantS)
			}
		})
	}
}

// TestMckeyErrors: mckey's refusals: -M without -b, -M with -b (an AF_IB
// group, which rdma_cm does not join on RoCEv2), an IPv6 group (the same),
// a bind address not the device's, a message above the MTU, a usage error.
func TestMckeyErrors(t *testing.T) {
	for _, c := range []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"-M", "ff12::1"}, tool.ExitUsage, "unmapped multicast address requires binding to source address\n", ""},
		{[]string{"--dev", "a", "-M", "ff12::1", "-b", "198.18.0.1"}, 255, "return status -1",
			"mckey: failure joining: Operation not supported\nmckey: resolve addr failure: Operation not supported\n"},
		{[]string{"--dev", "a", "-m", "ff0e::1"}, 255, "return status -1",
			"mckey: failure joining: Operation not supported\nmckey: failure leaving: Cannot assign requested address\n"},
		{[]string{"--dev", "a", "-m", "239.1.2.3", "-b", "198.18.0.9"}, 255, "return status -1", "mckey: addr bind failure: Cannot assign requested address\n"},
		{[]string{"--dev", "a", "-m", "239.1.2.3", "-S", "5000"}, 255, "mckey: message_size 5000 is larger than active mtu ",
			"mckey: failure leaving: Cannot assign requested address\n"},
		{[]string{"-x"}, tool.ExitUsage, "usage: mckey\n", ""},
	} {
		var out, errb bytes.Buffer
		open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
		code := Run(tool.Env{Stdout: &out, Stderr: &errb, Open: open}, append([]string{"--pause", "0"}, c.args...))
		if code != c.code || !strings.Contains(out.String(), c.stdout) || errb.String() != c.errs {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, out.String(), errb.String(), c.code, c.stdout, c.errs)
		}
	}
}
