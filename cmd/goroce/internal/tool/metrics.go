package tool

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/metrics"
	"github.com/goroce/goroce/qp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsServer serves a run's device counters over HTTP (--metrics ADDR):
// /metrics in the Prometheus text format (package metrics, per QP
// included) and /debug/vars as expvar does (the process's published
// variables plus "goroce": each device's qp.Stats.Map by device name),
// except expvar's "cmdline" (the process's arguments), which only
// --metrics-cmdline adds.
type MetricsServer struct {
	coll *metrics.Collector
	srv  *http.Server
	ln   net.Listener
	done chan struct{}

	cmdline bool // /debug/vars includes expvar's "cmdline"

	mu   sync.Mutex
	devs []*qp.Device
}

// ServeMetrics starts serving devs' counters on addr (host:port; port 0
// picks one, Addr says which) in the calling thread's network namespace,
// until Stop. It also tells env.MetricsListening where it listens.
func ServeMetrics(env Env, addr string, devs ...*qp.Device) (*MetricsServer, error) {
	return serveMetrics(env, addr, false, devs...)
}

func serveMetrics(env Env, addr string, cmdline bool, devs ...*qp.Device) (*MetricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	s := &MetricsServer{coll: metrics.NewCollector(metrics.Options{PerQP: true}), ln: ln, done: make(chan struct{}),
		cmdline: cmdline}
	for _, d := range devs {
		s.Add(d)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.coll)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/vars", s.vars)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	if env.MetricsListening != nil {
		env.MetricsListening(ln.Addr())
	}
	return s, nil
}

// StartMetrics is ServeMetrics when o asks for it (--metrics) and nothing
// otherwise; the returned function stops the server (always safe to call).
// A failure to listen is reported on env.Stderr and is not fatal to the
// run; so is a warning when the address is every interface's (":9100",
// "0.0.0.0:9100", "[::]:9100"): the counters are then open to anyone who
// can reach the host, without authentication.
func StartMetrics(env Env, o Options, devs ...*qp.Device) (add func(*qp.Device), stop func()) {
	if o.Metrics == "" {
		return func(*qp.Device) {}, func() {}
	}
	if host, port, err := net.SplitHostPort(o.Metrics); err == nil && allInterfaces(host) {
		fmt.Fprintf(env.Stderr, "goroce: warning: --metrics %s serves the counters on every interface, to anyone who can reach this host "+
			"(no authentication); --metrics 127.0.0.1:%s keeps them local\n", o.Metrics, port)
	}
	s, err := serveMetrics(env, o.Metrics, o.MetricsCmdline, devs...)
	if err != nil {
		fmt.Fprintf(env.Stderr, "goroce: %v\n", err)
		return func(*qp.Device) {}, func() {}
	}
	return s.Add, s.Stop
}

// allInterfaces reports whether a listen host means every interface: empty
// or an unspecified address.
func allInterfaces(host string) bool {
	if host == "" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}

// Add adds a device to the served ones.
func (s *MetricsServer) Add(d *qp.Device) {
	s.mu.Lock()
	s.devs = append(s.devs, d)
	s.mu.Unlock()
	s.coll.Add(d)
}

// Addr is where the server listens.
func (s *MetricsServer) Addr() net.Addr { return s.ln.Addr() }

// Stop closes the listener and waits (at most a second) for the requests
// under way.
func (s *MetricsServer) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		s.srv.Close()
	}
	<-s.done
}

// vars writes what expvar's handler writes, with "goroce" added.
func (s *MetricsServer) vars(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	devs := append([]*qp.Device(nil), s.devs...)
	s.mu.Unlock()
	out := map[string]json.RawMessage{}
	expvar.Do(func(kv expvar.KeyValue) {
		if kv.Key == "cmdline" && !s.cmdline {
			return // the arguments may hold what the run's owner would not publish
		}
		out[kv.Key] = json.RawMessage(kv.Value.String())
	})
	g := map[string]any{}
	for _, d := range devs {
		st := d.Stats()
		g[st.Name] = st.Map()
	}
	b, err := json.Marshal(g)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out["goroce"] = b
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	enc.Encode(out)
}
