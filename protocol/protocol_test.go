package protocol

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
)

func TestFrameReader(t *testing.T) {
	tests := []struct {
		name  string
		input string
		max   int
		want  []string
		errAt int // index of the frame expected to be ErrFrameTooLarge, or -1
	}{
		{"lines", "a\nbb\r\nccc\n", 10, []string{"a", "bb", "ccc"}, -1},
		{"last line without newline", "a\nb", 10, []string{"a", "b"}, -1},
		{"too large then recovers", "short\n" + strings.Repeat("x", 100) + "\nnext\n", 10, []string{"short", "", "next"}, 1},
		{"exactly max", strings.Repeat("y", 10) + "\n", 10, []string{strings.Repeat("y", 10)}, -1},
		{"empty lines", "\n\nz\n", 10, []string{"", "", "z"}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fr := NewFrameReader(strings.NewReader(tt.input), tt.max)
			for i, want := range tt.want {
				got, err := fr.Next()
				if i == tt.errAt {
					if !errors.Is(err, ErrFrameTooLarge) {
						t.Fatalf("frame %d: err %v, want ErrFrameTooLarge", i, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if string(got) != want {
					t.Fatalf("frame %d: %q, want %q", i, got, want)
				}
			}
			if _, err := fr.Next(); err != io.EOF {
				t.Fatalf("after last frame: %v, want EOF", err)
			}
		})
	}
}

func TestDecodeRequestStrict(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string
	}{
		{`{"id":1,"verb":"version"}`, ""},
		{`{"id":1,"verb":"version","args":{}}`, ""},
		{`{"id":1,"verb":"version","extra":true}`, `unknown field "extra"`},
		{`{"id":1}`, "missing verb"},
		{`{"id":"one","verb":"x"}`, `field "id"`},
		{`{"id":1,"verb":"x"} {"id":2}`, "trailing data"},
		{`{"id":1,"verb":"x","timeout_ms":-5}`, "timeout_ms"},
		{`[1,2]`, "got array"},
		{`not json`, "invalid character"},
	}
	for _, tt := range tests {
		_, err := DecodeRequest([]byte(tt.in))
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", tt.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error %v, want it to mention %q", tt.in, err, tt.wantErr)
		}
	}
	var args MailboxCreateArgs
	if err := DecodeStrict([]byte(`{"name":"a","ownr":"bob"}`), &args); err == nil || !strings.Contains(err.Error(), `"ownr"`) {
		t.Errorf("misspelled field not named: %v", err)
	}
}

func TestCheckGreeting(t *testing.T) {
	if err := CheckGreeting(Greeting{Protocol: Name, Version: "1.7", Server: "x"}); err != nil {
		t.Errorf("newer minor refused: %v", err)
	}
	err := CheckGreeting(Greeting{Protocol: Name, Version: "2.0", Server: "9.9"})
	if err == nil || !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("other major accepted or unhelpful: %v", err)
	}
	if err := CheckGreeting(Greeting{Protocol: "smtp", Version: "1.0"}); err == nil {
		t.Error("foreign protocol accepted")
	}
}

// fakeServer answers requests with a function, and streams for watch.
func fakeServer(t *testing.T, greeting string, answer func(req Request) []Response) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				conn.Write([]byte(greeting + "\n"))
				fr := NewFrameReader(conn, MaxFrame)
				for {
					line, err := fr.Next()
					if err != nil {
						return
					}
					req, err := DecodeRequest(line)
					if err != nil {
						return
					}
					for _, r := range answer(*req) {
						b, _ := json.Marshal(r)
						conn.Write(append(b, '\n'))
					}
				}
			}()
		}
	}()
	return path
}

