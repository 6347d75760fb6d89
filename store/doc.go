// Package store is the on-disk mailbox store: one directory per mailbox,
// owned by the mailbox's Linux user, holding messages as Markdown files with
// TOML frontmatter next to the raw message as received or sent.
//
// Layout under the store root (default /var/lib/mailctl/mailboxes, root 0711):
//
//	<mailbox>/                         owner 0700
//	  inbox/ sent/ archive/ trash/ drafts/   owner 0700
//	    2025-04-15-143022-hello.md       frontmatter + body, written last (the commit point)
//	    2025-04-15-143022-hello.eml      the raw message, the truth
//	    2025-04-15-143022-hello.attachments/report.pdf
//	    .tmp-<random>                    a write in progress or left by a crash; ignored
//
// A message file is "+++\n", the TOML frontmatter (Message), "+++\n", an empty
// line and the Markdown body. Ids are "<UTC time>-<slug of the subject>", so
// they sort by arrival; a collision gets "-2", "-3"... The slug spells the
// subject in lower-case ASCII ("Héllo Wörld" gives hello-world, "Привет"
// privet). Labels and the star are frontmatter fields like read, so they
// survive a rebuilt index; only messages in trash can be purged (Purge).
//
// The daemon runs as root but the owner can change anything inside its
// mailbox at any time. So every operation works on open directory
// descriptors, opens without following symlinks and checks what it opened
// (regular file, owned by the mailbox owner), sets owner and mode on file
// descriptors, and replaces files (temp, fsync, rename, fsync of the
// directory) instead of writing into them. A message is durable once Deliver
// returns.
//
// Listing and search go through the index, a SQLite database outside every
// mailbox (in a directory only root can enter: OpenIndexed) that holds a row
// and the full text of every message. It is derived from the files: a
// folder whose directory changed is scanned again, the rows a listing
// returns are checked against their files, and a damaged, deleted or older
// index is rebuilt from them (indexdb.go). Its memory is SQLite's page
// cache, bounded, whatever the number of messages.
package store
