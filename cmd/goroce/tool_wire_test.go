package main

import (
	"bytes"
	"sync"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/perftestcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/pingpongcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/wire"
)

// lockedBuffer is a bytes.Buffer safe for the two link directions' taps.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// capturedPackets parses every frame the in-memory link carried.
func capturedPackets(t *testing.T, l *lockedBuffer) []wire.Packet {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	recs, err := pcapfile.ReadAll(bytes.NewReader(l.b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var pkts []wire.Packet
	for _, r := range recs {
		var p wire.Packet
		if err := wire.Parse(r.Data, &p); err != nil {
			t.Fatalf("captured frame does not parse: %v", err)
		}
		pkts = append(pkts, p)
	}
	return pkts
}

// TestToolsWireProfile checks on the wire the attributes the tools take
// from rc_pingpong and perftest (PROTOCOL.md §4, §6): rc_pingpong's hop
// limit 1 (IP TTL 1) and 4096-byte SENDs as FIRST/MIDDLE/MIDDLE/LAST at MTU
// 1024; perftest's hop limit 0xFF, write_bw's RDMA WRITE ONLY to addresses
// cycling through the peer's cycle buffer in cache-line steps, atomic_bw's
// FETCH_ADD of 1 cycling through 64 slots as in atomic_fadd.pcap.
func TestToolsWireProfile(t *testing.T) {
	run := func(t *testing.T, tool func(tool.Env, []string) int, args []string) ([]wire.Packet, tooltest.Outcome, tooltest.Outcome) {
		var tap lockedBuffer
		open := tooltest.MemDevices(t, nic.MemConfig{Seed: 2, Tap: &tap})
		s, c := tooltest.RunPair(t, tool, open, args, args)
		if s.Code != 0 || c.Code != 0 {
			t.Fatalf("exit codes server %d client %d", s.Code, c.Code)
		}
		return capturedPackets(t, &tap), s, c
	}
	t.Run("pingpong", func(t *testing.T) {
		pkts, _, _ := run(t, pingpongcmd.Run, []string{"-g", "1", "-n", "10"})
		// Counted once per sender and PSN: on a loaded machine an ACK can
		// come after the 67 ms timeout, and the retransmission is legal.
		counts := map[wire.Opcode]int{}
		type key struct {
			src string
			psn wire.PSN
			op  wire.Opcode
		}
		seen := map[key]bool{}
		for _, p := range pkts {
			if p.IPv4 == nil || p.IPv4.TTL() != 1 || p.UDP.DstPort() != 4791 {
				t.Fatalf("packet %v: TTL or port", p.Opcode())
			}
			k := key{p.IPv4.Src().String(), p.BTH.PSN(), p.Opcode()}
			if !seen[k] {
				seen[k] = true
				counts[p.Opcode()]++
			}
		}
		if counts[wire.RCSendFirst] != 20 || counts[wire.RCSendMiddle] != 40 || counts[wire.RCSendLast] != 20 || counts[wire.RCAcknowledge] == 0 {
			t.Errorf("opcodes %v", counts)
		}
	})
	t.Run("write_bw", func(t *testing.T) {
		wbw := func(env tool.Env, args []string) int { return perftestcmd.Run(env, perftest.WriteBW, args) }
		pkts, s, _ := run(t, wbw, []string{"-s", "100", "-n", "50"})
		var vas []uint64
		seen := map[wire.PSN]bool{}
		for _, p := range pkts {
			if p.IPv4.TTL() != 0xFF {
				t.Fatalf("TTL %d", p.IPv4.TTL())
			}
			if p.Opcode() == wire.RCRDMAWriteOnly && !seen[p.BTH.PSN()] {
				seen[p.BTH.PSN()] = true
				vas = append(vas, p.RETH.VA())
			}
		}
		if len(vas) != 50 {
			t.Fatalf("%d WRITE ONLY packets", len(vas))
		}
		// 100 bytes round up to 128 (two cache lines); 4096/128 = 32 slots.
		base := vas[0]
		for k, va := range vas {
			if want := base + uint64(k%32)*128; va != want {
				t.Fatalf("WRITE %d to %#x, want %#x", k, va, want)
			}
		}
		if !bytes.Contains([]byte(s.Stdout), []byte(" 100        50   ")) {
			t.Errorf("server table:\n%s", s.Stdout)
		}
	})
	t.Run("atomic_bw", func(t *testing.T) {
		abw := func(env tool.Env, args []string) int { return perftestcmd.Run(env, perftest.AtomicBW, args) }
		pkts, _, _ := run(t, abw, []string{"-n", "70"})
		var vas []uint64
		seen := map[wire.PSN]bool{}
		for _, p := range pkts {
			if p.Opcode() == wire.RCFetchAdd && !seen[p.BTH.PSN()] {
				seen[p.BTH.PSN()] = true
				if p.AtomicETH.SwapAdd() != 1 {
					t.Fatalf("add %d", p.AtomicETH.SwapAdd())
				}
				vas = append(vas, p.AtomicETH.VA())
			}
		}
		if len(vas) != 70 || vas[64] != vas[0] || vas[1] != vas[0]+64 || vas[63] != vas[0]+63*64 {
			t.Fatalf("FETCH_ADD addresses %#x", vas)
		}
	})
}
