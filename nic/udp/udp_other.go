//go:build !linux

package udp

import "errors"

// haveMmsg: only Linux has the recvmmsg/sendmmsg path.
const haveMmsg = false

func openMmsg(*Link, Config) (sock, error) { return nil, errors.ErrUnsupported }
