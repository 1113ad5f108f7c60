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

// TestShort: getopt(3)'s optstring, clustered switches, attached and
// separate values, options after positional arguments.
func TestShort(t *testing.T) {
	opts, pos, err := Short("s:b:m", []string{"-ms", "198.18.0.1", "host", "-b198.18.0.2", "--", "-x"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Opt{{"m", ""}, {"s", "198.18.0.1"}, {"b", "198.18.0.2"}}
	if !slices.Equal(opts, want) || !slices.Equal(pos, []string{"host", "-x"}) {
		t.Errorf("Short = %q, %q; want %q, %q", opts, pos, want, []string{"host", "-x"})
	}
	for _, bad := range [][]string{{"-x"}, {"-s"}, {"--sb", "1"}} {
		if _, _, err := Short("s:b:m", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
