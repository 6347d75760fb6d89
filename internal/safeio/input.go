package safeio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular refuses a FIFO, a device, a socket or a directory where a
// file is read.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge refuses a file larger than its reader allows.
var ErrTooLarge = errors.New("file too large")

// ReadInput reads a file whose name someone else may have pointed at
// anything (a harness config the agent writes, a certificate the operator
// names): opened without blocking on a FIFO and without taking a terminal,
// checked on the open descriptor to be a regular file of at most max
// bytes, then read, never more than max bytes. A symbolic link is followed
// with the caller's own rights; ReadSecret is for files whose link must be
// trusted too.
func ReadInput(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, typeName(fi.Mode()))}
	}
	if fi.Size() > max {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrTooLarge, fi.Size(), max)}
	}
	b := make([]byte, 0, fi.Size()+1)
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > max {
			return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: it grew past the %d-byte limit while it was read", ErrTooLarge, max)}
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

func typeName(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "not a file"
}
