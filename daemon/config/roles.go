package config

import (
	"slices"
	"strings"
)

// RoleAddresses are local parts that carry a role on every mail domain and
// so belong to the operator: the mailbox names of RFC 2142 (business,
// network-operations and service roles), those a certificate authority may
// mail to validate control of a domain (CA/Browser Forum Baseline
// Requirements 3.2.2.4.4: admin, administrator, webmaster, hostmaster,
// postmaster), and the mail system's own (mailer-daemon, root). DMARC and
// TLS reports, abuse complaints and certificate approvals go to them. Only
// root may create a mailbox with one of these names.
var RoleAddresses = []string{
	"abuse", "admin", "administrator", "ftp", "hostmaster", "info", "mailer-daemon", "marketing", "news",
	"noc", "postmaster", "root", "sales", "security", "support", "usenet", "uucp", "webmaster", "www",
}

// RequiredRoleAddresses are the role addresses every mail domain must
// answer: postmaster (RFC 5321 4.5.1) and abuse (RFC 2142). `mailctl setup`
// declares them for the operator and `mailctl doctor` warns when one is
// missing.
var RequiredRoleAddresses = []string{"postmaster", "abuse"}

// IsRoleAddress reports whether a local part (before any +tag) is a role
// address.
func IsRoleAddress(local string) bool {
	base, _, _ := strings.Cut(strings.ToLower(local), "+")
	return slices.Contains(RoleAddresses, base)
}

// RouteOf reports how the role address local reaches a mailbox according
// to the config alone: a declared mailbox of that name, or an alias of one.
// It returns the mailbox's name, or "" when the config does not route it.
func (c *Config) RouteOf(local string) string {
	local = strings.ToLower(local)
	for _, m := range c.Mailboxes {
		if m.Name == local {
			return m.Name
		}
		for _, a := range m.Aliases {
			a = strings.ToLower(a)
			if a == local || strings.HasPrefix(a, local+"@") && c.IsLocalDomain(strings.TrimPrefix(a, local+"@")) {
				return m.Name
			}
		}
	}
	return ""
}
