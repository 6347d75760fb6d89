// Command indexmem measures what the daemon's memory and message.list cost
// as mailboxes grow: it runs `mailctl dev` in a temporary folder, fills one
// mailbox with -big messages, -n mailboxes with -small each and one with 1k,
// and prints the daemon's RSS after a start and after listing every folder
// once, with cold (first after a start) and warm message.list latencies, for
// a first start (no index files yet) and a restart (index files present).
// bench/index.sh runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

func main() {
	bin := flag.String("bin", "", "mailctl binary")
	big := flag.Int("big", 100000, "messages in the big mailbox")
	small := flag.Int("small", 10000, "messages in each small mailbox")
	n := flag.Int("n", 10, "number of small mailboxes")
	warm := flag.Int("warm", 20, "warm listings per mailbox")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "usage: indexmem -bin PATH [-big N] [-small N] [-n N]")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "mailctl-indexmem-")
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

	d := start(*bin, dir)
	c := dial(d.socket)
	for _, name := range names {
		check(c.Call(context.Background(), protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name}, nil))
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

	fmt.Printf("messages: %d in %d mailboxes (1 × %d, %d × %d, 1 × 1000)\n\n", total, len(names), *big, *n, *small)
	fmt.Println("| start | RSS after start | cold list big | cold list 1k | RSS after listing every folder | per stored message | warm list big | warm list 1k |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, round := range []string{"first start (no index files)", "restart (index files)"} {
		d := start(*bin, dir)
		time.Sleep(500 * time.Millisecond)
		rss0 := d.rss()
		c := dial(d.socket)
		cold := map[string]time.Duration{}
		for _, name := range names {
			cold[name] = list(c, name)
		}
		rss1 := d.rss()
		warmBig, warm1k := median(c, "big", *warm), median(c, "k1", *warm)
		c.Close()
		d.stop()
		per := float64(rss1-rss0) / float64(total)
		fmt.Printf("| %s | %.1f MiB | %s | %s | %.1f MiB | %.0f B | %s | %s |\n", round, mib(rss0), ms(cold["big"]), ms(cold["k1"]), mib(rss1), per, ms(warmBig), ms(warm1k))
	}
}

type daemon struct {
	cmd    *exec.Cmd
	socket string
}

func start(bin, dir string) *daemon {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "dev", "--dir", dir, "--smtp", addr, "--mailbox", "bench")
	cmd.Stdout, cmd.Stderr = nil, nil
	check(cmd.Start())
	d := &daemon{cmd: cmd, socket: filepath.Join(dir, "mailctl.sock")}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := protocol.Dial(context.Background(), d.socket); err == nil {
			var st any
			if c.Call(context.Background(), "status", nil, &st) == nil {
				c.Close()
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

func list(c *protocol.Client, mailbox string) time.Duration {
	t := time.Now()
	var out protocol.MessageList
	check(c.Call(context.Background(), protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox}, &out))
	return time.Since(t)
}

func median(c *protocol.Client, mailbox string, n int) time.Duration {
	var ds []time.Duration
	for range n {
		ds = append(ds, list(c, mailbox))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// fill writes n message files straight into a folder, as a mailbox that
// has been receiving mail for a while holds them.
func fill(dir string, n int) {
	body := strings.Repeat("A line of a typical message body, long enough to fill a snippet.\n", 12)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		at := t0.Add(time.Duration(i) * time.Second)
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
		check(os.WriteFile(filepath.Join(dir, m.ID+".md"), store.Render(m, body), 0o600))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "indexmem:", err)
		os.Exit(1)
	}
}
