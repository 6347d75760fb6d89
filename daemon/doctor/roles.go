package doctor

import (
	"fmt"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/protocol"
)

// checkRoleAddresses warns when postmaster or abuse has no mailbox of the
// operator's (mail to them is refused, or lands with whoever owns the
// catch-all), and when a user holds a role mailbox created before role
// names were reserved to root.
func checkRoleAddresses(f *findings, cfg *config.Config) {
	domain := cfg.PrimaryDomain()
	declare := func(role string) string {
		return fmt.Sprintf("declare it in config.toml ([[mailboxes]] name = %q, owner = \"root\") and run %s", role, protocol.ReloadLine())
	}
	before := len(*f)
	for _, role := range config.RoleAddresses {
		if cfg.RouteOf(role) != "" {
			continue
		}
		if uid, ok := registered(cfg, role); ok && uid != 0 {
			f.add("role.user_owned", Warn, fmt.Sprintf("delete it (`sudo mailctl mailboxes delete %s`), then %s", role, declare(role)),
				"%s@%s is a mailbox of uid %d: a role address receives reports, complaints and certificate approvals for the whole domain and should be the operator's", role, domain, uid)
		}
	}
	for _, role := range config.RequiredRoleAddresses {
		if cfg.RouteOf(role) != "" {
			continue
		}
		if uid, ok := registered(cfg, role); ok && uid == 0 {
			continue
		}
		if cfg.CatchAll != "" {
			f.add("role.missing", Warn, declare(role), "no mailbox of the operator answers %s@%s: its mail lands in the catch-all %s", role, domain, cfg.CatchAll)
		} else {
			f.add("role.missing", Warn, declare(role), "no mailbox answers %s@%s: mail to it is refused, which RFC 5321 forbids for postmaster, and abuse reports are lost", role, domain)
		}
	}
	if len(*f) == before {
		f.add("role.ok", OK, "", "postmaster and abuse are the operator's")
	}
}
