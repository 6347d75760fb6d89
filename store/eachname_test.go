package store

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Directories of more entries than one batch of EachName (an owner makes as
// many as the disk takes) are listed whole, and what is removed while they
// are read is removed once, nothing else: a sweep of old temporary files
// and orphans, the message count a delete checks, a snapshot.
func TestListingsPastOneBatch(t *testing.T) {
	const n = 2*nameBatch + 7
	dir := t.TempDir()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	old := time.Now().Add(-2 * StaleTempAge)
	write := func(name string, aged bool) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if aged {
			os.Chtimes(p, old, old)
		}
	}
	for i := range n {
		write(fmt.Sprintf("%sold%05d", TempPrefix, i), true)
		write(fmt.Sprintf("%syoung%05d", TempPrefix, i), false)
		id := fmt.Sprintf("2026-01-01-000000-%05d", i)
		write(id+".eml", true)
		if i%2 == 0 {
			write(id+".md", true) // committed: its raw copy stays
		}
	}
	seen := map[string]int{}
	if err := d.EachName(func(name string) error { seen[name]++; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 4*n-n/2 {
		t.Fatalf("EachName saw %d entries, want %d", len(seen), 4*n-n/2)
	}
	for name, k := range seen {
		if k != 1 {
			t.Fatalf("EachName gave %s %d times", name, k)
		}
	}
	if removed, err := removeTemps(d, time.Now().Add(-StaleTempAge)); err != nil || removed != n {
		t.Fatalf("removeTemps = %d, %v; want the %d old ones", removed, err, n)
	}
	if removed, err := removeOrphans(d, time.Now().Add(-StaleTempAge)); err != nil || removed != n/2 {
		t.Fatalf("removeOrphans = %d, %v; want the %d raw copies without a .md", removed, err, n/2)
	}
	left := names(t, d)
	if want := n + 2*(n-n/2); len(left) != want {
		t.Fatalf("%d entries left, want %d (young temporaries, committed messages)", len(left), want)
	}

	s := newTestStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	deliver(t, s, "inbox", testMessage(1), "a delivered message")
	st, err := os.Stat(inbox)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	uid, gid := int(sys.Uid), int(sys.Gid)
	for i := range n {
		id := fmt.Sprintf("2026-01-01-000000-%05d", i)
		for _, f := range []string{id + ".md", id + ".eml"} {
			p := filepath.Join(inbox, f)
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			os.Lchown(p, uid, gid)
		}
	}
	mb, err := s.openMailbox("agent")
	if err != nil {
		t.Fatal(err)
	}
	count, err := countMessages(mb.dir)
	mb.close()
	if err != nil || count != n+1 {
		t.Fatalf("countMessages = %d, %v; want %d", count, err, n+1)
	}
	dst := filepath.Join(t.TempDir(), "snap")
	os.Mkdir(dst, 0o700)
	sd, err := OpenDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	snap, err := s.SnapshotMailbox("agent", sd)
	if err != nil || snap.Messages != n+1 || snap.Files != 2*(n+1) {
		t.Fatalf("snapshot: %d messages, %d files, %v; want %d and %d", snap.Messages, snap.Files, err, n+1, 2*(n+1))
	}
}

// What a listing holds while it is read does not grow with the directory:
// in the middle of a directory of 100,000 entries of 40-byte names (about
// 5.6 MB as a list of names) the heap holds under 1 MiB more than before it.
func TestEachNameHoldsOneBatch(t *testing.T) {
	const n = 100_000
	d, err := OpenDir(manyFiles(t, n))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	seen := 0
	grew := heapGrowth(func(halfway func()) {
		err = d.EachName(func(string) error {
			if seen++; seen == n/2 {
				halfway()
			}
			return nil
		})
	})
	if err != nil || seen != n {
		t.Fatalf("EachName: %d entries, %v", seen, err)
	}
	if grew > 1<<20 {
		t.Errorf("halfway through %d entries the heap grew by %d bytes: the listing is held whole", n, grew)
	}
}

// manyFiles makes a directory of n empty files of 40-byte names.
func manyFiles(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	for i := range n {
		fd, err := syscall.Open(filepath.Join(dir, fmt.Sprintf("%040d", i)), syscall.O_CREAT|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(fd)
	}
	return dir
}

// Walk (the quota's count) holds no names: halfway through a folder of
// 100,000 files, under 1 MiB more heap.
func TestWalkHoldsOneBatchOfFiles(t *testing.T) {
	const n = 100_000
	top := t.TempDir()
	if err := os.Rename(manyFiles(t, n), filepath.Join(top, "inbox")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(top, "sent"), 0o700)
	seen, grew, err := walkHalfway(t, top, n)
	if err != nil || seen[0] != 2 || seen[1] != n {
		t.Fatalf("Walk: %v entries by depth, %v; want 2 and %d", seen, err, n)
	}
	if grew > 1<<20 {
		t.Errorf("halfway through %d files the heap grew by %d bytes: the walk holds the folder's names", n, grew)
	}
}

// Nor for a folder of 100,000 subdirectories, which an owner makes as
// freely as files: halfway through them, under 1 MiB more heap (their
// names as a list are about 5.6 MB).
func TestWalkHoldsNoSubdirectoryNames(t *testing.T) {
	const n = 100_000
	top := t.TempDir()
	inbox := filepath.Join(top, "inbox")
	os.Mkdir(inbox, 0o700)
	for i := range n {
		if err := unix.Mkdir(filepath.Join(inbox, fmt.Sprintf("%040d", i)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	seen, grew, err := walkHalfway(t, top, n)
	if err != nil || seen[0] != 1 || seen[1] != n {
		t.Fatalf("Walk: %v entries by depth, %v; want 1 and %d", seen, err, n)
	}
	if grew > 1<<20 {
		t.Errorf("halfway through %d subdirectories the heap grew by %d bytes: the walk holds their names", n, grew)
	}
}

// Walk gives every entry of a tree once, at its depth, however files and
// subdirectories mix in a listing and however many listings' reads a
// directory takes (long names, thousands of entries, subdirectories
// between files, empty ones, a deep chain): the same as filepath.WalkDir.
func TestWalkSeesEveryEntryOnce(t *testing.T) {
	top := t.TempDir()
	want := map[string]int{} // "depth/name" -> count
	var mk func(dir string, depth, width int)
	mk = func(dir string, depth, width int) {
		for i := range width {
			name := fmt.Sprintf("d%d-%0*d", depth, 1+i%200, i)
			p := filepath.Join(dir, name)
			if i%7 == 3 && depth < 3 {
				if err := os.Mkdir(p, 0o700); err != nil {
					t.Fatal(err)
				}
				mk(p, depth+1, width/20)
			} else if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			want[fmt.Sprintf("%d/%s", depth, name)]++
		}
	}
	mk(top, 0, 1500)
	chain := top
	for i := range 300 {
		chain = filepath.Join(chain, fmt.Sprintf("c%d", i))
		if err := os.Mkdir(chain, 0o700); err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("%d/c%d", i, i)]++
	}
	d, err := OpenDir(top)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got := map[string]int{}
	if err := d.Walk(func(depth int, name string, st *unix.Stat_t) { got[fmt.Sprintf("%d/%s", depth, name)]++ }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("Walk saw %d entries, want %d", len(got), len(want))
	}
	for k, c := range want {
		if got[k] != c {
			t.Fatalf("Walk saw %s %d times, want %d", k, got[k], c)
		}
	}
	for k := range got {
		if want[k] == 0 {
			t.Fatalf("Walk saw %s, which is not in the tree", k)
		}
	}
}

// walkHalfway walks top, counting entries by depth, and returns how much
// more heap is live halfway through the n entries at depth 1.
func walkHalfway(t *testing.T, top string, n int) (seen map[int]int, grew int64, err error) {
	t.Helper()
	d, err := OpenDir(top)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	seen = map[int]int{}
	grew = heapGrowth(func(halfway func()) {
		err = d.Walk(func(depth int, name string, st *unix.Stat_t) {
			if seen[depth]++; depth == 1 && seen[1] == n/2 {
				halfway()
			}
		})
	})
	return seen, grew, err
}

// heapGrowth runs list and returns how much more heap is live when list
// calls halfway than before list began.
func heapGrowth(list func(halfway func())) int64 {
	var before, during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	list(func() {
		runtime.GC()
		runtime.ReadMemStats(&during)
	})
	return int64(during.HeapAlloc) - int64(before.HeapAlloc)
}

// names lists d's entries.
func names(t testing.TB, d *Dir) []string {
	t.Helper()
	var out []string
	if err := d.EachName(func(n string) error { out = append(out, n); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}
