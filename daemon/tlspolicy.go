package daemon

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/x509"
	"fmt"
	"mime"
	"net/textproto"
	"path/filepath"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/outbound/mtasts"
	"github.com/mailctl/mailctl/daemon/outbound/remote"
	"github.com/mailctl/mailctl/daemon/outbound/tlsrpt"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/store"
)

// wireTLSPolicies gives the delivery client what the recipient domains
// publish about TLS: MTA-STS policies (cached in the state directory),
// DANE through the configured resolver's validation, and the TLS report
// counts. The reports are sent from [tlsrpt] mailbox.
func (o *outboundService) wireTLSPolicies(mx *remote.Client, cfg *config.Config) error {
	d := o.d
	roots, err := loadCAFile(cfg.Delivery.CAFile)
	if err != nil {
		return err
	}
	mx.RootCAs, mx.Clock = roots, d.now
	if *cfg.Delivery.MTASTS {
		o.sts = &mtasts.Source{Resolver: d.lookups, Dir: filepath.Join(cfg.Paths.StateDir, "mta-sts"), RootCAs: roots,
			Dial: d.dial, Port: cfg.Delivery.MTASTSPort, Now: d.now, Logger: d.log.With("part", "mta-sts")}
		mx.STS = o.sts
	}
	// A test's in-memory resolver has no DNSSEC to ask; the real one is
	// asked only for a daemon using the configured resolver.
	if *cfg.Delivery.DANE && d.opts.Resolver == nil {
		// Asked once per message: repeats to one destination are answered
		// from what the records' TTLs allow to keep.
		mx.DNSSEC = &resolver.ExchangeCache{E: resolver.NewExchanger(cfg.DNS.Resolver, 0), Now: d.now}
	}
	if *cfg.TLSRPT.Enabled {
		o.reports = &tlsrpt.Recorder{Dir: filepath.Join(cfg.Paths.StateDir, "tlsrpt"), Organization: cfg.TLSRPT.Organization,
			Contact:   cmp.Or(cfg.TLSRPT.Contact, "postmaster@"+cfg.PrimaryDomain()),
			Submitter: cfg.Hostname, LookupTXT: d.lookups.LookupTXT, Send: o.sendTLSReport, Now: d.now,
			Logger: d.log.With("part", "tlsrpt")}
		mx.Reports = o.reports
	}
	return nil
}

// The prune of the MTA-STS cache (mtasts.Source.Prune): the expired
// policies' files removed, the policies unused for an hour dropped from
// memory; a pass stsPruneFirst after the start, so that a daemon
// restarted more often than hourly prunes too, then every stsPruneEvery.
const (
	stsPruneFirst = time.Minute
	stsPruneEvery = time.Hour
)

// pruneSTS prunes the MTA-STS cache until ctx ends.
func (o *outboundService) pruneSTS(ctx context.Context) {
	periodically(ctx, stsPruneFirst, stsPruneEvery, stsPruneEvery, func() bool {
		o.pruneSTSOnce()
		return false
	})
}

func (o *outboundService) pruneSTSOnce() {
	res, err := o.sts.Prune()
	if err != nil {
		o.d.log.Error("pruning the MTA-STS policy cache; the next pass goes on", "removed", res.Removed, "err", err)
	} else if res.Removed > 0 {
		o.d.log.Info("expired MTA-STS policies removed", "removed", res.Removed, "examined", res.Examined)
	}
}

// loadCAFile reads delivery.ca_file; "" is the system roots (nil).
func loadCAFile(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	pem, err := safeio.ReadInput(path, config.MaxCAFile)
	if err != nil {
		return nil, fmt.Errorf("delivery.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("delivery.ca_file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// sendTLSReport mails one day's report of a policy domain to its rua
// addresses from the [tlsrpt] mailbox, which keeps the sent copy.
func (o *outboundService) sendTLSReport(_ context.Context, rep tlsrpt.Report, rua []string, gz []byte) error {
	d := o.d
	cfg := d.cfg()
	name := cfg.TLSRPT.Mailbox
	box, ok := d.lookupMailbox(name)
	if !ok {
		return fmt.Errorf("tlsrpt.mailbox %q does not exist: declare it (mailctl setup declares postmaster)", name)
	}
	from, mid := d.Address(name), newMessageID(cfg.Hostname)
	m := tlsrpt.Compose(from, rua, cfg.Hostname, mid, rep, gz, d.now())
	_, err := o.svc.SendRaw(outbound.RawRequest{Mailbox: name, MailboxID: box.ID, From: from, To: rua, MessageID: mid,
		Subject: m.Subject, Raw: m.Raw, Body: m.Text,
		Attachments: []store.AttachmentData{{Filename: m.Filename, ContentType: "application/tlsrpt+gzip", Data: gz}}})
	return err
}

// tlsReportLabel is the label of the TLS reports about our own domains.
const tlsReportLabel = "tls-report"

// tlsReportsTo is where a message goes when it is a TLS report about one of
// our own domains (RFC 8460 §5.3), whichever of our addresses the sender's
// rua named: the [tlsrpt] mailbox (postmaster), where the operator reads
// them, not an agent's context. "" for any other message, or when that
// mailbox does not exist.
func (d *Daemon) tlsReportsTo(raw []byte) string {
	if d.tlsReportLabel(raw) == "" {
		return ""
	}
	name := d.cfg().TLSRPT.Mailbox
	if _, ok := d.lookupMailbox(name); !ok {
		return ""
	}
	return name
}

// tlsReportLabel is tlsReportLabel for a TLS report about one of our own
// domains (a multipart/report of report-type tlsrpt whose
// TLS-Report-Domain is ours), "" for any other message.
func (d *Daemon) tlsReportLabel(raw []byte) string {
	end := bytes.Index(raw, []byte("\r\n\r\n"))
	if end < 0 || end > 64<<10 {
		return ""
	}
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw[:end+4]))).ReadMIMEHeader()
	if err != nil && len(h) == 0 {
		return ""
	}
	mt, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil || mt != "multipart/report" || !strings.EqualFold(params["report-type"], "tlsrpt") {
		return ""
	}
	if !d.cfg().IsLocalDomain(strings.TrimSpace(h.Get("TLS-Report-Domain"))) {
		return ""
	}
	return tlsReportLabel
}
