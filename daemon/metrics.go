package daemon

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ferry/flags"
)

// newRegistry is the process's metrics registry, with the Go runtime's
// and the process's own collectors; it registers through mountLabels.
func newRegistry(cfg *flags.Config) (*prometheus.Registry, prometheus.Registerer) {
	reg := prometheus.NewRegistry()
	labelled := prometheus.WrapRegistererWith(mountLabels(cfg), reg)
	labelled.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg, labelled
}

// mountLabels are the labels on every series: which mount it is
// (source, mountpoint), so that several mounts on a node, scraped into
// one Prometheus, are told apart, and --metrics-label's.
func mountLabels(cfg *flags.Config) prometheus.Labels {
	l := prometheus.Labels{"source": cfg.Source, "mountpoint": cfg.MountPoint}
	for _, kv := range cfg.MetricsLabels {
		l[kv[0]] = kv[1]
	}
	return l
}

// serveMetrics serves reg on --metrics-addr, if given, until stop is
// called. It listens before returning, so that a busy port is a startup
// error.
func serveMetrics(cfg *flags.Config, reg *prometheus.Registry, logger *slog.Logger) (stop func(), err error) {
	if cfg.MetricsAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return nil, &flags.OptionError{Option: "metrics-addr", Err: err}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	switch {
	case cfg.Debug && loopback(ln.Addr()):
		// Profiles answer "where does the CPU go" on a live mount;
		// only with --debug, and only on loopback, since they expose
		// internals (and cost CPU) to whoever can connect.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	case cfg.Debug:
		logger.Warn("--debug: profiles (/debug/pprof) are served only on a loopback --metrics-addr", "addr", ln.Addr().String())
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return func() { srv.Close() }, nil
}

// loopback reports whether a listener's address is reachable only from
// this machine.
func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}
