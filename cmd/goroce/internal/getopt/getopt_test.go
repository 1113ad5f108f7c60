package getopt

import (
	"flag"
	"slices"
	"testing"
)

func TestRewrite(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Bool("e", false, "")
	fs.Bool("c", false, "")
	fs.Int("g", 0, "")
	fs.Int("size", 0, "")
	fs.Bool("report_gbits", false, "")
	flags, pos, err := Rewrite(fs, []string{"-ec", "-g1", "host", "--siz", "64", "--report_gb", "--", "-x"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-e", "-c", "-g=1", "-size=64", "-report_gbits"}
	if !slices.Equal(flags, want) || !slices.Equal(pos, []string{"host", "-x"}) {
		t.Fatalf("flags %q pos %q", flags, pos)
	}
	for _, bad := range [][]string{{"-z"}, {"-g"}, {"--nope"}, {"--size"}} {
		if _, _, err := Rewrite(fs, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
