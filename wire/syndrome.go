package wire

import (
	"strconv"
	"time"
)

// Syndrome is the AETH syndrome byte (IBTA 9.3.5, table 44):
//
//	bit 7     reserved, 0
//	bits 6:5  00 ACK, 01 RNR NAK, 10 reserved, 11 NAK
//	bits 4:0  ACK: credit code (31 = no credit information; rxe always sends 0x1F)
//	          RNR NAK: RNR timer code (RNRTimerDuration)
//	          NAK: NAKCode
type Syndrome uint8

// SyndromeACKNoCredit is the ACK syndrome rxe always sends: credit code 31,
// "invalid credit count", which makes the requester ignore flow control.
const SyndromeACKNoCredit Syndrome = 0x1F

// SyndromeKind is bits 6:5 of a Syndrome.
type SyndromeKind uint8

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=SyndromeKind -linecomment

// Syndrome kinds.
const (
	SynACK      SyndromeKind = 0 // ACK
	SynRNRNAK   SyndromeKind = 1 // RNR_NAK
	SynReserved SyndromeKind = 2 // RESERVED
	SynNAK      SyndromeKind = 3 // NAK
)

// NAKCode is the low 5 bits of a NAK syndrome (IBTA 9.3.5, table 45).
type NAKCode uint8

// NAK codes.
const (
	NAKPSNSequenceError       NAKCode = 0
	NAKInvalidRequest         NAKCode = 1
	NAKRemoteAccessError      NAKCode = 2
	NAKRemoteOperationalError NAKCode = 3
	NAKInvalidRDRequest       NAKCode = 4
)

var nakNames = [...]string{
	NAKPSNSequenceError:       "PSN_SEQUENCE_ERROR",
	NAKInvalidRequest:         "INVALID_REQUEST",
	NAKRemoteAccessError:      "REMOTE_ACCESS_ERROR",
	NAKRemoteOperationalError: "REMOTE_OPERATIONAL_ERROR",
	NAKInvalidRDRequest:       "INVALID_RD_REQUEST",
}

// String returns the code's name, or NAK_RESERVED_n for the reserved codes
// 5..31, which a peer can send (hand-written for that format: stringer would
// print NAKCode(n)).
func (c NAKCode) String() string {
	if int(c) < len(nakNames) {
		return nakNames[c]
	}
	return "NAK_RESERVED_" + strconv.Itoa(int(c))
}

// Kind returns bits 6:5.
func (s Syndrome) Kind() SyndromeKind { return SyndromeKind(s>>5) & 3 }

// Credit returns the credit code of an ACK (bits 4:0; see CreditCount).
func (s Syndrome) Credit() uint8 { return uint8(s) & 0x1F }

// RNRTimer returns the timer code of an RNR NAK (bits 4:0; see RNRTimerDuration).
func (s Syndrome) RNRTimer() uint8 { return uint8(s) & 0x1F }

// NAK returns the NAK code of a NAK (bits 4:0).
func (s Syndrome) NAK() NAKCode { return NAKCode(s & 0x1F) }

// IsACK reports whether s is a positive acknowledgement.
func (s Syndrome) IsACK() bool { return s.Kind() == SynACK }

// ACKSyndrome returns an ACK syndrome with the given credit code (0..31).
func ACKSyndrome(credit uint8) Syndrome { return Syndrome(credit & 0x1F) }

// RNRNAKSyndrome returns an RNR NAK syndrome with the given timer code (0..31).
func RNRNAKSyndrome(timer uint8) Syndrome { return Syndrome(0x20 | timer&0x1F) }

// NAKSyndrome returns a NAK syndrome with the given code.
func NAKSyndrome(c NAKCode) Syndrome { return Syndrome(0x60 | uint8(c)&0x1F) }

// String formats s as "ACK(credit=31)", "RNR_NAK(timer=12 640µs)",
// "NAK(PSN_SEQUENCE_ERROR)" or "RESERVED(0x40)".
func (s Syndrome) String() string {
	switch s.Kind() {
	case SynACK:
		return "ACK(credit=" + strconv.Itoa(int(s.Credit())) + ")"
	case SynRNRNAK:
		return "RNR_NAK(timer=" + strconv.Itoa(int(s.RNRTimer())) + " " + RNRTimerDuration(s.RNRTimer()).String() + ")"
	case SynNAK:
		return "NAK(" + s.NAK().String() + ")"
	}
	return "RESERVED(0x" + strconv.FormatUint(uint64(s), 16) + ")"
}

// rnrTimerMicros is IBTA table 45 ("Encoding for RNR NAK Timer Field"), in µs.
// Code 0 is the longest wait, 655.36 ms. rxe's copy (rnrnak_usec in
// rxe_comp.c) has 61410 for code 25, a typo for 61440; we use 61440.
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimerDuration returns the minimum RNR back-off of an RNR timer code
// (only its low 5 bits are used). rdma_cm uses code 0 (655.36 ms); ibv_rc_pingpong
// and perftest use 12 (640 µs). PROTOCOL §3.5.
func RNRTimerDuration(code uint8) time.Duration {
	return time.Duration(rnrTimerMicros[code&0x1F]) * time.Microsecond
}

// creditCounts is IBTA table 43 (AETH credit encoding): codes 0..30.
var creditCounts = [31]uint16{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// CreditCount returns the number of receive credits an ACK credit code
// advertises, and false for code 31 ("invalid": no flow control; what rxe
// sends) or codes above 31. Requesters may ignore credits (rxe does).
func CreditCount(code uint8) (int, bool) {
	if int(code) >= len(creditCounts) {
		return 0, false
	}
	return int(creditCounts[code]), true
}
