package control

import (
	"fmt"
	"sync"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/protocol"
)

// memBudget bounds the memory control-socket requests may hold, from the
// buffer a frame is read into to the end of the request: at most
// control.request_memory_per_uid for one uid, and for all users together
// control.request_memory less one uid's share, which is kept for root.
// Root is bounded by the total only.
type memBudget struct {
	mu    sync.Mutex
	total int64
	byUID map[uint32]int64
	peak  int64 // the most ever held at once (tests, metrics)
}

// take charges n bytes to caller, or refuses with an error that names the
// limit.
func (b *memBudget) take(caller Caller, n int64, lim config.Control) *protocol.Error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byUID == nil {
		b.byUID = map[uint32]int64{}
	}
	users := lim.RequestMemory - lim.RequestMemoryPerUID
	switch {
	case caller.Root() && b.total+n > lim.RequestMemory:
		return &protocol.Error{Code: protocol.CodeRateLimited, Retryable: true, Message: fmt.Sprintf(
			"requests in flight hold %s of the %s the daemon allows (control.request_memory); retry when some finish", mib(b.total), mib(lim.RequestMemory))}
	case !caller.Root() && b.byUID[caller.UID]+n > lim.RequestMemoryPerUID:
		return &protocol.Error{Code: protocol.CodeRateLimited, Retryable: true, Message: fmt.Sprintf(
			"your requests in flight hold %s and this one needs %s, past the %s one user may use (control.request_memory_per_uid): retry when some finish, or send less at once",
			mib(b.byUID[caller.UID]), mib(n), mib(lim.RequestMemoryPerUID))}
	case !caller.Root() && b.total+n > users:
		return &protocol.Error{Code: protocol.CodeRateLimited, Retryable: true, Message: fmt.Sprintf(
			"requests in flight hold %s of the %s users may use together (control.request_memory less one user's share, kept for root); retry shortly", mib(b.total), mib(users))}
	}
	b.total += n
	b.byUID[caller.UID] += n
	b.peak = max(b.peak, b.total)
	return nil
}

// give returns n bytes charged to caller.
func (b *memBudget) give(caller Caller, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= n
	if b.byUID[caller.UID] -= n; b.byUID[caller.UID] <= 0 {
		delete(b.byUID, caller.UID)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// requestCost is what a request is charged from its decoding to its end:
// its frame decodes into about as many bytes again, and a send's
// attachments are decoded, composed and signed into a few more copies. A
// read holds its window (up to 200,000 characters of up to 4 bytes) and
// read buffers.
func requestCost(verb string, frameLen int) int64 {
	cost := int64(16<<10) + 4*int64(frameLen)
	if verb == protocol.VerbMessageRead {
		cost += 1 << 20
	}
	return cost
}
