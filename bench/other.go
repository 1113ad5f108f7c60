//go:build !linux

package main

import (
	"fmt"
	"os"
)

// The benchmark runs between two network namespaces joined by veth, over
// AF_XDP, AF_PACKET and UDP: Linux only.
func main() {
	fmt.Fprintln(os.Stderr, "bench: needs Linux (network namespaces, veth, AF_XDP, AF_PACKET)")
	os.Exit(1)
}
