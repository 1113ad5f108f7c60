//go:build race

package main

// raceEnabled: the race detector slows the 8 MiB messages of -a thirtyfold.
const raceEnabled = true
