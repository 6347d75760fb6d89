package main

import (
	"fmt"

	"github.com/mailctl/mailctl/protocol"
)

func init() {
	register(&command{name: "reindex", group: "operate", summary: "rebuild the message index from the mailboxes' files (root)", run: cmdReindex})
}

func cmdReindex(args []string) int {
	cf := newClientFlags("reindex", "reindex [--json]", `Throws the daemon's message index away and reads every mailbox's files back
into it, in the background (the daemon logs "index up to date with the
mailboxes' files" with why=reindex, the count and the rate when it is done).
The Markdown and .eml files are the truth; the index is derived from them and
lives in the state directory (state_dir/index/), where only root can reach
it. The daemon also rebuilds it by itself when it finds it damaged, deleted
or of an older version, and notices files changed by hand without being
asked. Listings keep working meanwhile: a folder not yet read back is read
when it is listed, and one that takes longer than 10 seconds answers that it
is being read (retry in a few seconds). Root only.`).withJSON()
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	if cf.fs.NArg() != 0 {
		return usageError(cf.fs, "reindex takes no arguments")
	}
	var out protocol.IndexRebuild
	if code, ok := cf.request(protocol.VerbIndexRebuild, protocol.Empty{}, &out); !ok {
		return code
	}
	fmt.Fprintf(stdout, "index thrown away; %d mailbox(es) are being read back from their files (see the daemon's log)\n", out.Mailboxes)
	return 0
}
