// Package testpostfix holds what the tests that run a private Postfix
// instance (Debian's postfix package, its own config, queue and data
// directories) have in common.
package testpostfix

// services are the master.cf entries a private instance needs to take mail
// from sendmail or smtpd and hand it on over SMTP, LMTP or to a Maildir,
// with nothing chrooted so its clients can reach a test's sockets.
const services = `pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
lmtp      unix  -       -       n       -       -       lmtp
virtual   unix  -       n       n       -       -       virtual
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
`

// MasterCF returns a master.cf: the given lines (an smtpd listener, say)
// followed by the services every private instance needs.
func MasterCF(lines ...string) string {
	out := "\n"
	for _, l := range lines {
		out += l + "\n"
	}
	return out + services
}
