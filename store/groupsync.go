package store

import "sync"

// groupSync coalesces directory fsyncs of concurrent deliveries to one
// folder: a caller whose rename happened before a sync started is covered by
// that sync, so under load many messages share one directory fsync instead of
// paying one each. Every caller still returns only after a sync that started
// after its own rename has finished.
type groupSync struct {
	mu      sync.Mutex
	cond    *sync.Cond
	started uint64 // syncs begun
	done    uint64 // the highest sync finished
	running bool
	err     error
}

// sync makes every rename the caller completed before calling durable, by
// fsyncing d or waiting for a sync that began after the call.
func (g *groupSync) sync(d *Dir) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	need := g.started + 1 // a sync already running may have begun before our rename
	for g.done < need {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.started++
		gen := g.started
		g.mu.Unlock()
		err := d.Sync()
		g.mu.Lock()
		g.running = false
		g.done, g.err = gen, err
		g.cond.Broadcast()
		if gen >= need {
			return err
		}
	}
	return g.err
}
