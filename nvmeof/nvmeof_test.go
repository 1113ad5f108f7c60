package nvmeof_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/nvmeof"
	"github.com/goroce/goroce/qp"
)

const (
	subNQN = "nqn.2026-12.io.goroce:test"
	taddr  = "198.18.0.2:4420"
)

type env struct {
	a, b *qp.Device
	t    *nvmeof.Target
	mem  *nvmeof.Memory
	stop func()
}

func setup(t testing.TB, size int64, bs int, tweak func(*nvmeof.Target)) *env {
	t.Helper()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return setupOn(t, a, b, taddr, size, bs, tweak)
}

// setupOn serves a memory namespace on device b at addr; a is the host's
// device. Both are closed by the returned env's stop.
func setupOn(t testing.TB, a, b *qp.Device, addr string, size int64, bs int, tweak func(*nvmeof.Target)) *env {
	t.Helper()
	mem := nvmeof.NewMemory(size)
	tg := &nvmeof.Target{Subsystems: []*nvmeof.Subsystem{{NQN: subNQN,
		Namespaces: []*nvmeof.Namespace{{Backend: mem, Size: size, BlockSize: bs}}}}}
	if tweak != nil {
		tweak(tg)
	}
	if os.Getenv("NVMEOF_LOG") != "" {
		tg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if err := tg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l, err := tg.Listen(ctx, b, addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tg.Serve(ctx, l) }()
	e := &env{a: a, b: b, t: tg, mem: mem}
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			cancel()
			l.Close()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
			a.Close()
			b.Close()
		})
	}
	t.Cleanup(e.stop)
	return e
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestReadWriteMemoryPair(t *testing.T) {
	for _, bs := range []int{512, 4096} {
		e := setup(t, 8<<20, bs, nil)
		ctx := ctxT(t)
		c, err := nvmeof.Dial(ctx, e.a, taddr, subNQN, &nvmeof.HostOptions{Queues: 2, QueueDepth: 16})
		if err != nil {
			t.Fatal(err)
		}
		nss := c.Namespaces()
		if len(nss) != 1 || nss[0].Size() != 8<<20 || nss[0].BlockSize() != bs {
			t.Fatalf("namespaces: %+v", nss)
		}
		ns := nss[0]
		seed := uint64(time.Now().UnixNano())
		rng := rand.New(rand.NewPCG(seed, 1))
		data := make([]byte, 3<<20)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		off := int64(bs * 7)
		if _, err := ns.WriteAt(data, off); err != nil {
			t.Fatalf("seed %d: write: %v", seed, err)
		}
		got := make([]byte, len(data))
		if _, err := ns.ReadAt(got, off); err != nil {
			t.Fatalf("read: %v", err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("seed %d: read back differs", seed)
		}
		back := make([]byte, len(data))
		e.mem.ReadAt(back, off)
		if !bytes.Equal(back, data) {
			t.Fatalf("seed %d: target backend differs", seed)
		}
		if err := ns.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// Write Zeroes and deallocate read back as zeroes.
		if err := ns.WriteZeroes(ctx, uint64(off)/uint64(bs), 4); err != nil {
			t.Fatal(err)
		}
		if err := ns.Deallocate(ctx, uint64(off)/uint64(bs)+8, 2); err != nil {
			t.Fatal(err)
		}
		z := make([]byte, 10*bs)
		if _, err := ns.ReadAt(z, off); err != nil {
			t.Fatal(err)
		}
		for i := range z {
			zero := i < 4*bs || i >= 8*bs
			if zero && z[i] != 0 || !zero && z[i] != data[i] {
				t.Fatalf("byte %d after write zeroes/deallocate: %#x", i, z[i])
			}
		}
		// Out of range: the file target's CAP_EXCEEDED | DNR.
		_, err = ns.ReadAt(make([]byte, bs), ns.Size())
		var se *nvmeof.StatusError
		if !errors.As(err, &se) || se.Status != nvmeof.StatusCapExceeded|nvmeof.StatusDNR || !errors.Is(err, nvmeof.ErrStatus) {
			t.Fatalf("read beyond the end: %v", err)
		}
		if _, err := ns.ReadAt(make([]byte, 3), 0); !errors.Is(err, nvmeof.ErrUnaligned) {
			t.Fatalf("unaligned: %v", err)
		}
		c.Close()
		e.stop()
	}
}

func TestDiscover(t *testing.T) {
	e := setup(t, 1<<20, 512, nil)
	ents, err := nvmeof.Discover(ctxT(t), e.a, taddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 || ents[0].SubNQN != subNQN || ents[0].TrAddr != "198.18.0.2" || ents[0].TrSvcID != "4420" ||
		ents[0].SubType != 2 || ents[1].SubNQN != nvmeof.DiscoveryNQN {
		t.Fatalf("entries: %+v", ents)
	}
}

func TestUnknownNQN(t *testing.T) {
	e := setup(t, 1<<20, 512, nil)
	_, err := nvmeof.Dial(ctxT(t), e.a, taddr, "nqn.2026-12.io.goroce:nope", nil)
	var se *nvmeof.StatusError
	if !errors.As(err, &se) || se.Status != nvmeof.StatusConnectInvParam|nvmeof.StatusDNR || se.Result != 1<<16|256 {
		t.Fatalf("connect to an unknown NQN: %v", err)
	}
}

func TestHostNotAllowed(t *testing.T) {
	e := setup(t, 1<<20, 512, func(tg *nvmeof.Target) { tg.Subsystems[0].Hosts = []string{"nqn.x:allowed"} })
	_, err := nvmeof.Dial(ctxT(t), e.a, taddr, subNQN, &nvmeof.HostOptions{HostNQN: "nqn.x:other"})
	var se *nvmeof.StatusError
	if !errors.As(err, &se) || se.Status != nvmeof.StatusConnectInvHost|nvmeof.StatusDNR {
		t.Fatalf("connect from a host not allowed: %v", err)
	}
}

func TestBadQueueSizeRejected(t *testing.T) {
	e := setup(t, 1<<20, 512, nil)
	// An I/O queue deeper than MQES+1: REJ with NVME_RDMA_CM_INVALID_HSQSIZE.
	_, err := nvmeof.Dial(ctxT(t), e.a, taddr, subNQN, &nvmeof.HostOptions{QueueDepth: 4096})
	if err != nil {
		t.Fatalf("depth is clamped to CAP.MQES: %v", err)
	}
	ctx := ctxT(t)
	for _, tc := range []struct {
		pd  []byte
		sts uint16
	}{
		{nvmeof.CMRequest{QID: 0, HRQSize: 64, HSQSize: 63}.Encode(), nvmeof.CMInvalidHSQSize},
		{nvmeof.CMRequest{QID: 1, HRQSize: 512, HSQSize: 511}.Encode(), nvmeof.CMInvalidHSQSize},
		{nvmeof.CMRequest{RecFmt: 1, HRQSize: 32, HSQSize: 31}.Encode(), nvmeof.CMInvalidRecfmt},
		{nvmeof.CMRequest{QID: 1, HRQSize: 0, HSQSize: 31}.Encode(), nvmeof.CMInvalidHRQSize},
		// The CM always delivers the REQ's 56-byte area: an empty one reads
		// as hsqsize 0.
		{nil, nvmeof.CMInvalidHSQSize},
	} {
		_, err := cm.Dial(ctx, e.a, taddr, cm.Options{PrivateData: tc.pd})
		var rej *cm.RejectError
		if !errors.As(err, &rej) || nvmeof.DecodeCMReject(rej.PrivateData) != tc.sts {
			t.Errorf("REQ %x: %v, want REJ with sts %d", tc.pd, err, tc.sts)
		}
	}
}

func TestKeepAliveExpiry(t *testing.T) {
	e := setup(t, 1<<20, 512, nil)
	ctx := ctxT(t)
	// KATO 1 s and never a Keep Alive: the target disconnects the queues;
	// another host that sends them keeps its controller and its data.
	silent, err := nvmeof.Dial(ctx, e.a, taddr, subNQN, &nvmeof.HostOptions{KeepAlive: time.Second, KeepAliveInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	good, err := nvmeof.Dial(ctx, e.a, taddr, subNQN, &nvmeof.HostOptions{KeepAlive: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	select {
	case <-silent.Done():
	case <-ctx.Done():
		t.Fatal("the silent host was never disconnected")
	}
	if !errors.Is(silent.Err(), nvmeof.ErrClosed) {
		t.Fatalf("silent host: %v", silent.Err())
	}
	if got := e.t.Stats().KeepAliveExpired.Load(); got != 1 {
		t.Fatalf("keep-alive expiries %d, want 1", got)
	}
	ns := good.Namespaces()[0]
	buf := bytes.Repeat([]byte{0xa5}, 4096)
	if _, err := ns.WriteAt(buf, 0); err != nil {
		t.Fatalf("the other host: %v", err)
	}
	got := make([]byte, 4096)
	if _, err := ns.ReadAt(got, 0); err != nil || !bytes.Equal(got, buf) {
		t.Fatalf("the other host reads %v", err)
	}
}
