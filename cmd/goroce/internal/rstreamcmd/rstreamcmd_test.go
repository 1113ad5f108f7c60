package rstreamcmd

import (
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

var header = "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n"

// rows matches the result rows: name, size, transfers, iterations, total.
var row = regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+[0-9.]+s\s+[0-9.]+\s+[0-9.]+$`)

func check(t *testing.T, out string, want [][5]string) {
	t.Helper()
	if !strings.HasPrefix(out, header) {
		t.Fatalf("no header:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(strings.TrimPrefix(out, header)), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(lines), len(want), out)
	}
	for i, l := range lines {
		m := row.FindStringSubmatch(l)
		if m == nil || [5]string(m[1:6]) != want[i] {
			t.Errorf("row %q, want %v", l, want[i])
		}
	}
}

func TestRstreamMem(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want [][5]string
	}{
		{"custom verify", []string{"-S", "100000", "-C", "20", "-T", "v"}, [][5]string{{"custom", "97k", "20", "1", "3.8m"}}},
		{"custom small buffer", []string{"-S", "64", "-C", "300", "-B", "4096", "-T", "v"}, [][5]string{{"custom", "64", "300", "1", "37k"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
			s, cl := tooltest.RunCMPair(t, Run, open,
				append([]string{"--dev", "a", "-b", "198.18.0.1", "-p", "7471"}, c.args...),
				append([]string{"--dev", "b", "-s", "198.18.0.1", "-p", "7471"}, c.args...))
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("server %d %s%s client %d %s%s", s.Code, s.Stdout, s.Stderr, cl.Code, cl.Stdout, cl.Stderr)
			}
			check(t, s.Stdout, c.want)
			check(t, cl.Stdout, c.want)
		})
	}
}

func TestRiostreamMem(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	args := []string{"-S", "1000", "-C", "1", "-I", "200", "-T", "v"}
	s, cl := tooltest.RunCMPair(t, RunIO, open,
		append([]string{"--dev", "a", "-b", "198.18.0.1"}, args...),
		append([]string{"--dev", "b", "-s", "198.18.0.1"}, args...))
	if s.Code != 0 || cl.Code != 0 {
		t.Fatalf("server %d %s%s client %d %s%s", s.Code, s.Stdout, s.Stderr, cl.Code, cl.Stdout, cl.Stderr)
	}
	want := [][5]string{{"custom", "1000", "1", "200", "390k"}}
	check(t, s.Stdout, want)
	check(t, cl.Stdout, want)
}

func TestSizeStr(t *testing.T) {
	for n, want := range map[int64]string{64: "64", 1536: "1.5k", 196608: "192k", 4 << 20: "4m", 6 << 20: "6m", 400000: "390k"} {
		if got := sizeStr(n, 31); got != want {
			t.Errorf("size_str(%d) = %q, want %q", n, got, want)
		}
	}
}
