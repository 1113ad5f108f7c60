package pingpong

import (
	"flag"
	"fmt"
)

// ibv_ud_pingpong (libibverbs/examples/ud_pingpong.c at v44.0) exchanges
// the same 52-byte records in the same sequence as ibv_rc_pingpong
// (ServerExchange, ClientExchange) and prints the same remote and timing
// lines; its command line and its first line differ.

// DefaultUDFlags returns the defaults of ud_pingpong.c main: size 1024
// (its usage text says 2048, the code sets 1024), no MTU option.
func DefaultUDFlags() Flags {
	f := DefaultFlags()
	f.Size = 1024
	return f
}

// ParseUDFlags parses args like ibv_ud_pingpong (getopt_long string
// "p:d:i:s:r:n:l:eg:c" plus one optional host: no -m, none of the ODP,
// timestamp, DM and new-send switches), with ParseCommon's rules, and
// goroce's --srq.
func ParseUDFlags(args []string) (Flags, error) {
	f := DefaultUDFlags()
	err := parseCommon(&f.Common, args, false, func(fs *flag.FlagSet, both Both) {
		both("c", "chk", func(n string) { fs.BoolVar(&f.Check, n, false, "validate received buffer") })
		fs.BoolVar(&f.SRQ, "srq", false, "receive through a shared receive queue")
	})
	if err != nil {
		return Flags{}, err
	}
	return f, nil
}

// FormatLocalUD is ibv_ud_pingpong's first line, including its newline;
// unlike rc_pingpong's it has a colon before the GID:
//
//	"  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x: GID %s\n"
func FormatLocalUD(d Dest) string {
	return fmt.Sprintf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x: GID %s\n",
		d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// ibv_uc_pingpong (libibverbs/examples/uc_pingpong.c) is rc_pingpong on a
// UC QP: the same exchange, records, first line and timing lines; its
// command line has the common options only (getopt_long string
// "p:d:i:s:m:r:n:l:eg:": no -c, no ODP, timestamp, DM or new-send).

// ParseUCFlags parses args like ibv_uc_pingpong, with ParseCommon's rules.
func ParseUCFlags(args []string) (Flags, error) {
	f := DefaultFlags()
	if err := ParseCommon(&f.Common, args, nil); err != nil {
		return Flags{}, err
	}
	return f, nil
}
