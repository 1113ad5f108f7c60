package qp

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func nextEventIn(t *testing.T, d *Device) AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ev, err := d.AsyncEvent(ctx)
	if err != nil {
		t.Fatalf("AsyncEvent: %v", err)
	}
	return ev
}

// TestAsyncEventQueueOverflow: past AsyncEventQueueLen undelivered events
// the device drops and counts; the next event handed out reports them.
func TestAsyncEventQueueOverflow(t *testing.T) {
	a, b, err := OpenMemoryPair(MemoryPairOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	const extra = 10
	a.mu.Lock()
	for i := range AsyncEventQueueLen + extra {
		a.raise(AsyncEvent{Type: EventPortActive, Port: i})
	}
	a.mu.Unlock()
	if n := a.DroppedAsyncEvents(); n != extra {
		t.Fatalf("DroppedAsyncEvents %d, want %d", n, extra)
	}
	ev := nextEventIn(t, a)
	if ev.Port != 0 || ev.Dropped != extra {
		t.Fatalf("first event %+v, want port 0 reporting %d dropped", ev, extra)
	}
	for i := 1; i < AsyncEventQueueLen; i++ {
		if ev := nextEventIn(t, a); ev.Port != i || ev.Dropped != 0 {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if ev, err := a.AsyncEvent(ctx); err == nil {
		t.Fatalf("an event after the queue drained: %+v", ev)
	}
}

// TestAsyncEventClosed: Close ends a blocked AsyncEvent with ErrClosed,
// after the events queued before it.
func TestAsyncEventClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, err := OpenMemoryPair(MemoryPairOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		a.raise(AsyncEvent{Type: EventPortErr, Port: 1})
		a.Close()
		if ev := nextEventIn(t, a); ev.Type != EventPortErr {
			t.Fatalf("event %+v, want the queued PORT_ERR", ev)
		}
		if _, err := a.AsyncEvent(context.Background()); !errors.Is(err, ErrClosed) {
			t.Fatalf("AsyncEvent after Close: %v, want ErrClosed", err)
		}
	})
}

// failingLink is a memory link whose receive path fails on demand.
