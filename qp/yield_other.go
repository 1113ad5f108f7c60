//go:build !linux

package qp

import "runtime"

// osYield falls back to yielding to other goroutines where sched_yield(2)
// is not at hand.
var osYield = runtime.Gosched
