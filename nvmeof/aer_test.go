package nvmeof_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/nvmeof"
)

// TestResizeAsyncEvent: Target.Resize fires the namespace attribute notice
// as nvmet does (type notice, info 0, log page 04h) on the AER the Go host
// keeps outstanding; the host reads the changed namespace list (nsid 1),
// identifies the namespace again, and its Size follows; I/O beyond the old
// end then works, and beyond the new end gets LBA out of range. A second
// resize after the log was read fires a second notice. A controller that
// did not enable the notice (Set Features 0x0b) gets none, but the
// namespace is on its changed list.
func TestResizeAsyncEvent(t *testing.T) {
	const size = 4 << 20
	mem := nvmeof.NewMemory(16 << 20)
	e := setup(t, size, 512, func(tg *nvmeof.Target) {
		tg.Subsystems[0].Namespaces[0].Backend = mem
	})
	ctx := ctxT(t)
	events := make(chan nvmeof.AsyncEvent, 4)
	c, err := nvmeof.Dial(ctx, e.a, taddr, subNQN, &nvmeof.HostOptions{OnAsyncEvent: func(ev nvmeof.AsyncEvent) { events <- ev }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := c.Namespaces()[0]
	if ns.Size() != size {
		t.Fatalf("size %d", ns.Size())
	}
	beyond := make([]byte, 4096)
	if _, err := ns.WriteAt(beyond, size); !errors.Is(err, nvmeof.ErrStatus) {
		t.Fatalf("write beyond the end before the resize: %v", err)
	}
	// The host sends its first AER right after Dial; Resize may come
	// first (the event then waits for it, as nvmet's async_events).
	wait := func(want int64) {
		t.Helper()
		select {
		case ev := <-events:
			if !ev.NamespaceChanged() || ev.Type != 2 || ev.Info != 0 || ev.LogPage != 4 || !slices.Equal(ev.ChangedNS, []uint32{1}) {
				t.Fatalf("event %+v, want a namespace attribute notice for nsid 1", ev)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no asynchronous event after resizing to %d", want)
		}
		if ns.Size() != want {
			t.Fatalf("host's namespace size %d after the notice, want %d", ns.Size(), want)
		}
	}
	if err := e.t.Resize(subNQN, 1, 8<<20); err != nil {
		t.Fatal(err)
	}
	wait(8 << 20)
	for i := range beyond {
		beyond[i] = byte(i)
	}
	if _, err := ns.WriteAt(beyond, size); err != nil {
		t.Fatalf("write beyond the old end: %v", err)
	}
	got := make([]byte, len(beyond))
	if _, err := mem.ReadAt(got, size); err != nil || !slices.Equal(got, beyond) {
		t.Fatalf("backend after the write beyond the old end: %v", err)
	}
	if _, err := ns.WriteAt(beyond, 8<<20); !errors.Is(err, nvmeof.ErrStatus) {
		t.Fatalf("write beyond the new end: %v", err)
	}
	if err := e.t.Resize(subNQN, 1, 12<<20); err != nil {
		t.Fatal(err)
	}
	wait(12 << 20)

	// Bad resizes.
	for _, bad := range []struct {
		nqn  string
		nsid uint32
		size int64
	}{{"nqn.x:none", 1, 8 << 20}, {subNQN, 2, 8 << 20}, {subNQN, 1, 1000}, {subNQN, 1, 0}, {subNQN, 1, 32 << 20}} {
		if err := e.t.Resize(bad.nqn, bad.nsid, bad.size); err == nil {
			t.Errorf("Resize(%q, %d, %d) succeeded", bad.nqn, bad.nsid, bad.size)
		}
	}

	// A controller without the notice enabled: no event, but the
	// namespace on its changed list, and a second resize before the log
	// is read adds it once.
	raw := rawHost(t, ctx, e)
	if err := e.t.Resize(subNQN, 1, 10<<20); err != nil {
		t.Fatal(err)
	}
	wait(10 << 20) // the first host still gets its notice
	if err := e.t.Resize(subNQN, 1, 6<<20); err != nil {
		t.Fatal(err)
	}
	wait(6 << 20)
	page := make([]byte, 4096)
	var cmd nvmeof.Command
	cmd.SetHeader(nvmeof.AdminGetLogPage, 0, 0xffffffff)
	cmd.SetCDW(10, nvmeof.LogChangedNS|1023<<16)
	if _, err := raw.Admin(ctx, &cmd, page, true); err != nil {
		t.Fatal(err)
	}
	if n0, n1 := le32(page[0:]), le32(page[4:]); n0 != 1 || n1 != 0 {
		t.Fatalf("changed namespace list of the controller without notices: %d, %d; want 1 then 0", n0, n1)
	}
	if _, err := raw.Admin(ctx, &cmd, page, true); err != nil || le32(page) != 0 {
		t.Fatalf("changed namespace list read twice: %v, first entry %d (want cleared)", err, le32(page))
	}
}

// rawHost dials a controller and disables its asynchronous event
// notices again (Set Features 0x0b to 0): its AER stays outstanding.
func rawHost(t *testing.T, ctx context.Context, e *env) *nvmeof.Controller {
	t.Helper()
	c, err := nvmeof.Dial(ctx, e.a, taddr, subNQN, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var cmd nvmeof.Command
	cmd.SetHeader(nvmeof.AdminSetFeatures, 0, 0)
	cmd.SetCDW(10, nvmeof.FeatAsyncEvent)
	cmd.SetCDW(11, 0)
	if _, err := c.Admin(ctx, &cmd, nil, false); err != nil {
		t.Fatal(err)
	}
	return c
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
