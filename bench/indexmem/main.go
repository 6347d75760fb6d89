// Command indexmem measures the message index of mailctl binaries, in one
// run on the same mail: it runs `mailctl dev` in a temporary folder, fills
// one mailbox with -big messages, -n mailboxes with -small each and one with
// 1k (files written straight into the folders, as a mailbox that has been
// receiving mail for a while), and for each binary (-prev, the previous
// release, then -bin), -reps times, measures:
//
//   - per start (the first, with no index, and a restart): the daemon's RSS,
//     the first (cold) message.list of the big and the 1k mailbox, RSS after
//     listing every folder once, per stored message, warm listings (median
//     of -warm);
//   - the rate at which the first start indexed the big mailbox's files;
//   - the latency (median and p95 of 40) of searches on the big mailbox: a
//     word, a phrase, from: and a word, a date range (the previous release
//     has no query: its text filter is timed for the words);
//
// then, once per binary, with -ingest N: RSS per message while N messages
// arrive over SMTP (4 sessions), and after a restart. It prints Markdown
// tables, each number the median of the repetitions and their range.
// bench/index.sh runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"net/smtp"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// binary is one mailctl under test.
type binary struct {
	label, path string
	query       bool // message.list takes a query
}

// results collects each measurement's values over the repetitions, by
// binary and name, in the order first seen.
type results struct {
	vals  map[string][]float64
	order []string
}

func (r *results) add(key string, v float64) {
	if r.vals == nil {
		r.vals = map[string][]float64{}
	}
	if _, ok := r.vals[key]; !ok {
		r.order = append(r.order, key)
	}
	r.vals[key] = append(r.vals[key], v)
}

// cell is the median of key's values and, with several, their range.
func (r *results) cell(key, unit string, prec int) string {
	v := slices.Clone(r.vals[key])
	if len(v) == 0 {
		return "–"
	}
	slices.Sort(v)
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', prec, 64) }
	if len(v) == 1 {
		return f(v[0]) + unit
	}
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + med) / 2
	}
	return fmt.Sprintf("%s%s (%s–%s)", f(med), unit, f(v[0]), f(v[len(v)-1]))
}

