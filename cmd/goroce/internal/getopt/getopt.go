// Package getopt lets Go's flag package accept the command lines of C tools
// that parse with GNU getopt_long (rc_pingpong, perftest): clustered short
// switches (-ec), attached values (-g1), long options and their unambiguous
// prefixes (--report_gb), and options after positional arguments.
package getopt

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Rewrite turns a GNU getopt_long command line into arguments Go's flag
// package parses, and the positional arguments (GNU getopt permutes them out
// of the options). Every option becomes "-name" or "-name=value".
func Rewrite(fs *flag.FlagSet, args []string) (flags, positional []string, err error) {
	isBool := func(f *flag.Flag) bool {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		return ok && b.IsBoolFlag()
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(positional, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			f := lookupLong(fs, name)
			if f == nil {
				return nil, nil, fmt.Errorf("unrecognized or ambiguous option %q", a)
			}
			name = f.Name
			switch {
			case hasVal:
				flags = append(flags, "-"+name+"="+val)
			case isBool(f):
				flags = append(flags, "-"+name)
			case i+1 < len(args):
				i++
				flags = append(flags, "-"+name+"="+args[i])
			default:
				return nil, nil, fmt.Errorf("option %q requires an argument", a)
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				name := a[j : j+1]
				f := fs.Lookup(name)
				if f == nil {
					return nil, nil, fmt.Errorf("invalid option -- '%s'", name)
				}
				if isBool(f) {
					flags = append(flags, "-"+name)
					continue
				}
				switch {
				case j+1 < len(a):
					flags = append(flags, "-"+name+"="+a[j+1:])
				case i+1 < len(args):
					i++
					flags = append(flags, "-"+name+"="+args[i])
				default:
					return nil, nil, fmt.Errorf("option requires an argument -- '%s'", name)
				}
				break
			}
		default:
			positional = append(positional, a)
		}
	}
	return flags, positional, nil
}

// lookupLong finds a long option by its full name or, as getopt_long does,
// by an unambiguous prefix. One-letter names are short options only.
func lookupLong(fs *flag.FlagSet, name string) *flag.Flag {
	if len(name) < 2 {
		return nil
	}
	if f := fs.Lookup(name); f != nil {
		return f
	}
	var found *flag.Flag
	ambiguous := false
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) > 1 && strings.HasPrefix(f.Name, name) {
			if found != nil {
				ambiguous = true
			}
			found = f
		}
	})
	if ambiguous {
		return nil
	}
	return found
}

// Opt is one option of a command line as Short returns it: the letter and
// its value ("" for a switch).
type Opt struct {
	Name, Value string
}

// Short parses args as getopt(3) with optstring does ("s:b:m": -s and -b
// take a value, -m is a switch): the options in order, then the positional
// arguments. The error is getopt's complaint (an unknown letter, a missing
// value).
func Short(optstring string, args []string) ([]Opt, []string, error) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for i := 0; i < len(optstring); i++ {
		name := optstring[i : i+1]
		if i+1 < len(optstring) && optstring[i+1] == ':' {
			fs.String(name, "", "")
			i++
		} else {
			fs.Bool(name, false, "")
		}
	}
	flags, pos, err := Rewrite(fs, args)
	if err != nil {
		return nil, nil, err
	}
	opts := make([]Opt, len(flags))
	for i, f := range flags {
		opts[i].Name, opts[i].Value, _ = strings.Cut(f[1:], "=")
	}
	return opts, pos, nil
}
