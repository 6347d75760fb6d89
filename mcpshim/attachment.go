package mcpshim

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

// Caps for email_attachment.
const (
	DefaultAttachmentText = 20000   // characters of a text attachment
	MaxAttachmentBase64   = 1 << 20 // bytes returned as base64
)

type attachmentArgs struct {
	Mailbox  string `json:"mailbox"`
	ID       string `json:"id"`
	Folder   string `json:"folder,omitempty"`
	Index    int    `json:"index,omitempty" jsonschema:"in attachment_list, from 0"`
	Filename string `json:"filename,omitempty" jsonschema:"instead of index"`
	Mode     string `json:"mode,omitempty" jsonschema:"default auto: text for text types, else path"`
	MaxChars int    `json:"max_chars,omitempty" jsonschema:"text window, default 20000"`
}

// givesIndex reports whether the call names an index, 0 included, which
// the decoded arguments cannot tell from no index.
func givesIndex(req *mcp.CallToolRequest) bool {
	if req == nil || req.Params == nil {
		return false
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(req.Params.Arguments, &args) != nil {
		return false
	}
	v, ok := args["index"]
	return ok && string(v) != "null"
}

// AttachmentData is email_attachment's data.
type AttachmentData struct {
	Filename    string      `json:"filename"`
	ContentType string      `json:"content_type"`
	Size        int64       `json:"size"`
	Path        string      `json:"path" jsonschema:"absolute path; open it with your own file tools"`
	Mode        string      `json:"mode"`
	Text        string      `json:"text,omitempty"`
	Truncated   bool        `json:"truncated,omitempty"`
	Base64      string      `json:"base64,omitempty"`
	Trust       *TrustFacts `json:"trust"`
	Fence       *FenceLabel `json:"fence,omitempty"`
}

func (s *Server) toolEmailAttachment() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "email_attachment",
		Description: "Read a message's attachment: text as text (windowed), others as a path to open or base64 (up to 1 MiB). Untrusted text is fenced.",
		Annotations: annotations("Read attachment", true, false, true, false),
	}, func(sc *jsonschema.Schema) {
		sc.Properties["mode"].Enum = []any{"auto", "text", "path", "base64"}
		sc.Properties["folder"].Enum = folderEnum
		sc.Properties["index"].Minimum = new(0.0)
		sc.Properties["max_chars"].Minimum = new(1.0)
		sc.Properties["max_chars"].Maximum = new(float64(MaxReadWindow))
	}, s.emailAttachment)
}

// readNext points at email_read, whose attachment_list names a message's
// attachments.
func readNext(in *attachmentArgs) *NextAction {
	args := withArgs(map[string]any{"mailbox": in.Mailbox, "id": in.ID}, map[string]string{"folder": in.Folder})
	return &NextAction{Instruction: "Read the message: its attachment_list names its attachments and their indexes.", Tool: "email_read", Arguments: args}
}

