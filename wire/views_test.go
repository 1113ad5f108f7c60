package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func ones(n int) []byte { return bytes.Repeat([]byte{0xFF}, n) }

// TestViewSetters: for each header, the setters applied field by field give
// the same bytes as Encode, getters read back the values, and setters on an
// all-ones buffer leave the neighbouring (reserved) bits alone.
func TestViewSetters(t *testing.T) {
	r := rand.New(rand.NewPCG(testSeed(t), 11))
	for range 200 {
		f := randFrame(r, RCSendOnly, false, false)
		bf := f.BTH
		bf.PadCnt = uint8(r.IntN(4))
		bf.TVer = uint8(r.IntN(16))

		enc := BTH(make([]byte, BTHLen))
		enc.Encode(&bf)
		set := func(b BTH) {
			b.SetOpcode(bf.Opcode)
			b.SetSE(bf.SE)
			b.SetMigReq(bf.M)
			b.SetPadCnt(bf.PadCnt)
			b.SetTVer(bf.TVer)
			b.SetPKey(bf.PKey)
			b.SetFECN(bf.FECN)
			b.SetBECN(bf.BECN)
			b.SetDestQP(bf.DestQP)
			b.SetAckReq(bf.AckReq)
			b.SetPSN(bf.PSN)
		}
		zero := BTH(make([]byte, BTHLen))
		set(zero)
		if !bytes.Equal(zero, enc) || enc.Fields() != bf || !enc.IsValid() || BTH(enc[:11]).IsValid() {
			t.Fatalf("BTH setters % x vs Encode % x", zero, enc)
		}
		full := BTH(ones(BTHLen))
		set(full)
		if full.Fields() != bf || full.Resv6() != 0x3F || full.Resv7() != 0x7F {
			t.Fatalf("BTH setters disturbed neighbours: %+v", full.Fields())
		}
		if enc.Resv6() != 0 || enc.Resv7() != 0 {
			t.Fatal("Encode wrote reserved bits")
		}

		reth := RETH(ones(RETHLen))
		reth.SetVA(f.RETH.VA)
		reth.SetRKey(f.RETH.RKey)
		reth.SetDMALen(f.RETH.DMALen)
		if reth.Fields() != f.RETH || !reth.IsValid() || RETH(reth[:15]).IsValid() {
			t.Fatal("RETH")
		}
		aeth := AETH(ones(AETHLen))
		aeth.SetSyndrome(f.AETH.Syndrome)
		aeth.SetMSN(f.AETH.MSN)
		if aeth.Fields() != f.AETH || !aeth.IsValid() || AETH(aeth[:3]).IsValid() {
			t.Fatal("AETH")
		}
		at := AtomicETH(ones(AtomicETHLen))
		at.SetVA(f.AtomicETH.VA)
		at.SetRKey(f.AtomicETH.RKey)
		at.SetSwapAdd(f.AtomicETH.SwapAdd)
		at.SetCompare(f.AtomicETH.Compare)
		at2 := AtomicETH(make([]byte, AtomicETHLen))
		at2.Encode(&f.AtomicETH)
		if at.Fields() != f.AtomicETH || !bytes.Equal(at, at2) || !at.IsValid() || AtomicETH(at[:27]).IsValid() {
			t.Fatal("AtomicETH")
		}
		ack := AtomicAckETH(ones(AtomicAckETHLen))
		ack.Encode(f.AtomicAckETH)
		if ack.OrigValue() != f.AtomicAckETH || !ack.IsValid() || AtomicAckETH(ack[:7]).IsValid() {
			t.Fatal("AtomicAckETH")
		}
		deth := DETH(ones(DETHLen))
		deth.SetQKey(f.DETH.QKey)
		deth.SetSrcQP(f.DETH.SrcQP)
		if deth.Fields() != f.DETH || deth[4] != 0xFF || !deth.IsValid() || DETH(deth[:7]).IsValid() {
			t.Fatal("DETH")
		}
		deth.Encode(&f.DETH)
		if deth[4] != 0 {
			t.Fatal("DETH.Encode left the reserved byte")
		}
		imm := ImmDt(make([]byte, 4))
		imm.SetImm(f.ImmDt)
		ieth := IETH(make([]byte, 4))
		ieth.SetRKey(f.IETH)
		if imm.Imm() != f.ImmDt || ieth.RKey() != f.IETH || !imm.IsValid() || !ieth.IsValid() || ImmDt(imm[:3]).IsValid() || IETH(ieth[:3]).IsValid() {
			t.Fatal("ImmDt/IETH")
		}
		cnp := CNPPad(ones(CNPPadLen))
		cnp.Encode()
		if !bytes.Equal(cnp, make([]byte, CNPPadLen)) || !cnp.IsValid() || CNPPad(cnp[:15]).IsValid() {
			t.Fatal("CNPPad")
		}

		// UDP.
		uf := UDPFields{SrcPort: uint16(r.Uint32()), DstPort: uint16(r.Uint32()), Length: uint16(r.Uint32()), Checksum: uint16(r.Uint32())}
		u := UDP(make([]byte, UDPLen))
		u.Encode(&uf)
		if u.SrcPort() != uf.SrcPort || u.DstPort() != uf.DstPort || u.Length() != uf.Length || u.Checksum() != uf.Checksum || !u.IsValid() || UDP(u[:7]).IsValid() {
			t.Fatal("UDP")
		}

		// IPv4.
		ip := IPv4(make([]byte, IPv4Len))
		ip.Encode(&IPv4Fields{TOS: f.TrafficClass, TotalLen: 100, ID: f.IPID, Flags: IPv4FlagDF, TTL: f.HopLimit, Protocol: ProtocolUDP, Src: v4a, Dst: v4b})
		ip2 := IPv4(make([]byte, IPv4Len))
		ip2[0] = 0x45
		ip2.SetTOS(f.TrafficClass)
		ip2.SetTotalLen(100)
		ip2.SetID(f.IPID)
		ip2.SetFlags(IPv4FlagDF)
		ip2.SetTTL(f.HopLimit)
		ip2.SetProtocol(ProtocolUDP)
		ip2.SetSrc(v4a)
		ip2.SetDst(v4b)
		if !bytes.Equal(ip, ip2) || ip.Version() != 4 || ip.ECN() != f.TrafficClass&3 || !ip.IsValid() || IPv4(ip[:19]).IsValid() {
			t.Fatal("IPv4")
		}
		ip.SetChecksum(ip.CalculateChecksum())
		if !ip.ChecksumValid() {
			t.Fatal("IPv4 checksum")
		}
		ip[0] = 0x46
		if ip.IsValid() { // IHL 6 needs 24 bytes
			t.Fatal("IPv4 IHL 6 on 20 bytes valid")
		}

		// IPv6: traffic class and flow label setters do not disturb each other.
		v6 := IPv6(make([]byte, IPv6Len))
		v6.Encode(&IPv6Fields{TrafficClass: 0, FlowLabel: 0, HopLimit: 1, Src: v6a, Dst: v6b})
		v6.SetTrafficClass(f.TrafficClass)
		v6.SetFlowLabel(f.FlowLabel | 0xFFF00000)
		v6.SetPayloadLen(77)
		v6.SetNextHeader(ProtocolUDP)
		v6.SetHopLimit(f.HopLimit)
		if v6.Version() != 6 || v6.TrafficClass() != f.TrafficClass || v6.FlowLabel() != f.FlowLabel&0xFFFFF ||
			v6.ECN() != f.TrafficClass&3 || v6.PayloadLen() != 77 || v6.HopLimit() != f.HopLimit ||
			v6.Src() != v6a || v6.Dst() != v6b || !v6.IsValid() || IPv6(v6[:39]).IsValid() {
			t.Fatal("IPv6")
		}
		v6.SetSrc(v6b)
		v6.SetDst(v6a)
		if v6.Src() != v6b || v6.Dst() != v6a {
			t.Fatal("IPv6 addresses")
		}
	}
}

