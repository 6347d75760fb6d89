package protocol

import (
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestProbeID(t *testing.T) {
	for frame, want := range map[string]uint64{
		`{"id":7,"verb":"send","args":{"body":"aaaa`:    7,
		`{"verb":"send","id":9}`:                        9,
		`{"verb":"send","args":{"id":3},"id":4}`:        4,
		`{"verb":"send","args":{"id":3},"body":"aaaaaa`: 0,
		`[1,2]`:                      0,
		`{"id":-1}`:                  0,
		`{"id":"5"}`:                 0,
		``:                           0,
		`{"id":18446744073709551615`: 18446744073709551615,
	} {
		if got := ProbeID([]byte(frame)); got != want {
			t.Errorf("ProbeID(%q) = %d, want %d", frame, got, want)
		}
	}
}

// FuzzProbeID: whatever the start of a frame, ProbeID never panics, and on
// a whole request it agrees with the decoder about the id.
func FuzzProbeID(f *testing.F) {
	for _, s := range []string{`{"id":7,"verb":"send","args":{"body":"aaa`, `{"verb":"x","id":2}`, `{"args":{"id":1},"id":3}`, `{"id":1e3}`, `{`, `"id"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		id := ProbeID(data)
		var whole struct {
			ID uint64 `json:"id"`
		}
		if json.Unmarshal(data, &whole) == nil && !strings.Contains(string(data), `\`) && strings.Count(strings.ToLower(string(data)), `"id"`) == 1 && id != whole.ID {
			t.Fatalf("ProbeID(%q) = %d, the decoder says %d", data, id, whole.ID)
		}
	})
}

// TestFrameReaderReserve: a frame the budget refuses is discarded, its
// start kept for the id, the next frame read normally, and every byte
// reserved is released.
func TestFrameReaderReserve(t *testing.T) {
	big := `{"id":7,"verb":"send","args":{"body":"` + strings.Repeat("a", 1<<20) + `"}}`
	fr := NewFrameReader(strings.NewReader(big+"\n"+`{"id":8}`+"\n"), MaxFrame)
	held := 0
	fr.Reserve = func(n int) bool {
		if held+n > 256<<10 {
			return false
		}
		held += n
		return true
	}
	fr.Release = func(n int) { held -= n }
	if _, err := fr.Next(); err != ErrFrameRefused || ProbeID(fr.Head()) != 7 {
		t.Fatalf("big frame: %v, head %q", err, fr.Head())
	}
	line, err := fr.Next()
	if err != nil || string(line) != `{"id":8}` {
		t.Fatalf("next frame: %q %v", line, err)
	}
	fr.Close()
	if held != 0 {
		t.Errorf("%d bytes still reserved after Close", held)
	}
}

// scriptedReader returns its chunks one per Read, then err.
type scriptedReader struct {
	chunks []string
	err    error
	reads  int
}

func (r *scriptedReader) Read(p []byte) (int, error) {
	r.reads++
	if len(r.chunks) == 0 {
		return 0, r.err
	}
	n := copy(p, r.chunks[0])
	r.chunks = r.chunks[1:]
	return n, nil
}

// TestFrameReaderBegin: Begin is called once per frame, once its first byte
// has been read (already buffered or not) and not before; no frame begins at
// the end of the stream; a frame a read error cuts short keeps its start
// for the id.
func TestFrameReaderBegin(t *testing.T) {
	cut := errors.New("deadline")
	sr := &scriptedReader{chunks: []string{`{"id":1}` + "\n" + `{"id":2}` + "\n", `{"id":3,"verb":"se`}, err: cut}
	fr := NewFrameReader(sr, MaxFrame)
	var begun []int // the reads done when each frame began
	fr.Begin = func() { begun = append(begun, sr.reads) }
	for _, want := range []string{`{"id":1}`, `{"id":2}`} {
		if line, err := fr.Next(); err != nil || string(line) != want {
			t.Fatalf("Next: %q %v, want %s", line, err, want)
		}
	}
	if _, err := fr.Next(); err != cut || ProbeID(fr.Head()) != 3 {
		t.Fatalf("cut frame: %v, head %q", err, fr.Head())
	}
	if want := []int{1, 1, 2}; !slices.Equal(begun, want) {
		t.Errorf("frames began after reads %v, want %v", begun, want)
	}

	sr = &scriptedReader{err: io.EOF}
	fr = NewFrameReader(sr, MaxFrame)
	begun = nil
	fr.Begin = func() { begun = append(begun, sr.reads) }
	if _, err := fr.Next(); err != io.EOF || len(begun) != 0 {
		t.Errorf("empty stream: %v, frames begun %v", err, begun)
	}
}
