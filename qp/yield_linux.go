//go:build linux

package qp

import "syscall"

// osYield gives the processor to another runnable thread (sched_yield(2)).
// A variable so a test can count the calls.
var osYield = func() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
