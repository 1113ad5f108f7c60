package rcopycmd

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

// TestRcopyMem copies a 4 MiB file between two goroce rcopy runs over the
// in-memory link and compares the SHA-256 of both files.
func TestRcopyMem(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := make([]byte, 4<<20+5)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	var sout, serr, cout, cerr bytes.Buffer
	listening := make(chan net.Addr, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	var scode int
	go func() {
		defer wg.Done()
		scode = Run(tool.Env{Ctx: sctx, Stdout: &sout, Stderr: &serr, Open: open,
			Listening: func(a net.Addr) { listening <- a }}, []string{"--dev", "a", "-p", "7427"})
	}()
	select {
	case <-listening:
	case <-ctx.Done():
		t.Fatal("server never listened")
	}
	code := Run(tool.Env{Ctx: ctx, Stdout: &cout, Stderr: &cerr, Open: open},
		[]string{"--dev", "b", src, "198.18.0.1:" + dst})
	stop()
	wg.Wait()
	if code != 0 || scode != 0 {
		t.Fatalf("client %d: %s%s\nserver %d: %s%s", code, cout.String(), cerr.String(), scode, sout.String(), serr.String())
	}
	got, err := os.ReadFile(dst)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("destination: %d bytes, %v; SHA-256 differs", len(got), err)
	}
	if !strings.HasPrefix(cout.String(), "opening...transferring...closing...done\n4194309 bytes in ") ||
		!strings.HasPrefix(sout.String(), "waiting for connection...client: 198.18.0.2\nopening: "+dst+", transferring...4194309 bytes...closing...done\nwaiting for connection...") {
		t.Errorf("client:\n%s\nserver:\n%s", cout.String(), sout.String())
	}
}
