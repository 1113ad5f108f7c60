// Package qpexpvar publishes the counters of a goroce device through the
// standard library's expvar (/debug/vars): the layout of qp.Stats.Map,
// rxe's hw_counters under their names, goroce's own, the port counters and
// each QP's.
//
// It is a package of its own so that qp does not link net/http: expvar
// serves /debug/vars through it, and with it come crypto/tls and x509,
// 65 of the 247 packages qp depended on (go list -deps ./qp: 247 with
// expvar, 182 without). A program that publishes expvars serves them over
// HTTP anyway; the others no longer carry an HTTP stack for it. The
// Prometheus collector is in metrics/ for the same reason.
package qpexpvar

import (
	"expvar"
	"fmt"
	"sync"

	"github.com/goroce/goroce/qp"
)

// Var returns the device's counters as an expvar.Var: a snapshot
// (Device.Stats) taken each time it is read, laid out as qp.Stats.Map.
func Var(d *qp.Device) expvar.Var {
	return expvar.Func(func() any {
		s := d.Stats()
		return s.Map()
	})
}

// Publish publishes Var(d) under name (expvar.Publish: /debug/vars of
// net/http's DefaultServeMux shows it). Unlike expvar.Publish it returns an
// error, instead of panicking, when the name is taken.
func Publish(d *qp.Device, name string) error {
	mu.Lock()
	defer mu.Unlock()
	if expvar.Get(name) != nil {
		return fmt.Errorf("qpexpvar: %q is already published", name)
	}
	expvar.Publish(name, Var(d))
	return nil
}

var mu sync.Mutex // Publish's check and publish are one step
