//go:build linux

package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/wire"
)

// introduceUDP has each end of a udp-backend raw pair send the other one
// frame, and read it, before the raw cells run. The udp backend sends UDP
// GSO datagrams only to peers it has heard from on the RoCE port (goroce
// UDP links: nic/udp's package comment); goroce's own cells hear their
// peer's ACKs and responses, but the raw cell's one-way stream never hears
// B, and would measure the backend without the offload goroce uses.
func introduceUDP(r *rawPair, backend string) error {
	if backend != qp.BackendUDP {
		return nil
	}
	for _, d := range []struct {
		from, to nic.Link
		t        *wire.Frame
	}{{r.b, r.a, &r.ba}, {r.a, r.b, &r.ab}} {
		f, err := buildFrames(*d.t, 1, 8)
		if err != nil {
			return err
		}
		if _, err := d.from.WriteBatch(f); err != nil {
			return err
		}
		pl, ok := poller(d.to)
		if !ok {
			return errors.New("the udp link cannot be polled")
		}
		bufs, sizes := [][]byte{make([]byte, d.to.MTU()+64)}, []int{0}
		for t0 := time.Now(); ; {
			n, err := pl.TryReadBatch(bufs, sizes)
			if err != nil {
				return err
			}
			if n > 0 {
				break
			}
			if time.Since(t0) > stallTime {
				return fmt.Errorf("udp: the introduction frame did not arrive in %v", stallTime)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}