func TestClientCallsAndWatch(t *testing.T) {
	path := fakeServer(t, `{"protocol":"mailctl","version":"1.0","server":"t"}`, func(req Request) []Response {
		switch req.Verb {
		case VerbVersion:
			return []Response{{ID: req.ID, Data: json.RawMessage(`{"server":"t","caller_uid":7}`)}}
		case VerbWatch:
			ev := &Event{Type: EventNewMail, Mailbox: "a", ID: "m1"}
			return []Response{{ID: req.ID, Data: json.RawMessage(`{"watching":true}`)}, {ID: req.ID, Event: ev}, {ID: req.ID, Event: ev}}
		default:
			return []Response{{ID: req.ID, Error: &Error{Code: CodeNotFound, Message: "nope"}}}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	events, err := c.Watch(ctx, WatchArgs{})
	if err != nil {
		t.Fatal(err)
	}
	var v VersionInfo
	if err := c.Call(ctx, VerbVersion, nil, &v); err != nil || v.CallerUID != 7 {
		t.Fatalf("version: %v %+v", err, v)
	}
	err = c.Call(ctx, "mailbox.show", NameArgs{Name: "x"}, nil)
	if CodeOf(err) != CodeNotFound {
		t.Fatalf("error code %q (%v), want not_found", CodeOf(err), err)
	}
	for i := 0; i < 2; i++ {
		select {
		case ev := <-events:
			if ev.ID != "m1" {
				t.Fatalf("event %+v", ev)
			}
		case <-ctx.Done():
			t.Fatal("watch event not delivered")
		}
	}
}

func TestDialReportsHowToStart(t *testing.T) {
	_, err := Dial(context.Background(), filepath.Join(t.TempDir(), "missing.sock"))
	if CodeOf(err) != CodeUnavailable || !strings.Contains(err.Error(), "mailctl dev") {
		t.Fatalf("err %v: want unavailable naming the fix", err)
	}
}

func TestDialRefusesOtherMajor(t *testing.T) {
	path := fakeServer(t, `{"protocol":"mailctl","version":"2.0","server":"future"}`, func(Request) []Response { return nil })
	_, err := Dial(context.Background(), path)
	if err == nil || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("err %v, want refusal that says to upgrade", err)
	}
}

// FuzzDecodeRequest: arbitrary frames never panic, and anything accepted
// re-encodes to a request that decodes to the same value.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"verb":"version"}`,
		`{"id":2,"verb":"mailbox.create","args":{"name":"a"},"timeout_ms":100}`,
		`{"id":3,"verb":"watch","args":{"mailboxes":["a","b"]}}`,
		`{"id":1,"verb":"x","args":null}`,
		`{"id":18446744073709551615,"verb":"\u0000"}`,
		`{}`, `[]`, `{"id":1,"verb":"x"}{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeRequest(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		req2, err := DecodeRequest(again)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", again, err)
		}
		if req2.ID != req.ID || req2.Verb != req.Verb || req2.TimeoutMS != req.TimeoutMS {
			t.Fatalf("round trip changed %+v to %+v", req, req2)
		}
	})
}

// FuzzFrameReader: frames never exceed the bound, the reader never panics,
// and Begin is told of each frame once, as its first byte arrives: once
// for every frame Next returns or refuses, and for one the input's end
// cuts short, never for the end itself.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte("a\nb\r\n"), 4)
	f.Add([]byte(strings.Repeat("x", 50)+"\nshort\n"), 8)
	f.Add([]byte("\r\r\n\n"), 1)
	f.Add([]byte("last line without its newline"), 64)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max <= 0 || max > 1<<16 {
			return
		}
		fr := NewFrameReader(bytes.NewReader(data), max)
		begun, frames := 0, 0
		fr.Begin = func() {
			if begun != frames {
				t.Fatalf("a frame began before the one before it ended (%d begun, %d ended)", begun, frames)
			}
			begun++
		}
		for i := 0; i < len(data)+2; i++ {
			line, err := fr.Next()
			if err != nil {
				if errors.Is(err, ErrFrameTooLarge) {
					frames++
					continue
				}
				// The input ends between frames, or in one it cut short.
				ended := len(data) == 0 || data[len(data)-1] == '\n'
				if begun != frames && (ended || begun != frames+1) {
					t.Fatalf("the input ended with %d frames begun and %d read", begun, frames)
				}
				return
			}
			frames++
			if len(line) > max {
				t.Fatalf("frame of %d bytes exceeds max %d", len(line), max)
			}
		}
	})
}

// A frame one or two bytes over the limit is refused with its own head, not
// with the head of a frame refused before it (whose id the reply would
// then carry).
func TestFrameJustOverMaxHasItsOwnHead(t *testing.T) {
	const max = 64
	frame := func(id int, n int) string {
		pre := fmt.Sprintf(`{"id":%d,"verb":"version","args":{"x":"`, id)
		post := `"}}`
		return pre + strings.Repeat("a", n-len(pre)-len(post)) + post
	}
	input := frame(5, max+100) + "\n" + frame(6, max+1) + "\n" + frame(7, max+2) + "\r\n"
	fr := NewFrameReader(strings.NewReader(input), max)
	for _, want := range []uint64{5, 6, 7} {
		if _, err := fr.Next(); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("frame %d: err %v, want ErrFrameTooLarge", want, err)
		}
		if got := ProbeID(fr.Head()); got != want {
			t.Errorf("frame %d refused with the head of id %d", want, got)
		}
	}
}

// A request that cannot be written whole (a daemon that stopped reading)
// ends the connection: a later request must not be written after the part
// that went out, where the daemon would read the two glued into one frame.
func TestClientWriteTimeoutEndsTheConnection(t *testing.T) {
	old := writeTimeout
	writeTimeout = 200 * time.Millisecond
	defer func() { writeTimeout = old }()

	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	readNow := make(chan struct{})
	verdict := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			verdict <- err.Error()
			return
		}
		defer conn.Close()
		conn.Write([]byte(`{"protocol":"` + Name + `","version":"` + Version + `","server":"test"}` + "\n"))
		<-readNow
		br := bufio.NewReaderSize(conn, 8<<20)
		for {
			line, err := br.ReadBytes('\n')
			if err == io.EOF {
				verdict <- "" // what was cut short ends with the connection
				return
			}
			if err != nil {
				verdict <- err.Error()
				return
			}
			if !json.Valid(line) {
				verdict <- fmt.Sprintf("the daemon read a torn frame of %d bytes", len(line))
				return
			}
		}
	}()
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := map[string]string{"x": strings.Repeat("a", 4<<20)}
	if err := c.Call(context.Background(), "version", big, nil); CodeOf(err) != CodeUnavailable {
		t.Fatalf("a 4 MiB request to a daemon that does not read: %v, want unavailable", err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection stayed open after a request was cut short")
	}
	if err := c.Call(context.Background(), "version", nil, nil); CodeOf(err) != CodeUnavailable {
		t.Fatalf("a request after the cut: %v, want unavailable", err)
	}
	close(readNow)
	if v := testwait.Recv(t, "the daemon's side to read to the end of the cut connection", verdict); v != "" {
		t.Fatal(v)
	}
}

// A call whose context ends before the daemon replies is a timeout only when
// its deadline passed; one its caller cancelled says so.
func TestCallEndedByItsContext(t *testing.T) {
	path := fakeServer(t, `{"protocol":"mailctl","version":"1.0","server":"t"}`, func(Request) []Response { return nil })
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	err = c.Call(cancelled, "mailbox.show", NameArgs{Name: "x"}, nil)
	if CodeOf(err) != CodeUnavailable || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("cancelled call: %v, want unavailable saying it was cancelled", err)
	}
	timed, stop := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer stop()
	err = c.Call(timed, "mailbox.show", NameArgs{Name: "x"}, nil)
	if CodeOf(err) != CodeTimeout {
		t.Fatalf("call past its deadline: %v, want timeout", err)
	}
}
