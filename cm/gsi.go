package cm

import (
	"context"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

// qpGSI is the agent's MAD I/O over a device's QP1 (qp.GSI).
type qpGSI struct{ g *qp.GSI }

func gsiOf(dev *qp.Device) (gsiPort, error) {
	g, err := dev.GSI()
	if err != nil {
		return nil, err
	}
	return qpGSI{g}, nil
}

func (p qpGSI) handle(h func(from madAddr, mad []byte)) (func(), error) {
	return p.g.Handle(mad.ClassCM, func(m qp.MAD) {
		h(madAddr{GID: m.From.GID, QPN: m.From.QPN, QKey: m.From.QKey,
			HopLimit: m.From.HopLimit, TrafficClass: m.From.TrafficClass, MAC: m.From.MAC}, m.Data)
	})
}

func (p qpGSI) send(ctx context.Context, to madAddr, b []byte) error {
	return p.g.Send(ctx, qp.MADAddr{GID: to.GID, QPN: to.QPN, QKey: to.QKey,
		HopLimit: to.HopLimit, TrafficClass: to.TrafficClass, MAC: to.MAC}, b)
}
