package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
)

// metrics are the daemon's Prometheus counters. They live in a registry of
// the daemon's own so that several daemons in one process (tests) never clash.
// receivedResults are mailctl_messages_received_total's results: a copy
// stored, or stored as junk; a message refused by a DMARC policy
// (rejected) or for its header; a copy already stored (duplicate); a copy
// that could not be stored (failed).
var receivedResults = []string{"stored", "junk", "rejected", "header_too_large", "duplicate", "failed"}

// rejectedReasons are mailctl_recipients_rejected_total's reasons.
var rejectedReasons = []string{"relay", "unknown_user", "bad_address", "unserved"}

type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec // verb, code
	received  *prometheus.CounterVec // result: receivedResults
	rejected  *prometheus.CounterVec // reason: rejectedReasons
	delivered *prometheus.CounterVec // status of each recipient update
	hookRuns  *prometheus.CounterVec // event
	ops       *opsMetrics            // metrics_ops.go
}

func newMetrics(d *Daemon) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailctl_socket_requests_total",
			Help: "Control-socket requests by verb and result code."}, []string{"verb", "code"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailctl_messages_received_total",
			Help: "Inbound message copies by result."}, []string{"result"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailctl_recipients_rejected_total",
			Help: "Inbound recipients refused at RCPT by reason."}, []string{"reason"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailctl_delivery_updates_total",
			Help: "Outbound per-recipient delivery state changes by status."}, []string{"status"}),
		hookRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailctl_hook_runs_total",
			Help: "Hook runs started by event."}, []string{"event"}),
	}
	queueDepth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mailctl_queue_depth", Help: "Items in the outbound queue."},
		func() float64 {
			if d.out == nil {
				return 0
			}
			return float64(len(d.out.queue.List()))
		})
	journalSyncs := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mailctl_inbound_journal_fsyncs_total",
		Help: "Fsyncs of the inbound journal that made accepted messages durable (shared by the messages waiting for each)."},
		func() float64 {
			if d.intake == nil {
				return 0
			}
			return float64(d.intake.Stats().Syncs)
		})
	m.reg.MustRegister(m.requests, m.received, m.rejected, m.delivered, m.hookRuns, queueDepth, journalSyncs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.registerOps(d)
	return m
}

// metricsMaxConns bounds the metrics endpoint's open connections: a scraper
// needs one; past the bound a connection waits to be served.
const metricsMaxConns = 32

// metricsIdleTimeout closes a metrics connection left unused between
// requests (a variable so that a test can shorten it).
var metricsIdleTimeout = 60 * time.Second

// metricsService serves /metrics on a loopback address when configured.
type metricsService struct {
	d    *Daemon
	srv  *http.Server
	addr string
}

func (s *metricsService) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.d.cfg().Metrics.Listen)
	if err != nil {
		return err
	}
	s.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.d.metrics.reg, promhttp.HandlerOpts{}))
	// Any local user can connect: each connection is bounded in time (a
	// request's header and body, its answer, the wait for the next one)
	// and in number, so that none can hold the daemon's file descriptors.
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: metricsIdleTimeout}
	go func() {
		if err := s.srv.Serve(netutil.LimitListener(ln, metricsMaxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.d.log.Error("metrics endpoint stopped", "err", err)
		}
	}()
	s.d.log.Info("metrics endpoint up", "addr", s.addr)
	return nil
}

func (s *metricsService) Stop(ctx context.Context) error { return s.srv.Shutdown(ctx) }
