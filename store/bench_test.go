package store

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkDeliver stores messages one after another. Besides the time to
// each answer it reports the process's CPU time per message (cpu-us/op),
// the index writer's included: the timer stops once the writer has written
// every row.
func BenchmarkDeliver(b *testing.B) {
	s := newTestStore(b)
	body := strings.Repeat("A line of a typical message body.\n", 60)
	raw := []byte("From: a@example.com\r\n\r\n" + body)
	b.SetBytes(int64(len(body) + len(raw)))
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; i < b.N; i++ {
		m := testMessage(i)
		if _, _, err := s.Deliver("agent", "inbox", m, body, raw, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.idx.w.flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// listFixture fills the inbox with n messages written directly (no fsync,
// no index) and loads the index once, reporting how long that took.
func listFixture(b *testing.B, n int) *Store {
	b.Helper()
	s := newTestStore(b)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	body := strings.Repeat("A line of a typical message body.\n", 30)
	for i := range n {
		m := testMessage(i)
		m.Read = i%4 == 0
		m.ID = NewID(m.ReceivedAt, m.Subject)
		if err := os.WriteFile(filepath.Join(inbox, m.ID+".md"), Render(m, body), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	// Let the timestamps settle, as they have in a mailbox at rest (files
	// changed within racyWindow are re-read on every listing).
	time.Sleep(racyWindow + 100*time.Millisecond)
	return s
}

func benchList(b *testing.B, n int) {
	s := listFixture(b, n)
	// A first listing waits for the whole folder, however long.
	old := buildWait
	buildWait = time.Hour
	defer func() { buildWait = old }()
	b.Run("index-load", func(b *testing.B) {
		var heap uint64
		for i := 0; i < b.N; i++ {
			before := heapInUse()
			fresh, err := Open(s.Root())
			if err != nil {
				b.Fatal(err)
			}
			if p, err := fresh.List("agent", "inbox", Query{}); err != nil || p.Total != n {
				b.Fatalf("total %d, %v", p.Total, err)
			}
			heap = heapInUse() - before
			runtime.KeepAlive(fresh)
			fresh.Close()
		}
		b.ReportMetric(float64(heap)/float64(n), "index-B/msg")
	})
	if _, err := s.List("agent", "inbox", Query{}); err != nil {
		b.Fatal(err)
	}
	unread := true
	queries := []struct {
		name string
		q    Query
	}{
		{"first-page", Query{}},
		{"offset-middle", Query{Offset: n / 2}},
		{"unread", Query{Unread: &unread}},
		{"text", Query{Text: fmt.Sprintf("sender %d ", n-1)}},
	}
	for _, qq := range queries {
		b.Run(qq.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := s.List("agent", "inbox", qq.q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkList1k(b *testing.B) { benchList(b, 1000) }

func BenchmarkList100k(b *testing.B) {
	if testing.Short() {
		b.Skip("100k fixture skipped in -short mode")
	}
	benchList(b, 100000)
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// BenchmarkIndexRebuild indexes a folder of 10k (and, unless -short,
// 100k) messages from its files into an empty index (a first start, or a
// reindex), and reports messages a second and the process's CPU time per
// message (cpu-us/msg: the measure that a busy machine disturbs least). Bodies are about 1.5 KB of words of a skewed vocabulary, as in
// bench/indexmem, so the full-text index grows as with real mail.
func BenchmarkIndexRebuild(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			if n > 10000 && testing.Short() {
				b.Skip("100k fixture skipped in -short mode")
			}
			s := wordsFixture(b, n)
			// The listing waits for the whole folder, however long.
			old := buildWait
			buildWait = time.Hour
			defer func() { buildWait = old }()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			for i := 0; i < b.N; i++ {
				fresh, err := Open(s.Root())
				if err != nil {
					b.Fatal(err)
				}
				if p, err := fresh.List("agent", "inbox", Query{}); err != nil || p.Total != n {
					b.Fatalf("total %d, %v", p.Total, err)
				}
				fresh.Close()
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(n*b.N), "cpu-us/msg")
		})
	}
}

// wordsFixture fills the inbox with n messages of realistic text, written
// directly (no fsync, no index) by two writers.
func wordsFixture(b *testing.B, n int) *Store {
	b.Helper()
	s := newTestStore(b)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := wordBodies(int64(w))
			for i := w; i < n; i += 2 {
				m := testMessage(i)
				m.Read = i%4 == 0
				m.ID = NewID(m.ReceivedAt, m.Subject)
				if err := os.WriteFile(filepath.Join(inbox, m.ID+".md"), Render(m, next()), 0o600); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	time.Sleep(racyWindow + 100*time.Millisecond)
	return s
}

// benchVocabulary is what wordBodies draws from: 5,000 made-up words.
var benchVocabulary = func() []string {
	r := rand.New(rand.NewSource(7))
	out := make([]string, 5000)
	for i := range out {
		w := make([]byte, 3+r.Intn(8))
		for j := range w {
			w[j] = byte('a' + r.Intn(26))
		}
		out[i] = string(w)
	}
	return out
}()

// wordBodies returns a source of bodies of 200 words (about 1.5 KB) drawn
// with a skewed frequency, as in real mail and bench/indexmem.
func wordBodies(seed int64) func() string {
	r := rand.New(rand.NewSource(seed))
	z := rand.NewZipf(r, 1.2, 1, uint64(len(benchVocabulary)-1))
	return func() string {
		var body strings.Builder
		for j := range 200 {
			if j > 0 {
				body.WriteByte(' ')
			}
			body.WriteString(benchVocabulary[z.Uint64()])
		}
		return body.String()
	}
}

// BenchmarkIndexWrites writes the index rows of new messages (bodies of
// wordBodies) through the index writer in batches of 128, as steady
// delivery hands them over, and reports the process's CPU time per row:
// the index's share of what a delivery costs.
func BenchmarkIndexWrites(b *testing.B) {
	next := wordBodies(1)
	bodies := make([]string, 256)
	for i := range bodies {
		bodies[i] = next()
	}
	benchIndexWrites(b, bodies)
}

// BenchmarkIndexWritesLarge is BenchmarkIndexWrites with bodies of 100 KiB:
// words drawn as wordBodies draws them, or lines of one character after a
// digit, as Postfix's smtp-source writes them (the inbound benchmark's
// messages).
func BenchmarkIndexWritesLarge(b *testing.B) {
	for _, c := range []struct {
		name string
		next func() string
	}{
		{"words-100KiB", func() func() string {
			next := wordBodies(1)
			return func() string {
				var body strings.Builder
				for body.Len() < 100<<10 {
					body.WriteString(next() + "\n")
				}
				return body.String()
			}
		}()},
		{"lines-100KiB", func() string {
			var body strings.Builder
			for i := 0; body.Len() < 100<<10; i++ {
				body.WriteString(strconv.Itoa(i%10) + strings.Repeat("X", 77) + "\n")
			}
			return body.String()
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			bodies := make([]string, 16)
			for i := range bodies {
				bodies[i] = c.next()
			}
			benchIndexWrites(b, bodies)
		})
	}
}

func benchIndexWrites(b *testing.B, bodies []string) {
	s := newTestStore(b)
	if _, err := s.List("agent", "inbox", Query{}); err != nil {
		b.Fatal(err)
	}
	fi := s.index("agent", "inbox")
	fi.mu.Lock()
	gen, fid, mid := fi.gen, fi.row.fid, fi.row.mid
	fi.mu.Unlock()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; i < b.N; i++ {
		m := testMessage(i)
		r := newRow(NewID(m.ReceivedAt, m.Subject), m, bodies[i%len(bodies)], fileStamp{ino: uint64(i + 1), size: 2048, mtime: 1, ctime: 1}, true)
		s.idx.w.add(&indexOp{gen: gen, fid: fid, mid: mid, row: r, size: r.size()})
		if i%128 == 127 {
			if err := s.idx.w.flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.idx.w.flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	// (There are no files: a listing would remove the rows.)
	db, _ := s.idx.handle()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM messages WHERE fid = ?", fid).Scan(&n); err != nil || n != b.N {
		b.Fatalf("%d of %d rows written (%v)", n, b.N, err)
	}
}