func main() {
	bin := flag.String("bin", "", "mailctl binary (this tree)")
	prev := flag.String("prev", "", "mailctl binary of the previous release (no query)")
	prevLabel := flag.String("prev-label", "previous release", "name of -prev in the tables")
	big := flag.Int("big", 100000, "messages in the big mailbox")
	small := flag.Int("small", 10000, "messages in each small mailbox")
	n := flag.Int("n", 10, "number of small mailboxes")
	warm := flag.Int("warm", 20, "warm listings per mailbox")
	reps := flag.Int("reps", 3, "repetitions")
	ingest := flag.Int("ingest", 0, "messages to send over SMTP while measuring RSS")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "usage: indexmem -bin PATH [-prev PATH] [-big N] [-small N] [-n N] [-reps N] [-ingest N]")
		os.Exit(2)
	}
	var bins []binary
	if *prev != "" {
		bins = append(bins, binary{label: *prevLabel, path: *prev})
	}
	bins = append(bins, binary{label: "this tree", path: *bin, query: true})
	dir, err := os.MkdirTemp("", "mailctl-benchidx-")
	check(err)
	defer os.RemoveAll(dir)

	sizes := map[string]int{"big": *big, "k1": 1000}
	for i := range *n {
		sizes[fmt.Sprintf("small%d", i)] = *small
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range sizes {
			if !yield(k) {
				return
			}
		}
	})
	total := 0
	for _, v := range sizes {
		total += v
	}

	d := start(bins[0].path, dir)
	c := dial(d.socket)
	for _, name := range names {
		check(c.Call(context.Background(), protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name}, nil))
	}
	for i := range bins {
		for rep := range *reps {
			check(c.Call(context.Background(), protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: ingestBox(i, rep)}, nil))
		}
	}
	c.Close()
	d.stop()

	t0 := time.Now()
	for _, name := range names {
		fill(filepath.Join(dir, "state", "mailboxes", name, "inbox"), sizes[name])
	}
	fmt.Fprintf(os.Stderr, "indexmem: wrote %d messages in %s\n", total, time.Since(t0).Round(time.Second))
	// Let the files' time stamps settle, as in a mailbox at rest.
	time.Sleep(2 * time.Second)

	var r results
	searches := []struct{ what, q, text string }{
		{"a word (in 1% of messages)", "kestrel", "kestrel"},
		{"a word (in 30% of messages)", "harbour", "harbour"},
		{"a phrase (in 1%)", `"quarterly revenue forecast"`, "quarterly revenue forecast"},
		{"from: and a word", "from:sender7@example.com kestrel", ""},
		{"a date range (one week)", "after:2026/01/10 before:2026/01/17", ""},
	}
	matches := map[string]int{}
	for rep := range *reps {
		for _, b := range bins {
			fmt.Fprintf(os.Stderr, "indexmem: %s, repetition %d\n", b.label, rep+1)
			// This tree's index is thrown away; the previous release's files
			// in the mailboxes were removed by this tree's daemon, which
			// removes what it finds of them.
			check(os.RemoveAll(filepath.Join(dir, "state", "index")))
			for _, round := range []string{"first start", "restart"} {
				d := start(b.path, dir)
				rss0 := d.rss()
				c := dial(d.socket)
				cold := map[string]time.Duration{}
				for _, name := range names {
					cold[name] = list(c, protocol.MessageListArgs{Mailbox: name})
				}
				rss1 := d.rss()
				k := b.label + "|" + round + "|"
				r.add(k+"rss0", mib(rss0))
				r.add(k+"coldbig", msf(cold["big"]))
				r.add(k+"cold1k", msf(cold["k1"]))
				r.add(k+"rss1", mib(rss1))
				r.add(k+"per", float64(rss1-rss0)/float64(total))
				r.add(k+"warmbig", msf(pct(c, protocol.MessageListArgs{Mailbox: "big"}, *warm, 50)))
				r.add(k+"warm1k", msf(pct(c, protocol.MessageListArgs{Mailbox: "k1"}, *warm, 50)))
				if round == "first start" {
					r.add(b.label+"|rebuild", float64(*big)/cold["big"].Seconds())
				} else {
					for _, q := range searches {
						args := protocol.MessageListArgs{Mailbox: "big", Query: q.q}
						if !b.query {
							if q.text == "" {
								continue
							}
							args = protocol.MessageListArgs{Mailbox: "big", Text: q.text}
						}
						var out protocol.MessageList
						check(c.Call(context.Background(), protocol.VerbMessageList, args, &out))
						matches[b.label+"|"+q.what] = out.Total
						r.add(b.label+"|"+q.what+"|p50", msf(pct(c, args, 40, 50)))
						r.add(b.label+"|"+q.what+"|p95", msf(pct(c, args, 40, 95)))
					}
				}
				c.Close()
				d.stop()
			}
		}
	}
	fmt.Printf("messages: %d in %d mailboxes (1 × %d, %d × %d, 1 × 1000)\n\n", total, len(names), *big, *n, *small)
	fmt.Println("| binary | start | RSS after start | cold list big | cold list 1k | RSS after listing every folder | per stored message | warm list big | warm list 1k |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, b := range bins {
		for _, round := range []string{"first start", "restart"} {
			k := b.label + "|" + round + "|"
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", b.label, round, r.cell(k+"rss0", " MiB", 1),
				r.cell(k+"coldbig", " ms", 1), r.cell(k+"cold1k", " ms", 1), r.cell(k+"rss1", " MiB", 1), r.cell(k+"per", " B", 0),
				r.cell(k+"warmbig", " ms", 1), r.cell(k+"warm1k", " ms", 1))
		}
	}
	fmt.Println()
	fmt.Println("| binary | indexing the big mailbox's files (first start) |")
	fmt.Println("| --- | --- |")
	for _, b := range bins {
		fmt.Printf("| %s | %s msg/s |\n", b.label, r.cell(b.label+"|rebuild", "", 0))
	}
	fmt.Println()
	fmt.Printf("Searches of the big mailbox (%d messages), after a restart; median and p95 of 40 calls:\n\n", *big)
	fmt.Println("| binary | search | how | matches | median | p95 |")
	fmt.Println("| --- | --- | --- | --- | --- | --- |")
	for _, b := range bins {
		for _, q := range searches {
			k := b.label + "|" + q.what
			if _, ok := r.vals[k+"|p50"]; !ok {
				continue
			}
			how := "`query: " + strings.ReplaceAll(q.q, `"`, `\"`) + "`"
			if !b.query {
				how = "`text: " + q.text + "` (subject, sender, snippet only)"
			}
			fmt.Printf("| %s | %s | %s | %d | %s | %s |\n", b.label, q.what, how, matches[k], r.cell(k+"|p50", " ms", 1), r.cell(k+"|p95", " ms", 1))
		}
	}
	if *ingest == 0 {
		return
	}
	fmt.Println()
	fmt.Printf("Steady ingest: %d messages over SMTP (4 sessions) into a fresh mailbox of a daemon that has listed every folder once; then a restart listing every folder. The binaries take turns, %d times each: median and (min–max):\n\n", *ingest, *reps)
	var ir results
	for rep := range *reps {
		for i, b := range bins {
			fmt.Fprintf(os.Stderr, "indexmem: %s, ingest %d\n", b.label, rep+1)
			d := start(b.path, dir)
			c := dial(d.socket)
			for _, name := range names {
				list(c, protocol.MessageListArgs{Mailbox: name})
			}
			c.Close()
			// Two halves: the second shows the growth once caches are warm.
			rate, rss0, rssHalf := ingestRSS(d, ingestBox(i, rep), *ingest/2, 0)
			rate2, _, rss1 := ingestRSS(d, ingestBox(i, rep), *ingest/2, *ingest/2)
			d.stop()
			d = start(b.path, dir)
			rss2 := d.rss()
			c = dial(d.socket)
			listed := slices.Clone(names)
			for r := range rep + 1 {
				listed = append(listed, ingestBox(i, r))
			}
			for _, name := range listed {
				list(c, protocol.MessageListArgs{Mailbox: name})
			}
			rss3 := d.rss()
			c.Close()
			d.stop()
			k := b.label + "|"
			ir.add(k+"rate", (rate+rate2)/2)
			ir.add(k+"rss0", mib(rss0))
			ir.add(k+"rssHalf", mib(rssHalf))
			ir.add(k+"rss1", mib(rss1))
			ir.add(k+"whole", float64(rss1-rss0)/float64(*ingest))
			ir.add(k+"second", float64(rss1-rssHalf)/float64(*ingest/2))
			ir.add(k+"rss2", mib(rss2))
			ir.add(k+"rss3", mib(rss3))
			ir.add(k+"stored", float64(rss3-rss2)/float64(total+*ingest*(rep+1)))
		}
	}
	fmt.Println("| binary | msg/s | RSS before | RSS half-way | RSS after | per message, whole run | per message, second half | after a restart: RSS after start | RSS after listing every folder | per stored message |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, b := range bins {
		k := b.label + "|"
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", b.label, ir.cell(k+"rate", "", 0),
			ir.cell(k+"rss0", " MiB", 1), ir.cell(k+"rssHalf", " MiB", 1), ir.cell(k+"rss1", " MiB", 1),
			ir.cell(k+"whole", " B", 0), ir.cell(k+"second", " B", 0),
			ir.cell(k+"rss2", " MiB", 1), ir.cell(k+"rss3", " MiB", 1), ir.cell(k+"stored", " B", 0))
	}
}

