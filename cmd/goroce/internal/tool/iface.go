package tool

// DefaultInterface is the interface a tool uses when -d is not given: the
// first one that is up, not a loopback, and has an IPv4 address.
func DefaultInterface() (string, error) { return defaultInterface() }
