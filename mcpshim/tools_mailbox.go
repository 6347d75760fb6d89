package mcpshim

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

// MailboxRow is one row of mailbox_list.
type MailboxRow struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// DisplayName is what outgoing From carries; empty for none.
	DisplayName string `json:"display_name,omitempty" jsonschema:"the name outgoing From carries (set with mailbox_create display_name)"`
	InboxPath   string `json:"inbox_path"`
	SentPath    string `json:"sent_path"`
	Total       int    `json:"total"`
	Unread      int    `json:"unread"`
	SentCount   int    `json:"sent_count"`
	Registered  bool   `json:"registered" jsonschema:"true for mailboxes created over the socket (deletable by their owner); false for operator-declared ones"`
	Owner       string `json:"owner"`
	// The policies that govern the mailbox, set by the operator.
	TrustedSenders []string               `json:"trusted_senders" jsonschema:"address patterns whose authenticated mail is trusted (unfenced); empty: no mail to this mailbox is trusted"`
	Usage          *protocol.MailboxUsage `json:"usage,omitempty" jsonschema:"bytes and messages used, and the quota (0: none); over_quota: mail waits and sends fail until you purge some"`
	Send           *protocol.SendLimits   `json:"send_policy,omitempty" jsonschema:"what sending allows: enabled, dry_run_only, hold (operator approval), allow-lists (empty: anyone), size, attachment and recipient limits, rates per minute/hour/day (0: none); rate: sends used and left per window, next_free_ms when none are left"`
}

// MailboxListData is mailbox_list's data.
type MailboxListData struct {
	Mailboxes []MailboxRow `json:"mailboxes"`
}

type noArgs struct{}

func (s *Server) toolMailboxList() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "mailbox_list",
		Description: "List your mailboxes (root: all) with address, folders on disk and counts. Start here.",
		Annotations: annotations("List mailboxes", true, false, true, false),
	}, nil, func(ctx context.Context, _ *mcp.CallToolRequest, _ *noArgs) (string, MailboxListData, *NextAction, error) {
		var list protocol.MailboxList
		if err := s.call(ctx, protocol.VerbMailboxList, protocol.Empty{}, &list); err != nil {
			return "", MailboxListData{}, nil, err
		}
		data := MailboxListData{Mailboxes: []MailboxRow{}}
		unread := 0
		for _, m := range list.Mailboxes {
			data.Mailboxes = append(data.Mailboxes, mailboxRow(m))
			unread += m.Unread
		}
		if len(list.Mailboxes) == 0 {
			return "no mailboxes yet", data, &NextAction{Instruction: "Create one with mailbox_create.", Tool: "mailbox_create", Arguments: map[string]any{"name": "agent"}}, nil
		}
		return fmt.Sprintf("%d mailbox(es), %d unread message(s)", len(list.Mailboxes), unread), data, nil, nil
	})
}

func mailboxRow(m protocol.Mailbox) MailboxRow {
	r := MailboxRow{Name: m.Name, Address: m.Address, DisplayName: m.DisplayName, InboxPath: m.InboxPath, SentPath: m.SentPath,
		Total: m.Total, Unread: m.Unread, SentCount: m.SentCount, Registered: m.Source != "config", Owner: m.Owner, Send: m.Send, Usage: m.Usage,
		TrustedSenders: []string{}} // shown when empty: it means no mail to the mailbox is trusted
	if m.Trust != nil && m.Trust.TrustedSenders != nil {
		r.TrustedSenders = m.Trust.TrustedSenders
	}
	return r
}

type mailboxCreateArgs struct {
	Name           string    `json:"name" jsonschema:"the address's local part"`
	DisplayName    *string   `json:"display_name,omitempty" jsonschema:"the name in From; empty removes it"`
	TrustedSenders *[]string `json:"trusted_senders,omitempty" jsonschema:"replaces who is trusted: a@x.com, *@x.com, *@*.x.com; [] no one"`
}

// MailboxCreateData is mailbox_create's data.
type MailboxCreateData struct {
	MailboxRow
	Created bool `json:"created" jsonschema:"false when the mailbox already existed and is yours"`
}

func (s *Server) toolMailboxCreate() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "mailbox_create",
		Description: "Create a mailbox you own (or find it: created=false) and return its address.",
		Annotations: annotations("Create mailbox", false, false, true, false),
	}, func(sc *jsonschema.Schema) {
		sc.Properties["name"].Pattern = `^[a-z0-9._-]+$`
		sc.Properties["name"].MaxLength = new(64)
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in *mailboxCreateArgs) (string, MailboxCreateData, *NextAction, error) {
		var out protocol.MailboxCreated
		if err := s.call(ctx, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: in.Name}, &out); err != nil {
			return "", MailboxCreateData{}, nil, err
		}
		summary := out.Address + " already exists and is yours"
		if out.Created {
			summary = "created " + out.Address
		}
		if in.DisplayName != nil || in.TrustedSenders != nil {
			var upd protocol.Mailbox
			err := s.call(ctx, protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: in.Name, DisplayName: in.DisplayName, TrustedSenders: in.TrustedSenders}, &upd)
			if err != nil {
				if out.Created {
					err = withNext(err, &NextAction{Instruction: "The mailbox was created; only the settings were refused. Fix or drop them and call again (it is idempotent).",
						Tool: "mailbox_create", Arguments: map[string]any{"name": in.Name}})
				}
				return "", MailboxCreateData{}, nil, err
			}
			out.Mailbox = upd
			summary += ", settings updated"
		}
		return summary, MailboxCreateData{MailboxRow: mailboxRow(out.Mailbox), Created: out.Created}, nil, nil
	})
}

type mailboxDeleteArgs struct {
	Name  string `json:"name"`
	Force bool   `json:"force,omitempty" jsonschema:"delete its mail too"`
}

