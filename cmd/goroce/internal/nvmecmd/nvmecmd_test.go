package nvmecmd_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/nvmecmd"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

const nqn = "nqn.2026-12.io.goroce:cmd"

// pair runs `goroce nvmet targetArgs` on device "b" (198.18.0.2) and, once
// it listens, `goroce nvme hostArgs` on device "a"; then stops the target
// as SIGINT would and returns both outputs.
func pair(t *testing.T, targetArgs, hostArgs []string) (tOut string, tCode int, hOut, hErr string, hCode int) {
	t.Helper()
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 3, QueueLen: 1 << 12})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tctx, stop := context.WithCancel(ctx)
	var tout, terr bytes.Buffer
	listening := make(chan struct{})
	done := make(chan int, 1)
	go func() {
		done <- nvmecmd.RunTarget(tool.Env{Ctx: tctx, Stdout: &tout, Stderr: &terr, Open: open,
			Listening: func(net.Addr) { close(listening) }}, targetArgs)
	}()
	select {
	case <-listening:
	case c := <-done:
		t.Fatalf("nvmet exited %d: %s", c, terr.String())
	}
	var hout, herr bytes.Buffer
	hCode = nvmecmd.RunHost(tool.Env{Ctx: ctx, Stdout: &hout, Stderr: &herr, Open: open}, hostArgs)
	stop()
	tCode = <-done
	if tCode != 0 {
		t.Errorf("nvmet: exit %d: %s", tCode, terr.String())
	}
	return tout.String(), tCode, hout.String(), herr.String(), hCode
}

func TestWriteVerifyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	_, _, out, errs, code := pair(t,
		[]string{"-d", "b", "-a", "198.18.0.2", "--nqn", nqn, "--file", path, "--size", "8M"},
		[]string{"io", "-d", "a", "-a", "198.18.0.2", "--nqn", nqn, "--write-verify", "2M", "--offset", "1M",
			"--bs", "64k", "--qd", "8", "--queues", "2", "--seed", "7"})
	if code != 0 {
		t.Fatalf("nvme io: exit %d: %s %s", code, out, errs)
	}
	m := regexp.MustCompile(`^sha256=([0-9a-f]{64}) bytes=2097152\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output %q", out)
	}
	disk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(disk[1<<20:3<<20])); got != m[1] {
		t.Fatalf("backing file region sha256 %s, nvme io printed %s", got, m[1])
	}
}

func TestDiscover(t *testing.T) {
	_, _, out, errs, code := pair(t,
		[]string{"-d", "b", "-a", "198.18.0.2", "--nqn", nqn, "--ram", "1M"},
		[]string{"discover", "-d", "a", "-a", "198.18.0.2"})
	if code != 0 || !strings.Contains(out, "subnqn:  "+nqn+"\n") || !strings.Contains(out, "traddr:  198.18.0.2\n") {
		t.Fatalf("discover: exit %d: %s %s", code, out, errs)
	}
}

func TestBench(t *testing.T) {
	_, _, out, errs, code := pair(t,
		[]string{"-d", "b", "-a", "198.18.0.2", "--nqn", nqn, "--ram", "4M"},
		[]string{"bench", "-d", "a", "-a", "198.18.0.2", "--nqn", nqn, "--rw", "randwrite", "--bs", "4k", "--qd", "4", "--time", "300ms"})
	if code != 0 || !regexp.MustCompile(`write: \(bs=4096, qd=4\) IOPS=\d+, BW=`).MatchString(out) ||
		!strings.Contains(out, "clat percentiles (usec): ") {
		t.Fatalf("bench: exit %d: %s %s", code, out, errs)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "64k": 64 << 10, "64M": 64 << 20, "1G": 1 << 30, "2MiB": 2 << 20} {
		if got, err := nvmecmd.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v", in, got, err)
		}
	}
	if _, err := nvmecmd.ParseSize("x"); err == nil {
		t.Error("ParseSize(x) succeeded")
	}
}
