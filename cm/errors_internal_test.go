package cm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/mad"
)

// Errors of the entry points carry the operation and the address, one
// "cm: " prefix, and still match the sentinels and context errors.
func TestOpErrors(t *testing.T) {
	check := func(t *testing.T, err error, op, addr string, is ...error) *OpError {
		t.Helper()
		var oe *OpError
		if !errors.As(err, &oe) || oe.Op != op || oe.Addr != addr {
			t.Fatalf("%v: not an *OpError for %s %s", err, op, addr)
		}
		msg := err.Error()
		if want := "cm: " + op + " " + addr + ": "; !strings.HasPrefix(msg, want) || strings.Count(msg, "cm: ") != 1 {
			t.Fatalf("message %q: want one %q prefix", msg, want)
		}
		for _, target := range is {
			if !errors.Is(err, target) {
				t.Fatalf("%v does not match %v", err, target)
			}
		}
		return oe
	}
	t.Run("refused", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, a, b := setup(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l, err := Listen(ctx, b, addrB, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			_, err = Dial(ctx, a, "198.18.0.2:7175", Options{})
			if oe := check(t, err, "dial", "198.18.0.2:7175", ErrConnRefused, ErrRejected); oe.Timeout() {
				t.Fatal("a REJ is no timeout")
			}
			_, err = DialUD(ctx, a, "198.18.0.2:7175", Options{})
			check(t, err, "dial ud", "198.18.0.2:7175", ErrConnRefused)
			_, err = Listen(ctx, b, "198.18.0.2", Options{})
			check(t, err, "listen", "198.18.0.2")
		})
	})
	t.Run("accept", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, _, b := setup(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			l, err := Listen(context.Background(), b, addrB, Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.Accept(ctx)
			if oe := check(t, err, "accept", addrB, context.DeadlineExceeded); !oe.Timeout() {
				t.Fatal("Timeout() false after the deadline")
			}
			l.Close()
			_, err = l.Accept(context.Background())
			check(t, err, "accept", addrB, ErrClosed)
		})
	})
	// A host that never answers: Options.Timeout bounds Dial (without it,
	// 16 REQs 6.4 s apart).
	t.Run("timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
				return m.Name() == "REQ", false
			})
			l, err := Listen(context.Background(), b, addrB, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			start := time.Now()
			_, err = Dial(context.Background(), a, addrB, Options{Timeout: 10 * time.Second})
			if took := time.Since(start); took != 10*time.Second {
				t.Errorf("Dial returned after %v (fake clock), want Options.Timeout's 10 s", took)
			}
			t.Log(err)
			if oe := check(t, err, "dial", addrB, context.DeadlineExceeded); !oe.Timeout() {
				t.Fatal("Timeout() false")
			}
			if k := n.count("REQ"); k != 2 {
				t.Errorf("%d REQs in 10 s, want 2 (6.4 s apart)", k)
			}
		})
	})
	// An address nobody resolves fails before any REQ, within the device's
	// resolve timeout, not after the REQ's retries.
	t.Run("unreachable", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n, a, _ := setup(t, nil)
			start := time.Now()
			_, err := Dial(context.Background(), a, "198.18.0.9:7174", Options{})
			check(t, err, "dial", "198.18.0.9:7174")
			t.Log(err)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("Dial to an unresolvable address took %v (fake clock)", took)
			}
			if k := n.count("REQ"); k != 0 {
				t.Errorf("%d REQs to an unresolvable address", k)
			}
			_, err = DialUD(context.Background(), a, "198.18.0.9:7000", Options{})
			check(t, err, "dial ud", "198.18.0.9:7000")
			if k := n.count("SIDR_REQ"); k != 0 {
				t.Errorf("%d SIDR_REQs to an unresolvable address", k)
			}
		})
	})
}
