package tlsrpt

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Mail is a report as RFC 8460 §5.3 mails it.
type Mail struct {
	Subject  string
	Filename string
	Text     string // the human-readable part
	Raw      []byte // the whole message, unsigned, CRLF line ends
}

// Compose writes the report mail from `from` to `to`: a multipart/report
// with report-type "tlsrpt", the TLS-Report-Domain and TLS-Report-Submitter
// headers, a short text part and the gzipped JSON as
// application/tlsrpt+gzip named "submitter!domain!begin!end!id.json.gz".
// messageID is without angle brackets.
func Compose(from string, to []string, submitter, messageID string, rep Report, gz []byte, now time.Time) Mail {
	domain := ""
	if len(rep.Policies) > 0 {
		domain = rep.Policies[0].Policy.Domain
	}
	var b [8]byte
	rand.Read(b[:])
	boundary := "tlsrpt-" + hex.EncodeToString(b[:])
	m := Mail{
		Subject: fmt.Sprintf("Report Domain: %s Submitter: %s Report-ID: <%s>", domain, submitter, rep.ReportID),
		Filename: fmt.Sprintf("%s!%s!%d!%d!%s.json.gz", submitter, domain, rep.DateRange.Start.Unix(), rep.DateRange.End.Unix(),
			strings.NewReplacer("@", "_", "!", "_").Replace(rep.ReportID)),
	}
	var ok, failed int64
	for _, p := range rep.Policies {
		ok += p.Summary.Successful
		failed += p.Summary.Failed
	}
	m.Text = fmt.Sprintf("This is the SMTP TLS report (RFC 8460) of %s for %s, %s UTC.\r\n"+
		"Sessions: %d successful, %d failed. The report is attached as %s.\r\n",
		submitter, domain, rep.DateRange.Start.Format(time.DateOnly), ok, failed, m.Filename)
	var w bytes.Buffer
	h := func(k, v string) { fmt.Fprintf(&w, "%s: %s\r\n", k, v) }
	h("From", from)
	h("To", strings.Join(to, ", "))
	h("Subject", m.Subject)
	h("Date", now.Format(time.RFC1123Z))
	h("Message-ID", "<"+messageID+">")
	h("TLS-Report-Domain", domain)
	h("TLS-Report-Submitter", submitter)
	h("Auto-Submitted", "auto-generated")
	h("MIME-Version", "1.0")
	h("Content-Type", `multipart/report; report-type="tlsrpt"; boundary="`+boundary+`"`)
	w.WriteString("\r\n")
	fmt.Fprintf(&w, "--%s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 7bit\r\n\r\n%s\r\n", boundary, m.Text)
	fmt.Fprintf(&w, "--%s\r\nContent-Type: application/tlsrpt+gzip\r\nContent-Disposition: attachment; filename=\"%s\"\r\nContent-Transfer-Encoding: base64\r\n\r\n", boundary, m.Filename)
	enc := base64.StdEncoding.EncodeToString(gz)
	for len(enc) > 76 {
		w.WriteString(enc[:76] + "\r\n")
		enc = enc[76:]
	}
	w.WriteString(enc + "\r\n")
	fmt.Fprintf(&w, "--%s--\r\n", boundary)
	m.Raw = w.Bytes()
	return m
}
