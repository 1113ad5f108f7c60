package wire

// Opcode is the BTH OpCode byte: bits 7:5 select the transport (RC, UC, RD,
// UD, CNP), bits 4:0 the operation (IBTA 9.2, table 38; include/rdma/ib_pack.h).
type Opcode uint8

// Transport bases.
const (
	TransportRC  Opcode = 0x00
	TransportUC  Opcode = 0x20
	TransportRD  Opcode = 0x40
	TransportUD  Opcode = 0x60
	TransportCNP Opcode = 0x80
)

// Reliable connected.
const (
	RCSendFirst              Opcode = 0x00
	RCSendMiddle             Opcode = 0x01
	RCSendLast               Opcode = 0x02
	RCSendLastWithImmediate  Opcode = 0x03
	RCSendOnly               Opcode = 0x04
	RCSendOnlyWithImmediate  Opcode = 0x05
	RCRDMAWriteFirst         Opcode = 0x06
	RCRDMAWriteMiddle        Opcode = 0x07
	RCRDMAWriteLast          Opcode = 0x08
	RCRDMAWriteLastWithImm   Opcode = 0x09
	RCRDMAWriteOnly          Opcode = 0x0A
	RCRDMAWriteOnlyWithImm   Opcode = 0x0B
	RCRDMAReadRequest        Opcode = 0x0C
	RCRDMAReadResponseFirst  Opcode = 0x0D
	RCRDMAReadResponseMiddle Opcode = 0x0E
	RCRDMAReadResponseLast   Opcode = 0x0F
	RCRDMAReadResponseOnly   Opcode = 0x10
	RCAcknowledge            Opcode = 0x11
	RCAtomicAcknowledge      Opcode = 0x12
	RCCompareSwap            Opcode = 0x13
	RCFetchAdd               Opcode = 0x14
	RCSendLastWithInvalidate Opcode = 0x16
	RCSendOnlyWithInvalidate Opcode = 0x17
	// IBTA 1.5 memory placement extensions (Linux rxe 6.2+).
	RCFlush       Opcode = 0x1C
	RCAtomicWrite Opcode = 0x1D
)

// Unreliable connected.
const (
	UCSendFirst             Opcode = 0x20
	UCSendMiddle            Opcode = 0x21
	UCSendLast              Opcode = 0x22
	UCSendLastWithImmediate Opcode = 0x23
	UCSendOnly              Opcode = 0x24
	UCSendOnlyWithImmediate Opcode = 0x25
	UCRDMAWriteFirst        Opcode = 0x26
	UCRDMAWriteMiddle       Opcode = 0x27
	UCRDMAWriteLast         Opcode = 0x28
	UCRDMAWriteLastWithImm  Opcode = 0x29
	UCRDMAWriteOnly         Opcode = 0x2A
	UCRDMAWriteOnlyWithImm  Opcode = 0x2B
)

// Unreliable datagram and congestion notification.
const (
	UDSendOnly              Opcode = 0x64
	UDSendOnlyWithImmediate Opcode = 0x65
	CNP                     Opcode = 0x81
)
