package control

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
)

// fakeBackend is a Backend for tests of the API's own decisions: a fixed
// set of mailboxes and, when queue is set, a send pipeline with that queue
// and nothing behind it.
type fakeBackend struct {
	cfg       *config.Config
	mailboxes map[string]*registry.Mailbox
	queue     Queue
}

func (f *fakeBackend) Config() *config.Config {
	if f.cfg == nil {
		return &config.Config{Domains: []string{"example.test"}}
	}
	return f.cfg
}

func (f *fakeBackend) RestartPending() []string { return nil }

func (f *fakeBackend) Mailbox(name string) (*registry.Mailbox, bool) {
	m, ok := f.mailboxes[name]
	return m, ok
}

func (f *fakeBackend) Mailboxes() []*registry.Mailbox {
	return slices.SortedFunc(maps.Values(f.mailboxes), func(a, b *registry.Mailbox) int { return strings.Compare(a.Name, b.Name) })
}

func (f *fakeBackend) DisplayName(string) string                { return "" }
func (f *fakeBackend) TrustedSenders(string) ([]string, string) { return nil, "global" }
func (f *fakeBackend) Prune(string, bool) (protocol.PruneResult, error) {
	return protocol.PruneResult{}, nil
}
func (f *fakeBackend) Usage(string) protocol.MailboxUsage                           { return protocol.MailboxUsage{} }
func (f *fakeBackend) Hooks() []protocol.Hook                                       { return nil }
func (f *fakeBackend) Health(context.Context) []protocol.Finding                    { return nil }
func (f *fakeBackend) Listeners() []string                                          { return nil }
func (f *fakeBackend) LastReload() *protocol.ReloadStatus                           { return nil }
func (f *fakeBackend) HookRuns(func(protocol.HookRun) bool, int) []protocol.HookRun { return nil }

func (f *fakeBackend) Outbound() Outbound {
	if f.queue == nil {
		return nil
	}
	return fakeOutbound{f.queue}
}

// fakeOutbound steers a queue and sends nothing.
type fakeOutbound struct{ q Queue }

func (o fakeOutbound) Send(context.Context, outbound.SendRequest) (protocol.SendResult, error) {
	return protocol.SendResult{}, protocol.Errorf(protocol.CodeUnavailable, "this test sends nothing")
}

func (o fakeOutbound) Status(string, string, outbound.HeaderReader) (protocol.SendResult, error) {
	return protocol.SendResult{}, protocol.Errorf(protocol.CodeNotFound, "this test sent nothing")
}

func (o fakeOutbound) RateUsage(string, uint32, config.SendPolicy) []protocol.SendRate { return nil }
func (o fakeOutbound) Queue() Queue                                                    { return o.q }
