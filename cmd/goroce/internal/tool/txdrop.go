package tool

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/goroce/goroce/nic"
)

// GOROCE_TX_DROP=P makes a tool drop each frame it transmits with
// probability P (0 < P < 1), from a generator seeded with
// GOROCE_TX_DROP_SEED (default 1): loss on goroce's side of a link, for
// the interop matrix, whose only other loss is netem in the peer's VM. The
// dropped frames count as sent, as a wire loses them; RC recovery
// (go-back-N after a NAK or the ACK timeout) must make up for them. At exit
// the tool reports on stderr how many it dropped.

// TxDropFromEnv reads GOROCE_TX_DROP and GOROCE_TX_DROP_SEED; p is 0 when
// the variable is unset.
func TxDropFromEnv() (p float64, seed uint64, err error) {
	v := os.Getenv("GOROCE_TX_DROP")
	if v == "" {
		return 0, 0, nil
	}
	p, err = strconv.ParseFloat(v, 64)
	if err != nil || p < 0 || p >= 1 {
		return 0, 0, fmt.Errorf("GOROCE_TX_DROP=%q: want a probability in [0, 1)", v)
	}
	seed = 1
	if s := os.Getenv("GOROCE_TX_DROP_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 0, 64); err != nil {
			return 0, 0, fmt.Errorf("GOROCE_TX_DROP_SEED=%q: %w", s, err)
		}
	}
	return p, seed, nil
}

// WrapTxDrop wraps l in a nic.DropLink; the result has TryReadBatch exactly
// when l has it. With a report writer, the count goes there at Close.
func WrapTxDrop(l nic.Link, p float64, seed uint64, report io.Writer) (nic.Link, *nic.DropLink) {
	var onClose func(frames, dropped uint64)
	if report != nil {
		onClose = func(frames, dropped uint64) {
			fmt.Fprintf(report, "goroce: GOROCE_TX_DROP dropped %d of %d transmitted frames\n", dropped, frames)
		}
	}
	return nic.WithDrops(l, p, seed, 0x676f726f6365, onClose)
}