func (s *Server) toolMailboxDelete() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "mailbox_delete",
		Description: "Delete a mailbox you created (not an operator's).",
		Annotations: annotations("Delete mailbox", false, true, true, false),
	}, nil, func(ctx context.Context, _ *mcp.CallToolRequest, in *mailboxDeleteArgs) (string, protocol.Deleted, *NextAction, error) {
		var out protocol.Deleted
		err := s.call(ctx, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: in.Name, Force: in.Force}, &out)
		if err != nil {
			if protocol.CodeOf(err) == protocol.CodeConflict && !in.Force {
				err = withNext(err, &NextAction{
					Instruction: "Only if the user confirmed that the mail may be destroyed, call again with force=true.",
					Tool:        "mailbox_delete", Arguments: map[string]any{"name": in.Name, "force": true}})
			}
			return "", out, nil, err
		}
		out.Name = cmp.Or(out.Name, in.Name)
		return "deleted mailbox " + in.Name, out, nil, nil
	})
}

type hookCreateArgs struct {
	Mailbox         string   `json:"mailbox"`
	Event           string   `json:"event"`
	Cmd             []string `json:"cmd" jsonschema:"argv, cmd[0] absolute; no shell"`
	Name            string   `json:"name,omitempty" jsonschema:"default: derived, stable"`
	TimeoutSecs     int      `json:"timeout_secs,omitempty" jsonschema:"default 60"`
	FireOnUntrusted bool     `json:"fire_on_untrusted,omitempty" jsonschema:"DANGEROUS: also on untrusted mail"`
	FireOnAuto      bool     `json:"fire_on_auto_submitted,omitempty" jsonschema:"also on auto-replies (skipped so robots cannot loop)"`
	FireOnLists     bool     `json:"fire_on_lists,omitempty" jsonschema:"also on mailing-list mail"`
}

func (s *Server) toolHookCreate() toolSpec {
	return newTool(&mcp.Tool{
		Name: "hook_create",
		Description: "Run a command as you on new mail (on_receive, where fire_on_* apply) or after a send; it gets the message in MAILCTL_* variables and on stdin. " +
			"WARNING: fire_on_untrusted lets anyone who can mail the address run it: only if the user asked.",
		Annotations: annotations("Create hook", false, false, true, false),
	}, func(sc *jsonschema.Schema) {
		sc.Properties["event"].Enum = []any{protocol.EventOnReceive, protocol.EventAfterSend}
		sc.Properties["cmd"].MinItems = new(1)
		sc.Properties["timeout_secs"].Minimum = new(1.0)
		sc.Properties["timeout_secs"].Maximum = new(600.0)
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in *hookCreateArgs) (string, protocol.Hook, *NextAction, error) {
		if (in.FireOnUntrusted || in.FireOnAuto || in.FireOnLists) && in.Event != protocol.EventOnReceive {
			return "", protocol.Hook{}, nil, fail(protocol.CodeInvalidInput, "fire_on_untrusted, fire_on_auto_submitted and fire_on_lists apply to on_receive hooks only")
		}
		var out protocol.Hook
		err := s.call(ctx, protocol.VerbHookCreate, protocol.HookCreateArgs{
			Mailbox: in.Mailbox, Event: in.Event, Cmd: in.Cmd, Name: in.Name,
			TimeoutSecs: in.TimeoutSecs, FireOnUntrusted: in.FireOnUntrusted, FireOnAuto: in.FireOnAuto, FireOnLists: in.FireOnLists}, &out)
		if err != nil {
			return "", out, nil, err
		}
		summary := fmt.Sprintf("hook %s runs %s on %s for %s", out.Name, clip(strings.Join(out.Cmd, " "), 80), out.Event, out.Mailbox)
		if out.FireOnUntrusted {
			summary += " (also on untrusted mail)"
		}
		return summary, out, nil, nil
	})
}

type hookListArgs struct {
	Mailbox string `json:"mailbox,omitempty" jsonschema:"only this mailbox's"`
}

func (s *Server) toolHookList() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "hook_list",
		Description: "List the hooks on your mailboxes (the operator's have source=config).",
		Annotations: annotations("List hooks", true, false, true, false),
	}, nil, func(ctx context.Context, _ *mcp.CallToolRequest, in *hookListArgs) (string, protocol.HookList, *NextAction, error) {
		var out protocol.HookList
		if err := s.call(ctx, protocol.VerbHookList, protocol.HookListArgs{Mailbox: in.Mailbox}, &out); err != nil {
			return "", out, nil, err
		}
		out.Hooks = orEmpty(out.Hooks)
		return fmt.Sprintf("%d hook(s)", len(out.Hooks)), out, nil, nil
	})
}

type hookDeleteArgs struct {
	Name    string `json:"name" jsonschema:"from hook_list"`
	Mailbox string `json:"mailbox,omitempty" jsonschema:"needed when two of your mailboxes have a hook of that name"`
}

func (s *Server) toolHookDelete() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "hook_delete",
		Description: "Delete a hook you created (not an operator's).",
		Annotations: annotations("Delete hook", false, true, true, false),
	}, nil, func(ctx context.Context, _ *mcp.CallToolRequest, in *hookDeleteArgs) (string, protocol.Deleted, *NextAction, error) {
		var out protocol.Deleted
		if err := s.call(ctx, protocol.VerbHookDelete, protocol.HookDeleteArgs{Name: in.Name, Mailbox: in.Mailbox}, &out); err != nil {
			return "", out, nil, err // a not_found gets notFoundNext's hook_list
		}
		out.Name = cmp.Or(out.Name, in.Name)
		return "deleted hook " + in.Name, out, nil, nil
	})
}
