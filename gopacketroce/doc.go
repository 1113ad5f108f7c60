// Package gopacketroce teaches gopacket (github.com/gopacket/gopacket) to
// decode RoCEv2. It is for tools and tests only: goroce's data path uses
// package wire directly and never imports gopacket.
//
// # Model
//
// Importing the package registers one gopacket LayerType per InfiniBand
// transport header, in gopacket's application range:
//
//	1791 BTH           Base Transport Header (+ pad and ICRC trailer, see below)
//	1792 RETH          RDMA Extended Transport Header
//	1793 AETH          ACK Extended Transport Header
//	1794 AtomicETH     Atomic Extended Transport Header
//	1795 AtomicAckETH  Atomic ACK Extended Transport Header
//	1796 ImmDt         Immediate Data
//	1797 IETH          Invalidate Extended Transport Header
//	1798 DETH          Datagram Extended Transport Header
//	1799 CNP           the 16 reserved bytes of a Congestion Notification Packet
//	1800 MAD           a management datagram on QP 1 (IB CM messages, package mad)
//	1801 FETH          FLUSH Extended Transport Header (IBTA 1.5; before the RETH)
//
// and maps UDP port 4791 to LayerTypeBTH (layers.RegisterUDPPortLayerType), so
// that any gopacket program decodes Ethernet → IP → UDP → BTH → the extension
// headers the opcode carries (in IBTA order: DETH, FETH, RETH, AtomicETH, AETH,
// AtomicAckETH, ImmDt, IETH, CNP) → gopacket.Payload, except that the
// payload of a UD SEND ONLY to QP 1 is a MAD layer (its CM message decoded
// by package mad: REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR).
//
// Each layer embeds layers.BaseLayer and the matching wire view (wire.BTH,
// wire.RETH, ...), so the getters of package wire (Opcode, PSN, DestQP, VA,
// RKey, Syndrome, ...) are the layer's getters, and decoding copies nothing:
// the views point into the packet's bytes. Validation is wire.ParseBTH's
// (TVer, known opcode, header lengths, pad rules, no payload where none is
// allowed); a failure is a wire sentinel error (errors.Is with
// wire.ErrTruncated, wire.ErrUnknownOpcode, ...), which gopacket reports as a
// DecodeFailure layer.
//
// # Pad and ICRC
//
// The 4-byte ICRC and the BTH PadCnt pad bytes are a trailer of the BTH
// layer, not a layer of their own: BTH.Trailer holds the 4 ICRC bytes,
// BTH.ICRC() their value (least-significant byte first on the wire),
// BTH.PadBytes the pad. BTH.Payload, and so the payload of the last extension
// header, stops before the pad, so the gopacket.Payload layer is exactly the
// message bytes. The ICRC covers the IP header, which the BTH layer does not
// see: VerifyICRC(packet) and VerifyICRCLayer(networkLayer) check it with
// wire.VerifyICRC over the network layer's bytes. A packet whose capture is
// truncated (Metadata().Truncated) has no trustworthy trailer: VerifyICRC
// reports it as not present.
//
// # DecodingLayerParser
//
// An extension header does not know by itself what follows it (RETH is
// followed by ImmDt in RDMA_WRITE_ONLY_WITH_IMMEDIATE and by the payload in
// RDMA_WRITE_ONLY): its NextLayerType asks the BTH it belongs to. The packet
// decoder links them; for gopacket.DecodingLayerParser use a Layers value,
// whose DecodingLayers method links its members and returns them. Decoding
// with it does not allocate (see the example).
//
// # Serialization
//
// Every layer is a gopacket.SerializableLayer that writes its view's bytes.
// With SerializeOptions.FixLengths the BTH layer sets PadCnt and appends pad
// and a zero ICRC after the payload; it cannot compute the ICRC because the
// IP header is written after it, so call FixICRC on the finished frame.
package gopacketroce
