package control

import (
	"context"
	"errors"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/daemon/trust"
	"github.com/mailctl/mailctl/protocol"
)

// maxTrustedSenders bounds the patterns one mailbox.update may set.
const maxTrustedSenders = 100

// mailboxUpdateTarget is the mailbox to change. What its owner may change is
// the operator's call ([mailbox_rules]); root may change anything on a
// registry mailbox. Mailboxes declared in config.toml change only there
// (AccessManage keeps other callers out; the handler tells root).
func mailboxUpdateTarget(s *Server, _ *call, a *protocol.MailboxUpdateArgs) (target, error) {
	quota := a.QuotaBytes != nil || a.QuotaMessages != nil || a.InheritQuota
	if a.DisplayName == nil && a.TrustedSenders == nil && !a.InheritTrustedSenders && !quota {
		return target{}, protocol.Errorf(protocol.CodeInvalidInput, "nothing to change: give display_name, trusted_senders, inherit_trusted_senders, quota_bytes, quota_messages or inherit_quota")
	}
	if a.InheritQuota && (a.QuotaBytes != nil || a.QuotaMessages != nil) {
		return target{}, protocol.Errorf(protocol.CodeInvalidInput, "quota_bytes or quota_messages, and inherit_quota, exclude each other: give one")
	}
	if a.QuotaBytes != nil && *a.QuotaBytes < 0 || a.QuotaMessages != nil && *a.QuotaMessages < 0 {
		return target{}, protocol.Errorf(protocol.CodeInvalidInput, "quota_bytes and quota_messages: give a limit, or 0 for none")
	}
	if a.TrustedSenders != nil && a.InheritTrustedSenders {
		return target{}, protocol.Errorf(protocol.CodeInvalidInput, "trusted_senders and inherit_trusted_senders exclude each other: give one")
	}
	if a.DisplayName != nil {
		if err := config.ValidDisplayName(*a.DisplayName); err != nil {
			return target{}, protocol.Errorf(protocol.CodeInvalidInput, "%v", err)
		}
	}
	if a.TrustedSenders != nil {
		if len(*a.TrustedSenders) > maxTrustedSenders {
			return target{}, protocol.Errorf(protocol.CodeInvalidInput, "%d trusted senders; at most %d (use *@domain patterns)", len(*a.TrustedSenders), maxTrustedSenders)
		}
		for _, p := range *a.TrustedSenders {
			if err := trust.ValidSenderPattern(p); err != nil {
				return target{}, protocol.Errorf(protocol.CodeInvalidInput, "%v", err)
			}
		}
	}
	t := mailboxTarget(a.Name)
	rules := s.cfg().MailboxRules
	switch {
	case quota:
		t.rootOnly = protocol.Errorf(protocol.CodeForbidden, "only the operator (root) sets quotas: ask the operator to raise yours, or remove mail")
	case (a.TrustedSenders != nil || a.InheritTrustedSenders) && !rules.OwnersMaySetTrustedSenders:
		fix := "ask the operator to set them for you, or to allow it with mailbox_rules.owners_may_set_trusted_senders"
		if s.opts.Dev {
			// dev writes its config again at every start: the flag is
			// what lasts.
			fix = "in mailctl dev, restart dev with --trust PATTERN (mail between dev mailboxes stays trusted)"
		}
		t.rootOnly = protocol.Errorf(protocol.CodeForbidden,
			"only the operator sets trusted senders on this host (whose mail is trusted decides what reaches you unfenced and fires hooks): %s", fix)
	case a.DisplayName != nil && !*rules.OwnersMaySetDisplayName:
		t.rootOnly = protocol.Errorf(protocol.CodeForbidden,
			"only the operator sets display names on this host: ask the operator to set it for you, or to allow it with mailbox_rules.owners_may_set_display_name")
	}
	return t, nil
}

func handleMailboxUpdate(_ context.Context, s *Server, c *call, a *protocol.MailboxUpdateArgs) (any, error) {
	m := c.box()
	if m.Source == registry.SourceConfig {
		return nil, protocol.Errorf(protocol.CodeForbidden, "mailbox %q is declared in config.toml; set its display_name, trusted_senders and quota there and reload", a.Name)
	}
	_, err := s.reg.UpdateMailbox(m.Name, m.ID, func(r *registry.Record) {
		if a.DisplayName != nil {
			r.DisplayName = *a.DisplayName
		}
		switch {
		case a.InheritTrustedSenders:
			r.TrustedSenders = nil
		case a.TrustedSenders != nil:
			list := append([]string{}, *a.TrustedSenders...)
			r.TrustedSenders = &list
		}
		if a.InheritQuota {
			r.QuotaBytes, r.QuotaMessages = nil, nil
		}
		if a.QuotaBytes != nil {
			r.QuotaBytes = new(*a.QuotaBytes)
		}
		if a.QuotaMessages != nil {
			r.QuotaMessages = new(*a.QuotaMessages)
		}
	})
	if errors.Is(err, registry.ErrNoSuchMailbox) {
		return nil, notFoundMailbox(a.Name) // deleted, and perhaps created again, since the access check
	}
	if err != nil {
		return nil, err
	}
	s.log.Info("mailbox updated", "mailbox", m.Name, "by_uid", c.caller.UID,
		"display_name", a.DisplayName != nil, "trusted_senders", a.TrustedSenders != nil || a.InheritTrustedSenders, "quota", quotaArgs(a))
	mb := s.describe(m)
	return mb, nil
}

// quotaArgs says what an update does to the quota, for the log line.
func quotaArgs(a *protocol.MailboxUpdateArgs) string {
	switch {
	case a.InheritQuota:
		return "default"
	case a.QuotaBytes != nil || a.QuotaMessages != nil:
		return "set"
	}
	return ""
}
