//go:build linux

package udp

import "time"

func (s *mmsgSock) initWait() error {
	return s.w.Init(s.fd, "udp", s.recvOnce, s.l.c.Closed)
}

func (s *mmsgSock) wait(bufs [][]byte, sizes []int) (int, error) {
	n, _, err := s.w.Wait(bufs, sizes)
	return n, err
}

func (s *mmsgSock) setWaitDeadline(t time.Time) error { return s.w.SetDeadline(t) }
