package daemon

import (
	"context"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
)

// The metrics an operator watches a mail host by over months: certificate
// expiry, the queue's size and age, delivery latency and results, delay
// warnings, hook failures. Labels come from fixed sets; a destination
// domain is a label only when the operator lists it in
// metrics.destination_domains.

// opsMetrics are the metrics updated as things happen; the rest are read
// at scrape time by opsCollector.
type opsMetrics struct {
	latency       *prometheus.HistogramVec // stage: first_attempt, final
	results       *prometheus.CounterVec   // outcome, destination
	delayWarnings prometheus.Counter
	hookFailures  *prometheus.CounterVec // event, reason
}

// latencyBuckets span a delivery's life: seconds for most, days for the
// ones retried until the window ends.
var latencyBuckets = []float64{0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 2 * 86400, 5 * 86400}

func newOpsMetrics() *opsMetrics {
	return &opsMetrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mailctl_delivery_latency_seconds",
			Help:    "Time from a queued message becoming due to its first attempt's outcome (stage=first_attempt) and to its last recipient's final outcome (stage=final).",
			Buckets: latencyBuckets}, []string{"stage"}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailctl_delivery_results_total",
			Help: "Outbound per-recipient attempt outcomes (delivered, deferred, failed, expired) by destination (local, relay, remote, or a domain listed in metrics.destination_domains)."},
			[]string{"outcome", "destination"}),
		delayWarnings: prometheus.NewCounter(prometheus.CounterOpts{Name: "mailctl_delay_warnings_total",
			Help: "Delay warnings (RFC 3464, action delayed) put in senders' inboxes."}),
		hookFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mailctl_hook_failures_total",
			Help: "Hook runs that did not succeed, by event and reason (exit, timeout, dropped, error)."}, []string{"event", "reason"}),
	}
}

// destination is the bounded label of a recipient's destination.
func (d *Daemon) destination(rcpt string) string {
	dom := ""
	if i := strings.LastIndexByte(rcpt, '@'); i >= 0 {
		dom = strings.ToLower(strings.TrimSuffix(rcpt[i+1:], "."))
	}
	cfg := d.cfg()
	switch {
	case dom != "" && cfg.IsLocalDomain(dom):
		return "local"
	case slices.Contains(cfg.Metrics.DestinationDomains, dom):
		return dom
	case cfg.Relay.Host != "":
		return "relay"
	}
	return "remote"
}

// observeAttempt is the queue's Options.Observe.
func (d *Daemon) observeAttempt(it *queue.Item, results []delivery.Result, first bool) {
	m := d.metrics.ops
	now := d.now()
	age := now.Sub(it.Due()).Seconds()
	if first {
		m.latency.WithLabelValues("first_attempt").Observe(age)
	}
	if it.Settled() {
		m.latency.WithLabelValues("final").Observe(age)
	}
	byRcpt := map[string]protocol.RecipientStatus{}
	for _, r := range it.Recipients {
		byRcpt[strings.ToLower(r.Address)] = r
	}
	for _, res := range results {
		r := byRcpt[strings.ToLower(res.Rcpt)]
		outcome := r.Status
		switch {
		case r.Status == queue.StatusFailed && r.Code >= 400 && r.Code < 500:
			outcome = "expired" // the retry window ended on a temporary failure
		case r.Status != queue.StatusDelivered && r.Status != queue.StatusDeferred && r.Status != queue.StatusFailed:
			continue
		}
		m.results.WithLabelValues(outcome, d.destination(res.Rcpt)).Inc()
	}
}

// hookFailed counts a hook run that did not succeed.
func (m *metrics) hookRun(run protocol.HookRun) {
	reason := ""
	switch {
	case run.TimedOut:
		reason = "timeout"
	case strings.HasPrefix(run.Error, "dropped"):
		reason = "dropped"
	case run.Error != "":
		reason = "error"
	case run.ExitCode != 0:
		reason = "exit"
	default:
		return
	}
	m.ops.hookFailures.WithLabelValues(run.Event, reason).Inc()
}

// opsCollector reads, at each scrape, what is a state rather than an
// event: the served certificate's expiry and the queue.
type opsCollector struct{ d *Daemon }

