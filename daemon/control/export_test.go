package control

import "github.com/mailctl/mailctl/store"

// RemoveDraftFunc is the step of draft.send that takes the sent draft out of
// drafts/.
type RemoveDraftFunc = func(s *Server, mailbox, id, version string) (bool, error)

// SwapRemoveDraft replaces that step (tests stop the daemon's work, or edit
// the draft, between queueing and removal) and returns the one it replaced.
func SwapRemoveDraft(f RemoveDraftFunc) RemoveDraftFunc {
	old := removeDraft
	removeDraft = f
	return old
}

// SwapRemoveDetached replaces the step of mailbox.delete that removes the
// deleted mailbox's files and returns the one it replaced.
func SwapRemoveDetached(f func(*store.Detached) error) func(*store.Detached) error {
	old := removeDetached
	removeDetached = f
	return old
}

// SwapGated replaces what runs between a request's access check and its
// handler and returns the one it replaced.
func SwapGated(f func(verb string)) func(verb string) {
	old := gated
	gated = f
	return old
}

// SwapTurnWait replaces what is told of each request that waits for a slot
// and returns the one it replaced.
func SwapTurnWait(f func(uid uint32)) func(uid uint32) {
	old := turnWait
	turnWait = f
	return old
}

// SwapDaemonUID replaces what the server takes for its own uid and returns
// the one it replaced.
func SwapDaemonUID(f func() uint32) func() uint32 {
	old := daemonUID
	daemonUID = f
	return old
}
