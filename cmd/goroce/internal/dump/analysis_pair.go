package dump

import (
	"github.com/goroce/goroce/wire"
)

// # Connections
//
// The analyses follow one requester: the requests of a flow (source,
// destination, dest QPN; see flows.go) and the responses that answer them,
// which travel in the opposite direction to the requester's QPN. The BTH
// of a request does not carry the requester's QPN, so the response flow is
// found by pairing: among the flows from the request flow's destination to
// its source that carry responses, the one whose response PSNs fall on
// the most request PSNs of the flow (ties: the one seen first). An RC
// connection that is used in both directions is two such pairings.

// conn is one request flow with the flow carrying its responses.
type conn struct {
	req     flowKey
	resp    flowKey
	hasResp bool
	reqs    []int // indices into the events
	resps   []int
}

// pairFlows returns the request flows (RC requests) in order of first
// appearance, each with its response flow.
func pairFlows(evs []ev) []*conn {
	reqIdx := map[flowKey][]int{}
	respIdx := map[flowKey][]int{}
	var order []flowKey
	for i := range evs {
		e := &evs[i]
		info := e.op.Info()
		switch {
		case info.Request && e.op.Transport() == wire.TransportRC:
			if reqIdx[e.key] == nil {
				order = append(order, e.key)
			}
			reqIdx[e.key] = append(reqIdx[e.key], i)
		case info.Response:
			respIdx[e.key] = append(respIdx[e.key], i)
		}
	}
	// Candidate response flows by (src, dst) in order of first appearance.
	type pair struct{ src, dst string }
	var respOrder []flowKey
	seen := map[flowKey]bool{}
	for i := range evs {
		k := evs[i].key
		if _, ok := respIdx[k]; ok && !seen[k] {
			seen[k] = true
			respOrder = append(respOrder, k)
		}
	}
	var out []*conn
	for _, k := range order {
		c := &conn{req: k, reqs: reqIdx[k]}
		var cands []flowKey
		for _, r := range respOrder {
			if r.src == k.dst && r.dst == k.src {
				cands = append(cands, r)
			}
		}
		switch len(cands) {
		case 0:
		case 1:
			c.resp, c.hasResp = cands[0], true
		default:
			psns := map[wire.PSN]bool{}
			for _, i := range c.reqs {
				psns[evs[i].psn] = true
			}
			best := -1
			for _, r := range cands {
				n := 0
				for _, i := range respIdx[r] {
					if psns[evs[i].psn] {
						n++
					}
				}
				if n > best {
					best, c.resp, c.hasResp = n, r, true
				}
			}
		}
		if c.hasResp {
			c.resps = respIdx[c.resp]
		}
		out = append(out, c)
	}
	return out
}
