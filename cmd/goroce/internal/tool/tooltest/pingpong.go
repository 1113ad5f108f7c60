package tooltest

import (
	"regexp"
	"strings"
	"testing"
)

// The lines the ping-pong tools print after their first (the local
// address, which differs between rc_pingpong and ud_pingpong).
var (
	pingpongRemoteRE = regexp.MustCompile(`^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:198\.18\.0\.[12]$`)
	pingpongBytesRE  = regexp.MustCompile(`^(\d+) bytes in \d+\.\d\d seconds = (\d+\.\d\d|inf) Mbit/sec$`)
	pingpongItersRE  = regexp.MustCompile(`^(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`)
)

// CheckPingpongOutput checks the four lines a ping-pong tool prints (the
// first matching local), the byte and iteration counts, and that each
// side's remote line is the other's local one (QPN, PSN, GID).
func CheckPingpongOutput(t *testing.T, local *regexp.Regexp, s, c Outcome, bytesWant, itersWant string) {
	t.Helper()
	sl, cl := strings.Split(strings.TrimSuffix(s.Stdout, "\n"), "\n"), strings.Split(strings.TrimSuffix(c.Stdout, "\n"), "\n")
	for _, side := range []struct {
		name  string
		lines []string
		err   string
	}{{"server", sl, s.Stderr}, {"client", cl, c.Stderr}} {
		l := side.lines
		if len(l) != 4 || !local.MatchString(l[0]) || !pingpongRemoteRE.MatchString(l[1]) || !pingpongBytesRE.MatchString(l[2]) || !pingpongItersRE.MatchString(l[3]) {
			t.Fatalf("%s printed:\n%s\nstderr: %s", side.name, strings.Join(l, "\n"), side.err)
		}
		if m := pingpongBytesRE.FindStringSubmatch(l[2]); m[1] != bytesWant {
			t.Errorf("%s: %s bytes, want %s", side.name, m[1], bytesWant)
		}
		if m := pingpongItersRE.FindStringSubmatch(l[3]); m[1] != itersWant {
			t.Errorf("%s: %s iters, want %s", side.name, m[1], itersWant)
		}
	}
	// ud_pingpong's local line has ": GID" where the remote one has ", GID".
	after := func(l string) string { return strings.Replace(l[strings.Index(l, "LID"):], ": GID", ", GID", 1) }
	if after(sl[0]) != after(cl[1]) || after(cl[0]) != after(sl[1]) {
		t.Errorf("addresses do not cross:\nserver %q / %q\nclient %q / %q", sl[0], sl[1], cl[0], cl[1])
	}
}
