package gopacketroce_test

import (
	"fmt"
	"os"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/gopacketroce"
)

// Decoding a capture with a DecodingLayerParser: no allocation per packet.
// The Layers value links the extension headers to the BTH, so each one
// knows what follows it.
func Example_decodingLayerParser() {
	f, err := os.Open("../testdata/rxe/atomic_fadd.pcap")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		panic(err)
	}

	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		udp     layers.UDP
		roce    gopacketroce.Layers
		payload gopacket.Payload
	)
	dl := append([]gopacket.DecodingLayer{&eth, &ip4, &udp, &payload}, roce.DecodingLayers()...)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, dl...)
	parser.IgnoreUnsupported = true // the TCP exchange of the tools
	decoded := make([]gopacket.LayerType, 0, 8)

	n := 0
	var shown [256]bool // print the first packet of each opcode
	for {
		data, _, err := r.ZeroCopyReadPacketData()
		if err != nil {
			break
		}
		if parser.DecodeLayers(data, &decoded) != nil || len(decoded) < 4 || decoded[3] != gopacketroce.LayerTypeBTH {
			continue
		}
		n++
		bth := &roce.BTH
		if shown[bth.Opcode()] {
			continue
		}
		shown[bth.Opcode()] = true
		ok, _ := gopacketroce.VerifyICRCLayer(&ip4)
		fmt.Printf("%v dqpn %#x psn %d layers %v icrc ok %v\n", bth.Opcode(), bth.DestQP(), bth.PSN(), decoded[3:], ok)
		switch bth.Opcode() {
		case 0x14: // FETCH_ADD
			fmt.Printf("  add %d to %#x\n", roce.AtomicETH.SwapAdd(), roce.AtomicETH.VA())
		case 0x12: // ATOMIC_ACKNOWLEDGE
			fmt.Printf("  %v, original value %#x\n", roce.AETH.Syndrome(), roce.AtomicAckETH.OrigValue())
		}
	}
	fmt.Println(n, "RoCEv2 packets")
	// Output:
	// RC_FETCH_ADD dqpn 0x19 psn 12844133 layers [BTH AtomicETH] icrc ok true
	//   add 1 to 0x5578de60b000
	// RC_ATOMIC_ACKNOWLEDGE dqpn 0x19 psn 12844133 layers [BTH AETH AtomicAckETH] icrc ok true
	//   ACK(credit=31), original value 0xe4434509f6839316
	// 200 RoCEv2 packets
}

// Any gopacket program decodes RoCEv2 once the package is imported: UDP port
// 4791 leads to the BTH, the extension headers and the payload.
func Example_newPacket() {
	f, err := os.Open("../testdata/rxe/rc_pingpong_small.pcap")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		panic(err)
	}
	src := gopacket.NewPacketSource(r, r.LinkType())
	src.NoCopy = true
	for pkt := range src.Packets() {
		bth, _ := pkt.Layer(gopacketroce.LayerTypeBTH).(*gopacketroce.BTH)
		if bth == nil || bth.Opcode() != 0x11 { // the first ACKNOWLEDGE
			continue
		}
		for _, l := range pkt.Layers()[3:] {
			fmt.Println(gopacket.LayerString(l))
		}
		ok, present := gopacketroce.VerifyICRC(pkt)
		fmt.Println("ICRC ok:", ok, "present:", present)
		break
	}
	// Output:
	// BTH	BTH{Opcode=RC_ACKNOWLEDGE SE=false M=false PadCnt=0 TVer=0 PKey=0xffff FECN=false BECN=false DestQP=0x000012 AckReq=false PSN=13069050 ICRC=0x0f92a985}
	// AETH	AETH{Syndrome=ACK(credit=31) MSN=1}
	// ICRC ok: true present: true
}