// ingestBox is the mailbox binary i ingests into on repetition rep.
func ingestBox(i, rep int) string { return fmt.Sprintf("ingest%dr%d", i, rep) }

// ingestRSS sends n messages over SMTP to mailbox, 4 sessions at a time,
// numbered from first, and returns the rate and the daemon's RSS before
// and after.
func ingestRSS(d *daemon, mailbox string, n, first int) (rate float64, rss0, rss1 int64) {
	rss0 = d.rss()
	t := time.Now()
	var wg sync.WaitGroup
	per := n / 4
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			c, err := smtp.Dial(d.smtp)
			check(err)
			defer c.Close()
			for i := first; i < first+per; i++ {
				check(c.Mail("sender@example.com"))
				check(c.Rcpt(mailbox + "@mailctl.test"))
				wc, err := c.Data()
				check(err)
				fmt.Fprintf(wc, "From: Sender <sender@example.com>\r\nTo: %s@mailctl.test\r\nSubject: ingest %d.%d\r\nMessage-ID: <%s.%d.%d@example.com>\r\n\r\n%s\r\n",
					mailbox, w, i, mailbox, w, i, body(r))
				check(wc.Close())
			}
			c.Quit()
		}()
	}
	wg.Wait()
	rate = float64(4*per) / time.Since(t).Seconds()
	// The daemon settles: its collector runs on its own schedule.
	time.Sleep(2 * time.Second)
	return rate, rss0, d.rss()
}