var (
	certExpiryDesc = prometheus.NewDesc("mailctl_tls_certificate_expiry_seconds",
		"Seconds until the certificate the SMTP listeners serve expires (negative: expired), by listener and the certificate's first name.", []string{"listener", "name"}, nil)
	queueItemsDesc = prometheus.NewDesc("mailctl_queue_items",
		"Items in the outbound queue by state (held, scheduled, pending, deferred, delivering).", []string{"state"}, nil)
	diskFreeDesc = prometheus.NewDesc("mailctl_disk_free_bytes",
		"Bytes free on the mail store's filesystem (to non-root writers), as the disk reserve last read them (at most 5 s old).", nil, nil)
	diskReserveDesc = prometheus.NewDesc("mailctl_disk_reserve_bytes",
		"storage.disk_reserve_bytes: below this much free space new mail is answered 452 4.3.1 and sends are refused (0: no reserve).", nil, nil)
	mailboxUsageBytesDesc = prometheus.NewDesc("mailctl_mailbox_usage_bytes",
		"Bytes a mailbox's files take (counted from the files at most 10 minutes ago, plus what was stored since).", []string{"mailbox"}, nil)
	mailboxQuotaBytesDesc = prometheus.NewDesc("mailctl_mailbox_quota_bytes",
		"A mailbox's quota in bytes (0: none).", []string{"mailbox"}, nil)
	mailboxUsageMessagesDesc = prometheus.NewDesc("mailctl_mailbox_usage_messages",
		"Messages in a mailbox, all folders.", []string{"mailbox"}, nil)
	mailboxQuotaMessagesDesc = prometheus.NewDesc("mailctl_mailbox_quota_messages",
		"A mailbox's quota in messages (0: none).", []string{"mailbox"}, nil)
	oldestDesc = prometheus.NewDesc("mailctl_queue_oldest_item_age_seconds",
		"Age of the oldest item in the outbound queue (0 when it is empty).", nil, nil)
)

func (c opsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- certExpiryDesc
	ch <- queueItemsDesc
	ch <- oldestDesc
	ch <- diskFreeDesc
	ch <- diskReserveDesc
	ch <- mailboxUsageBytesDesc
	ch <- mailboxQuotaBytesDesc
	ch <- mailboxUsageMessagesDesc
	ch <- mailboxQuotaMessagesDesc
}

func (c opsCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	now := d.now()
	// The certificate the next handshake gets: renewals and reloads show
	// at the next scrape.
	if cert, _ := d.servedCertificate(context.Background()); cert != nil {
		name := cert.Subject.CommonName
		if len(cert.DNSNames) > 0 {
			name = cert.DNSNames[0]
		}
		ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, cert.NotAfter.Sub(now).Seconds(), "smtp", name)
	}
	counts := map[string]int{}
	var oldest float64
	if d.out != nil {
		for _, it := range d.out.queue.List() {
			counts[it.State()]++
			oldest = max(oldest, now.Sub(it.Created).Seconds())
		}
	}
	for _, st := range protocol.QueueStates {
		ch <- prometheus.MustNewConstMetric(queueItemsDesc, prometheus.GaugeValue, float64(counts[st]), st)
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, oldest)
	if free, err := d.reserve.Free(); err == nil {
		ch <- prometheus.MustNewConstMetric(diskFreeDesc, prometheus.GaugeValue, float64(free))
	}
	ch <- prometheus.MustNewConstMetric(diskReserveDesc, prometheus.GaugeValue, float64(*d.cfg().Storage.DiskReserveBytes))
	// One series per mailbox: their number is bounded by the mailboxes root
	// and their owners create, not by anything from outside.
	for _, m := range d.allMailboxes() {
		u := d.mailboxUsage(m.Name, 0)
		ch <- prometheus.MustNewConstMetric(mailboxUsageBytesDesc, prometheus.GaugeValue, float64(u.Bytes), m.Name)
		ch <- prometheus.MustNewConstMetric(mailboxQuotaBytesDesc, prometheus.GaugeValue, float64(u.QuotaBytes), m.Name)
		ch <- prometheus.MustNewConstMetric(mailboxUsageMessagesDesc, prometheus.GaugeValue, float64(u.Messages), m.Name)
		ch <- prometheus.MustNewConstMetric(mailboxQuotaMessagesDesc, prometheus.GaugeValue, float64(u.QuotaMessages), m.Name)
	}
}

// registerOps adds the operations metrics to m's registry, with every
// series of a fixed label set present from the start (at zero), so that a
// rate or an alert on one has a series to work on before its first event.
func (m *metrics) registerOps(d *Daemon) {
	m.ops = newOpsMetrics()
	m.reg.MustRegister(m.ops.latency, m.ops.results, m.ops.delayWarnings, m.ops.hookFailures, opsCollector{d})
	for _, stage := range []string{"first_attempt", "final"} {
		m.ops.latency.WithLabelValues(stage)
	}
	dests := append([]string{"local", "remote"}, d.cfg().Metrics.DestinationDomains...)
	if d.cfg().Relay.Host != "" {
		dests = append(dests, "relay")
	}
	for _, o := range []string{"delivered", "deferred", "failed", "expired"} {
		for _, dst := range dests {
			m.ops.results.WithLabelValues(o, dst)
		}
	}
	for _, ev := range []string{protocol.EventOnReceive, protocol.EventAfterSend} {
		m.hookRuns.WithLabelValues(ev)
		for _, r := range []string{"exit", "timeout", "dropped", "error"} {
			m.ops.hookFailures.WithLabelValues(ev, r)
		}
	}
	for _, r := range receivedResults {
		m.received.WithLabelValues(r)
	}
	for _, st := range []string{queue.StatusPending, queue.StatusDeferred, queue.StatusDelivered, queue.StatusFailed, queue.StatusBounced, queue.StatusHeld} {
		m.delivered.WithLabelValues(st)
	}
	for _, r := range rejectedReasons {
		m.rejected.WithLabelValues(r)
	}
}