func (s *Server) emailAttachment(ctx context.Context, req *mcp.CallToolRequest, in *attachmentArgs) (string, AttachmentData, *NextAction, error) {
	var zero AttachmentData
	if in.Filename != "" && (in.Index != 0 || givesIndex(req)) {
		// Either may name another attachment than the other; serving one
		// would hand the caller a file it did not ask for.
		return "", zero, nil, fail(protocol.CodeInvalidInput, "give index or filename, not both (index %d, filename %q)", in.Index, in.Filename)
	}
	m, err := s.read(ctx, protocol.MessageReadArgs{Mailbox: in.Mailbox, ID: in.ID, Folder: in.Folder, MaxChars: 1})
	if err != nil {
		return "", zero, nil, messageHint(err, in.Mailbox, in.Folder)
	}
	idx, err := pickAttachment(m, in)
	if err != nil {
		return "", zero, nil, err
	}
	att := m.AttachmentList[idx]
	mailboxDir, err := s.mailboxDir(ctx, in.Mailbox)
	if err != nil {
		return "", zero, nil, err
	}
	rel, err := attachmentRel(mailboxDir, m.Path, att.Path)
	if err != nil {
		return "", zero, nil, err
	}
	data := AttachmentData{Filename: att.Filename, ContentType: att.ContentType, Size: att.Size,
		Path: filepath.Join(mailboxDir, rel), Trust: trustFacts(m), Mode: attachmentMode(in.Mode, att.ContentType)}
	// The name, its type and the path that carries the name are the
	// sender's words: an untrusted sender's stay in the fence, and the
	// summary names the attachment by its index.
	var f *fence
	name := fmt.Sprintf("%s (%s, %d bytes)", att.Filename, att.ContentType, att.Size)
	if fenced(m) {
		f = newFence()
		data.Filename, data.ContentType, data.Path = f.inline(data.Filename), f.inline(data.ContentType), f.inline(data.Path)
		data.Fence = f.label()
		name = fmt.Sprintf("%d of the message (%d bytes; its name and path are fenced in data)", idx, att.Size)
	}
	if data.Mode == "path" {
		return fmt.Sprintf("attachment %s is at the path in data", name), data, nil, nil
	}
	limit := int64(MaxAttachmentBase64)
	maxChars := cmp.Or(in.MaxChars, DefaultAttachmentText) // the schema refuses below 0
	if data.Mode == "text" {
		limit = int64(maxChars) * 4
	}
	content, full, err := readInRoot(mailboxDir, rel, limit)
	if err != nil {
		return "", zero, nil, err
	}
	switch data.Mode {
	case "base64":
		if !full {
			return "", zero, nil, withNext(fail(protocol.CodeTooLarge, "attachment %s is larger than %d bytes", name, MaxAttachmentBase64),
				&NextAction{Instruction: "Open the file at the path instead.", Tool: "email_attachment",
					Arguments: map[string]any{"mailbox": in.Mailbox, "id": in.ID, "index": idx, "mode": "path"}})
		}
		data.Base64 = base64.StdEncoding.EncodeToString(content)
	case "text":
		attachmentText(&data, f, content, full, maxChars)
	}
	return fmt.Sprintf("attachment %s as %s", name, data.Mode), data, nil, nil
}

// pickAttachment returns the index of the attachment in asks for, by
// filename or by index.
func pickAttachment(m *protocol.Message, in *attachmentArgs) (int, error) {
	if len(m.AttachmentList) == 0 {
		return 0, withNext(fail(protocol.CodeNotFound, "message %s has no attachments", in.ID), readNext(in))
	}
	if in.Filename != "" {
		if i := slices.IndexFunc(m.AttachmentList, func(a protocol.Attachment) bool { return a.Filename == in.Filename }); i >= 0 {
			return i, nil
		}
		return 0, withNext(fail(protocol.CodeNotFound, "message %s has no attachment named %q", in.ID, in.Filename), readNext(in))
	}
	if in.Index >= len(m.AttachmentList) {
		return 0, withNext(fail(protocol.CodeNotFound, "message %s has %d attachment(s); index %d is out of range", in.ID, len(m.AttachmentList), in.Index), readNext(in))
	}
	return in.Index, nil
}

// attachmentMode resolves "auto" (or no mode): text for a text type, else the
// path.
func attachmentMode(mode, contentType string) string {
	if mode != "" && mode != "auto" {
		return mode
	}
	if isTextType(contentType) {
		return "text"
	}
	return "path"
}

// attachmentText puts up to maxChars of content into data as text, fenced
// by f unless f is nil (the message is trusted or our own sent copy).
func attachmentText(data *AttachmentData, f *fence, content []byte, full bool, maxChars int) {
	if !utf8.Valid(content) && full {
		content = []byte(strings.ToValidUTF8(string(content), "\uFFFD"))
	}
	text := strings.ToValidUTF8(string(content), "")
	if utf8.RuneCountInString(text) > maxChars {
		text = string([]rune(text)[:maxChars])
		full = false
	}
	data.Truncated = !full
	if f != nil {
		text = f.block(text)
		data.Fence = f.label()
	}
	data.Text = text
}

