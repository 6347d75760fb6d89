package store

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func BenchmarkDeliver(b *testing.B) {
	s := newTestStore(b)
	body := strings.Repeat("A line of a typical message body.\n", 60)
	raw := []byte("From: a@example.com\r\n\r\n" + body)
	b.SetBytes(int64(len(body) + len(raw)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := testMessage(i)
		if _, _, err := s.Deliver("agent", "inbox", m, body, raw, nil); err != nil {
			b.Fatal(err)
		}
	}
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

// BenchmarkIndexRebuild indexes a folder of 10k messages from its files
// into an empty index (a first start, or a reindex).
func BenchmarkIndexRebuild(b *testing.B) {
	const n = 10000
	s := listFixture(b, n)
	b.ResetTimer()
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
}
