package smtpin

import "testing"

// TestNonASCIIEnvelopeNeedsSMTPUTF8: RFC 6531 3.4 lets a client send an
// address outside ASCII only in a transaction it opened with the SMTPUTF8
// parameter. Without it the address is refused, as the sender would refuse
// a bounce to it, and the same address with the parameter is taken.
func TestNonASCIIEnvelopeNeedsSMTPUTF8(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()

	c.cmd("MAIL FROM:<jörg@sender.example>", "553 5.6.7")
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<josé@example.com>", "553 5.6.7")
	c.cmd("RCPT TO:<a@example.com>", "250 ")
	c.cmd("RSET", "250 ")

	c.cmd("MAIL FROM:<jörg@sender.example> SMTPUTF8", "250 ")
	c.cmd("RCPT TO:<josé@example.com>", "250 ")
	c.cmd("RSET", "250 ")

	// The parameter belongs to one transaction: the next one without it is
	// held to ASCII again.
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<josé@example.com>", "553 5.6.7")
}
