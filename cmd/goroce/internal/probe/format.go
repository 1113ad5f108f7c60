package probe

import (
	"fmt"
	"strings"
)

// Summary counts the verdicts.
type Summary struct {
	Pass      int `json:"pass"`
	Deviation int `json:"deviation"` // known departures from IBTA (rxe's)
	Fail      int `json:"fail"`
	Error     int `json:"error"`
}

// Summarize counts rs by verdict.
func Summarize(rs []Result) Summary {
	var s Summary
	for _, r := range rs {
		switch r.Verdict {
		case "pass":
			s.Pass++
		case "deviation":
			s.Deviation++
		case "fail":
			s.Fail++
		default:
			s.Error++
		}
	}
	return s
}

// Text formats the results for a terminal: per check the verdict, what was
// sent, what the peer did and what IBTA requires (and, for a known
// deviation, what the implementation does instead), then the summary.
func Text(rs []Result) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%-5s %s (peer QPN %#x)\n", strings.ToUpper(r.Verdict), r.Check, r.PeerQPN)
		if r.Sent != "" {
			fmt.Fprintf(&b, "      sent:     %s\n", r.Sent)
		}
		if r.Error != "" {
			fmt.Fprintf(&b, "      error:    %s\n", r.Error)
		} else {
			fmt.Fprintf(&b, "      peer did: %s\n", r.Observed)
		}
		fmt.Fprintf(&b, "      required: %s\n", r.Required)
		if r.Deviation != "" {
			fmt.Fprintf(&b, "      known:    %s\n", r.Deviation)
		}
	}
	s := Summarize(rs)
	fmt.Fprintf(&b, "%d checks: %d pass, %d known deviation from IBTA, %d fail, %d could not run\n", len(rs), s.Pass, s.Deviation, s.Fail, s.Error)
	return b.String()
}
