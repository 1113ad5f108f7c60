//go:build race

package perftestcmd

// raceEnabled: the race detector slows the 8 MiB messages of -a thirtyfold.
const raceEnabled = true
