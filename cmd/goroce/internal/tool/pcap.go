package tool

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/goroce/goroce/qp"
)

// capture is a run's --pcap FILE: created when the run opens its first
// device, shared by every device the run opens, closed when the run's
// context is cancelled (RunContext).
type capture struct {
	path string
	mu   sync.Mutex
	f    *os.File
	pw   *qp.PcapWriter
}

type captureKey struct{}

// attach records dev's frames into the capture, creating the file first.
func (c *capture) attach(dev *qp.Device) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pw == nil {
		f, err := os.Create(c.path)
		if err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
		pw, err := qp.NewPcapWriter(f)
		if err != nil {
			f.Close()
			return fmt.Errorf("--pcap %s: %w", c.path, err)
		}
		c.f, c.pw = f, pw
	}
	dev.SetPcap(c.pw)
	return nil
}

// close flushes and closes the file, if the run created it.
func (c *capture) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pw == nil {
		return nil
	}
	err := c.pw.Close()
	if err2 := c.f.Close(); err == nil {
		err = err2
	}
	c.pw, c.f = nil, nil
	if err != nil {
		return fmt.Errorf("--pcap %s: %w", c.path, err)
	}
	return nil
}

// Open opens the device a tool run names (Env.Open) and, when the run has
// --pcap FILE (its context comes from RunContext), records the device's
// frames into FILE. Every subcommand that opens a device opens it here.
func Open(ctx context.Context, env Env, name string) (*qp.Device, error) {
	dev, err := env.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	if c, ok := ctx.Value(captureKey{}).(*capture); ok {
		if err := c.attach(dev); err != nil {
			dev.Close()
			return nil, err
		}
	}
	return dev, nil
}
