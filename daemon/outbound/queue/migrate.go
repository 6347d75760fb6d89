package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mailctl/mailctl/internal/safeio"
)

// migrate moves items of the earlier layout (<id>.json and <id>.eml) into
// the journal and adds them to items; the files go once the journal has
// them. Items that do not load are set aside in dir/corrupt, never allowed
// to stop the queue.
func (q *Queue) migrate(items map[string]replayed) error {
	ents, err := os.ReadDir(q.dir)
	if err != nil {
		return fmt.Errorf("reading queue: %w", err)
	}
	var moved []string
	var last uint64
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		switch {
		case strings.HasSuffix(name, ".json"):
			id := strings.TrimSuffix(name, ".json")
			it, data, err := q.load(id)
			if err != nil {
				q.log.Error("queue item set aside", "item", id, "err", err, "moved_to", filepath.Join(q.dir, "corrupt"))
				q.setAside(id)
				continue
			}
			if _, ok := items[id]; !ok {
				// Not yet in the journal (a crash may have stopped an
				// earlier migration after some of them).
				if last, err = q.j.enqueue(it, data, nil); err != nil {
					return err
				}
				items[id] = replayed{it: it}
			}
			moved = append(moved, id)
		case strings.HasSuffix(name, ".eml"):
			// An .eml without its .json is a crash inside Enqueue, before the
			// item existed: nobody was told it was queued.
			id := strings.TrimSuffix(name, ".eml")
			if _, err := os.Stat(filepath.Join(q.dir, id+".json")); errors.Is(err, os.ErrNotExist) {
				os.Remove(filepath.Join(q.dir, name))
			}
		}
	}
	if len(moved) == 0 {
		return nil
	}
	if err := q.j.commit(last); err != nil {
		return err
	}
	for _, id := range moved {
		os.Remove(filepath.Join(q.dir, id+".json"))
		os.Remove(filepath.Join(q.dir, id+".eml"))
	}
	q.log.Info("queue items moved into the journal", "items", len(moved))
	return safeio.SyncDir(q.dir)
}

// load reads an item of the earlier layout and its message. Both files are
// read by name after the listing: a link or a FIFO in the place of either is
// refused, never followed nor waited on, and each is bounded by the
// journal's record, which must hold them both.
func (q *Queue) load(id string) (*Item, []byte, error) {
	if !itemIDRE.MatchString(id) {
		return nil, nil, fmt.Errorf("bad item name %q", id)
	}
	data, err := safeio.ReadRegular(filepath.Join(q.dir, id+".json"), maxRecord)
	if err != nil {
		return nil, nil, err
	}
	var it Item
	if err := json.Unmarshal(data, &it); err != nil {
		return nil, nil, fmt.Errorf("parsing %s.json: %w", id, err)
	}
	if it.ID != id || it.MailFrom == "" && len(it.Recipients) == 0 {
		return nil, nil, fmt.Errorf("%s.json does not describe item %s", id, id)
	}
	if len(it.Recipients) == 0 {
		return nil, nil, fmt.Errorf("%s.json has no recipients", id)
	}
	f, st, err := safeio.OpenRegular(filepath.Join(q.dir, id+".eml"), maxRecord)
	if err != nil {
		return nil, nil, fmt.Errorf("message of %s: %w", id, err)
	}
	defer f.Close()
	if st.Size() != it.Size {
		return nil, nil, fmt.Errorf("%s.eml has %d bytes, the item says %d", id, st.Size(), it.Size)
	}
	msg, err := safeio.ReadOpened(f, st, maxRecord)
	if err == nil && int64(len(msg)) != it.Size {
		err = fmt.Errorf("%s.eml has %d bytes, the item says %d", id, len(msg), it.Size)
	}
	if err != nil {
		return nil, nil, err
	}
	return &it, msg, nil
}

func (q *Queue) setAside(id string) {
	cdir := filepath.Join(q.dir, "corrupt")
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		q.log.Error("cannot create corrupt directory", "err", err)
		return
	}
	for _, ext := range []string{".json", ".eml"} {
		src := filepath.Join(q.dir, id+ext)
		if err := os.Rename(src, filepath.Join(cdir, id+ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			q.log.Error("cannot set aside queue file", "file", src, "err", err)
		}
	}
	safeio.SyncDir(q.dir)
}
