package daemon

import (
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestReindexLogsTheLineItsHelpNames: `mailctl reindex --help` (docs/cli.md)
// tells the operator which log line says the rebuild is done, to wait for
// it in the journal; the daemon writes that line, with why=reindex. The
// help named "index rebuilt from the files", which no line says.
func TestReindexLogsTheLineItsHelpNames(t *testing.T) {
	operatorOnly(t)
	doc, err := os.ReadFile("../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "### mailctl reindex")
	if !ok {
		t.Fatal("docs/cli.md has no section for mailctl reindex")
	}
	m := regexp.MustCompile(`the daemon logs "([^"]+)"`).FindStringSubmatch(sec)
	if m == nil {
		t.Fatal("mailctl reindex's help names no log line")
	}
	want := `msg="` + strings.Join(strings.Fields(m[1]), " ") + `" why=reindex`
	var logs testproc.Output
	td := startDaemonWith(t, "", Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	td.ensureMine(t, "alice")
	var out protocol.IndexRebuild
	if err := td.call(t, protocol.VerbIndexRebuild, nil, &out); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the line "+want, func() bool { return strings.Contains(logs.String(), want) })
}