func (s *Server) mailboxDir(ctx context.Context, name string) (string, error) {
	var list protocol.MailboxList
	if err := s.call(ctx, protocol.VerbMailboxList, protocol.Empty{}, &list); err != nil {
		return "", err
	}
	for _, mb := range list.Mailboxes {
		if mb.Name == name && mb.Path != "" {
			return mb.Path, nil
		}
	}
	return "", &protocol.Error{Code: protocol.CodeNotFound, Missing: protocol.MissingMailbox,
		Message: fmt.Sprintf("no mailbox %q among yours: list your mailboxes to see the ones you own", name)}
}

// attachmentRel turns an attachment path from the daemon (absolute, or relative
// to the folder of the message at msgPath or to the mailbox) into a path
// relative to the mailbox folder, refusing anything that leaves it.
func attachmentRel(mailboxDir, msgPath, p string) (string, error) {
	folderDir := filepath.Dir(msgPath)
	if p == "" {
		return "", fail(protocol.CodeNotFound, "the attachment has no stored file")
	}
	var candidates []string
	if filepath.IsAbs(p) {
		candidates = []string{p}
	} else {
		if folderDir != "" && folderDir != "." {
			if !filepath.IsAbs(folderDir) {
				folderDir = filepath.Join(mailboxDir, folderDir)
			}
			candidates = append(candidates, filepath.Join(folderDir, p))
		}
		candidates = append(candidates, filepath.Join(mailboxDir, p))
	}
	var firstRel string
	for i, c := range candidates {
		rel, err := filepath.Rel(mailboxDir, filepath.Clean(c))
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
			return "", fail(protocol.CodeForbidden, "attachment path %q leaves the mailbox folder", p)
		}
		if i == 0 {
			firstRel = rel
		}
		if _, err := os.Lstat(c); err == nil {
			return rel, nil
		}
	}
	return firstRel, nil
}

// readInRoot reads at most limit bytes of rel inside dir; os.Root refuses
// symlinks and ".." that escape dir, so a planted link cannot redirect the
// read. A hard link can, where the system does not protect them: the file
// must belong to whoever owns dir, as the daemon requires of a mailbox's
// files (the shim may run as root, who reads every mailbox).
func readInRoot(dir, rel string, limit int64) ([]byte, bool, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, false, fail(protocol.CodeForbidden, "opening the mailbox folder: %v", err)
	}
	defer root.Close()
	dst, err := root.Stat(".")
	if err != nil {
		return nil, false, fail(protocol.CodeForbidden, "the mailbox folder: %v", err)
	}
	f, err := openRegularIn(root, rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, fail(protocol.CodeNotFound, "attachment file %s is missing", rel)
		}
		return nil, false, fail(protocol.CodeForbidden, "attachment %s: %v", rel, err)
	}
	defer f.Close()
	fst, err := f.Stat()
	if err != nil {
		return nil, false, fail(protocol.CodeInternal, "attachment %s: %v", rel, err)
	}
	if owner, uid := dst.Sys().(*syscall.Stat_t).Uid, fst.Sys().(*syscall.Stat_t).Uid; uid != owner {
		return nil, false, fail(protocol.CodeForbidden, "attachment %s belongs to uid %d, not to the mailbox's owner (uid %d): it is not the mailbox's file", rel, uid, owner)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, false, fail(protocol.CodeInternal, "reading attachment: %v", err)
	}
	if int64(len(b)) > limit {
		return b[:limit], false, nil
	}
	return b, true, nil
}

func isTextType(ct string) bool {
	ct = strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
	return strings.HasPrefix(ct, "text/") || strings.HasSuffix(ct, "+json") || strings.HasSuffix(ct, "+xml") ||
		slices.Contains([]string{"application/json", "application/xml", "application/csv"}, ct)
}
