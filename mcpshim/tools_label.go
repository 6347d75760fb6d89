package mcpshim

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

type labelArgs struct {
	Mailbox string   `json:"mailbox"`
	ID      string   `json:"id,omitempty"`
	IDs     []string `json:"ids,omitempty"`
	Folder  string   `json:"folder,omitempty"`
	Add     []string `json:"labels_add,omitempty" jsonschema:"1-64 bytes, no comma; case-insensitive"`
	Remove  []string `json:"labels_remove,omitempty"`
	Star    *bool    `json:"star,omitempty" jsonschema:"true stars, false unstars; omit to keep"`
}

// LabelData is email_label's data.
type LabelData struct {
	Changed  []string `json:"changed" jsonschema:"the ids whose labels or star changed"`
	NotFound []string `json:"not_found,omitempty"`
	Status   string   `json:"status" jsonschema:"ok, or partial when some ids were not found or could not be changed"`
	Issues   []Issue  `json:"issues,omitempty"`
}

// partial is the status of a change to several messages and an issue for
// each id that was not found or could not be changed (its file damaged or
// too large: the daemon's message names the file).
func partial(stage string, notFound []string, failed []protocol.ItemFailure) (status string, issues []Issue) {
	if len(notFound)+len(failed) == 0 {
		return "ok", nil
	}
	for _, id := range notFound {
		issues = append(issues, Issue{Code: protocol.CodeNotFound, Stage: stage, Message: "no such message", ID: id})
	}
	for _, f := range failed {
		issues = append(issues, Issue{Code: f.Code, Stage: stage, Message: f.Message, ID: f.ID,
			Retryable: f.Code == protocol.CodeRateLimited || f.Code == protocol.CodeTimeout || f.Code == protocol.CodeUnavailable})
	}
	return "partial", issues
}

// idList gathers id and ids into one list, id first.
func idList(id string, ids []string) []string {
	out := append([]string{}, ids...)
	if id != "" {
		out = append([]string{id}, out...)
	}
	return out
}

func (s *Server) toolEmailLabel() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "email_label",
		Description: "Label, unlabel, star or unstar one message (id) or several (ids); email_list filters by label and starred.",
		Annotations: annotations("Label messages", false, false, true, false),
	}, func(sc *jsonschema.Schema) {
		sc.Properties["ids"].MaxItems = new(500)
		sc.Properties["labels_add"].MaxItems = new(20)
		sc.Properties["labels_remove"].MaxItems = new(20)
		sc.Properties["folder"].Enum = folderEnum
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in *labelArgs) (string, LabelData, *NextAction, error) {
		ids := idList(in.ID, in.IDs)
		if len(ids) == 0 {
			return "", LabelData{}, nil, fail(protocol.CodeInvalidInput, "give id or ids")
		}
		if len(in.Add) == 0 && len(in.Remove) == 0 && in.Star == nil {
			return "", LabelData{}, nil, fail(protocol.CodeInvalidInput, "nothing to change: give labels_add, labels_remove or star")
		}
		var out protocol.MessageLabeled
		args := protocol.MessageLabelArgs{Mailbox: in.Mailbox, Folder: in.Folder, IDs: ids, Add: in.Add, Remove: in.Remove, Star: in.Star}
		if err := s.call(ctx, protocol.VerbMessageLabel, args, &out); err != nil {
			return "", LabelData{}, nil, messageHint(err, in.Mailbox, in.Folder)
		}
		status, issues := partial("label", out.NotFound, out.Failed)
		data := LabelData{Changed: orEmpty(out.Changed), NotFound: out.NotFound, Status: status, Issues: issues}
		return fmt.Sprintf("changed %d of %d message(s)", len(data.Changed), len(ids)), data, nil, nil
	})
}

type purgeArgs struct {
	Mailbox string   `json:"mailbox"`
	ID      string   `json:"id,omitempty"`
	IDs     []string `json:"ids,omitempty"`
	Before  string   `json:"before,omitempty" jsonschema:"instead of ids: all received before this RFC 3339 time or YYYY-MM-DD"`
}

// PurgeData is email_purge's data.
type PurgeData struct {
	Mailbox  string   `json:"mailbox"`
	Purged   []string `json:"purged" jsonschema:"the ids removed for good"`
	NotFound []string `json:"not_found,omitempty" jsonschema:"ids that are not in trash (only trash can be purged)"`
	Issues   []Issue  `json:"issues,omitempty" jsonschema:"messages that could not be removed, each with the reason"`
}

func (s *Server) toolEmailPurge() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "email_purge",
		Description: "Delete messages in trash for good (raw copies and attachments too); cannot be undone. Move mail to trash first with email_move.",
		Annotations: annotations("Purge trash", false, true, true, false),
	}, func(sc *jsonschema.Schema) {
		sc.Properties["ids"].MaxItems = new(500)
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in *purgeArgs) (string, PurgeData, *NextAction, error) {
		ids := idList(in.ID, in.IDs)
		before, err := parseWhen("before", in.Before)
		if err != nil {
			return "", PurgeData{}, nil, err
		}
		switch {
		case len(ids) == 0 && before == nil:
			return "", PurgeData{}, nil, fail(protocol.CodeInvalidInput, "give id, ids or before")
		case len(ids) > 0 && before != nil:
			return "", PurgeData{}, nil, fail(protocol.CodeInvalidInput, "give id (or ids) or before, not both: before purges every message of trash received before it, id only that one")
		}
		var out protocol.MessagePurged
		if err := s.call(ctx, protocol.VerbMessagePurge, protocol.MessagePurgeArgs{Mailbox: in.Mailbox, IDs: ids, Before: before}, &out); err != nil {
			return "", PurgeData{}, nil, messageHint(err, in.Mailbox, protocol.FolderTrash)
		}
		_, issues := partial("purge", nil, out.Failed)
		data := PurgeData{Mailbox: in.Mailbox, Purged: orEmpty(out.Purged), NotFound: out.NotFound, Issues: issues}
		sum := fmt.Sprintf("purged %d message(s) from %s/trash", len(data.Purged), in.Mailbox)
		if len(out.NotFound) > 0 {
			sum += "; not in trash: " + strings.Join(out.NotFound, ", ")
		}
		if len(out.Failed) > 0 {
			sum += fmt.Sprintf("; %d could not be removed (see issues)", len(out.Failed))
		}
		return sum, data, nil, nil
	})
}