type daemon struct {
	cmd          *exec.Cmd
	socket, smtp string
}

func start(bin, dir string) *daemon {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "dev", "--dir", dir, "--smtp", addr, "--mailbox", "bench")
	cmd.Stdout, cmd.Stderr = nil, nil
	check(cmd.Start())
	d := &daemon{cmd: cmd, socket: filepath.Join(dir, "mailctl.sock"), smtp: addr}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := protocol.Dial(context.Background(), d.socket); err == nil {
			var st any
			if c.Call(context.Background(), "status", nil, &st) == nil {
				c.Close()
				time.Sleep(500 * time.Millisecond)
				return d
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			fmt.Fprintln(os.Stderr, "indexmem: the daemon did not answer within 60 s")
			os.Exit(1)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
}

// rss is the daemon's resident set in bytes.
func (d *daemon) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	check(err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			check(err)
			return kb << 10
		}
	}
	panic("no VmRSS")
}

func dial(socket string) *protocol.Client {
	c, err := protocol.Dial(context.Background(), socket)
	check(err)
	return c
}

// list times one listing; one asked while the daemon reads the folder's
// files into its index (it answers unavailable after waiting a while) is
// asked again, the time counting from the first ask.
func list(c *protocol.Client, args protocol.MessageListArgs) time.Duration {
	t := time.Now()
	var out protocol.MessageList
	for {
		err := c.Call(context.Background(), protocol.VerbMessageList, args, &out)
		if protocol.CodeOf(err) != protocol.CodeUnavailable {
			check(err)
			return time.Since(t)
		}
	}
}

// pct returns the p-th percentile of n listings.
func pct(c *protocol.Client, args protocol.MessageListArgs, n, p int) time.Duration {
	var ds []time.Duration
	for range n {
		ds = append(ds, list(c, args))
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

// vocabulary is what bodies are made of: words drawn with a skewed
// frequency, as in real mail, plus the words the searches look for.
var vocabulary = func() []string {
	r := rand.New(rand.NewSource(7))
	const letters = "abcdefghijklmnopqrstuvwxyz"
	out := make([]string, 5000)
	for i := range out {
		b := make([]byte, 3+r.Intn(8))
		for j := range b {
			b[j] = letters[r.Intn(len(letters))]
		}
		out[i] = string(b)
	}
	return out
}()

// body is about 1.5 KB of text: 200 words from the vocabulary, "harbour"
// in 30% of bodies, "kestrel" in 1%, "quarterly revenue forecast" in 1%.
func body(r *rand.Rand) string {
	z := rand.NewZipf(r, 1.2, 1, uint64(len(vocabulary)-1))
	var b strings.Builder
	for i := range 200 {
		if i > 0 {
			b.WriteByte(' ')
			if i%15 == 0 {
				b.WriteString(".\n")
			}
		}
		b.WriteString(vocabulary[z.Uint64()])
	}
	switch p := r.Intn(100); {
	case p < 1:
		b.WriteString(" kestrel")
	case p < 2:
		b.WriteString(" the quarterly revenue forecast")
	}
	if r.Intn(10) < 3 {
		b.WriteString(" harbour")
	}
	return b.String()
}

// fill writes n message files straight into a folder, received one a
// minute from 2026-01-01 on, in parallel.
func fill(dir string, n int) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(n*31 + w)))
			for i := w; i < n; i += workers {
				at := t0.Add(time.Duration(i) * time.Minute)
				m := &store.Message{
					MessageID:  fmt.Sprintf("<m%d.%d@example.com>", i, n),
					ThreadID:   fmt.Sprintf("t%d", i/3),
					From:       fmt.Sprintf("Sender %d <sender%d@example.com>", i%500, i%500),
					To:         []string{"agent@mailctl.test"},
					Subject:    fmt.Sprintf("Report number %d about the weekly numbers", i),
					Date:       at,
					ReceivedAt: at,
					Trusted:    "false",
					SizeBytes:  2048,
				}
				m.ID = store.NewID(at, m.Subject)
				check(os.WriteFile(filepath.Join(dir, m.ID+".md"), store.Render(m, body(r)), 0o600))
			}
		}()
	}
	wg.Wait()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "indexmem:", err)
		os.Exit(1)
	}
}