func TestEthernetView(t *testing.T) {
	dst, src := [6]byte{1, 2, 3, 4, 5, 6}, [6]byte{7, 8, 9, 10, 11, 12}
	e := Ethernet(make([]byte, 18))
	e.Encode(&EthernetFields{Dst: dst, Src: src, Type: EtherTypeIPv6})
	if e.Dst() != dst || e.Src() != src || e.EtherType() != EtherTypeIPv6 || e.InnerType() != EtherTypeIPv6 || e.Len() != 14 || !e.IsValid() {
		t.Fatal("untagged")
	}
	if _, ok := e.VLAN(); ok {
		t.Fatal("untagged has VLAN")
	}
	e.Encode(&EthernetFields{Dst: dst, Src: src, HasVLAN: true, VLAN: 0x6064, Type: EtherTypeIPv4})
	if tci, ok := e.VLAN(); !ok || tci != 0x6064 || e.EtherType() != EtherTypeVLAN || e.InnerType() != EtherTypeIPv4 || e.Len() != 18 || !e.IsValid() {
		t.Fatal("tagged")
	}
	if e[:16].IsValid() || e[:13].IsValid() {
		t.Fatal("short tagged header valid")
	}
	e.SetDst(src)
	e.SetSrc(dst)
	e.SetEtherType(EtherTypeIPv4)
	if e.Dst() != src || e.Src() != dst || e.InnerType() != EtherTypeIPv4 {
		t.Fatal("setters")
	}
}

func TestStrings(t *testing.T) {
	if PosFirst.String() != "first" || PosOnly.String() != "only" || PosNone.String() != "none" || Position(9).String() != "Position(9)" {
		t.Error("Position")
	}
	if HeaderSet(0).String() != "none" || (HasAETH|HasAtomicAckETH).String() != "AETH+AtomicAckETH" {
		t.Error("HeaderSet")
	}
	if PosMiddle.String() != "middle" || PosLast.String() != "last" || !SyndromeACKNoCredit.IsACK() || NAKSyndrome(0).IsACK() {
		t.Error("Position/IsACK")
	}
	if NAKCode(9).String() != "NAK_RESERVED_9" || SyndromeKind(7).String() != "SyndromeKind(7)" {
		t.Error("NAKCode/SyndromeKind")
	}
}
