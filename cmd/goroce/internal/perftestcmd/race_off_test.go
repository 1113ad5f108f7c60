//go:build !race

package perftestcmd

const raceEnabled = false
