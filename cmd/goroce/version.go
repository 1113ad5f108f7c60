package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
)

const versionSummary = "print goroce's module version, VCS revision and Go version"

// runVersion is `goroce version`: what debug.ReadBuildInfo says about this
// binary, the fields `go version -m` shows.
func runVersion(env tool.Env, args []string) int {
	if tool.WantsHelp(args) {
		fmt.Fprint(env.Stdout, "usage: goroce version\n\nPrints the module version goroce was built from, the VCS revision, its time and\nwhether the tree was modified (for builds in a checkout), and the Go version.\n")
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintf(env.Stderr, "goroce version: unexpected arguments %q\nusage: goroce version\n", args)
		return 2
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	writeVersion(env.Stdout, bi)
	return 0
}

// writeVersion prints bi as `goroce version` does: the module path and
// version, vcs.revision, vcs.time and vcs.modified when the build recorded
// them, and the Go version and platform. A nil bi (a binary built without
// module support) prints what the runtime knows.
func writeVersion(w io.Writer, bi *debug.BuildInfo) {
	goVersion := runtime.Version()
	if bi == nil {
		fmt.Fprintf(w, "goroce (no build information)\n%-12s %s %s/%s\n", "go", goVersion, runtime.GOOS, runtime.GOARCH)
		return
	}
	if bi.GoVersion != "" {
		goVersion = bi.GoVersion
	}
	mod, version := bi.Main.Path, bi.Main.Version
	if mod == "" {
		mod = "github.com/goroce/goroce"
	}
	if version == "" {
		version = "(devel)"
	}
	fmt.Fprintf(w, "goroce %s\n", version)
	fmt.Fprintf(w, "%-12s %s %s\n", "module", mod, version)
	if bi.Main.Sum != "" {
		fmt.Fprintf(w, "%-12s %s\n", "sum", bi.Main.Sum)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for _, k := range []string{"vcs", "vcs.revision", "vcs.time", "vcs.modified"} {
		if v, ok := settings[k]; ok {
			fmt.Fprintf(w, "%-12s %s\n", k, v)
		}
	}
	goos, goarch := settings["GOOS"], settings["GOARCH"]
	if goos == "" {
		goos, goarch = runtime.GOOS, runtime.GOARCH
	}
	fmt.Fprintf(w, "%-12s %s %s/%s\n", "go", goVersion, goos, goarch)
}
