//go:build !unix && !windows

package udp

func lostSend(error) bool     { return false }
func lostRead(error) bool     { return false }
func icmpFeedback(error) bool { return false }
