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

// ErrSymlink is the ErrNotRegular of a symbolic link met where no link is
// followed (NotFollowed): an error satisfies both, for a caller that tells
// the two apart.
var ErrSymlink = errors.New("a symbolic link")

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
	fi, err := checkRegular(f, path, max)
	if err != nil {
		return nil, err
	}
	return readBounded(f, path, fi.Size(), max)
}

// OpenRegular opens a file the daemon keeps (its state, a snapshot's
// copy) for reading the way ReadInput does, and without following a
// symbolic link as its last component: the descriptor is checked to be a
// regular file of at most max bytes before anything is read. A symbolic
// link (ErrSymlink too), a FIFO, a device, a socket or a directory is
// ErrNotRegular, a larger file ErrTooLarge, each in an *os.PathError
// naming the path. The caller reads at most the size the FileInfo says,
// or all of it with ReadOpened.
func OpenRegular(path string, max int64) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: NotFollowed(err)}
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := checkRegular(f, path, max)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// ReadRegular reads the file OpenRegular opens, never more than max
// bytes.
func ReadRegular(path string, max int64) ([]byte, error) {
	f, fi, err := OpenRegular(path, max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadOpened(f, fi, max)
}

// ReadOpened reads to its end the file OpenRegular opened with the
// FileInfo it gave, never more than max bytes: a file that grows past max
// while it is read is ErrTooLarge.
func ReadOpened(f *os.File, fi os.FileInfo, max int64) ([]byte, error) {
	return readBounded(f, f.Name(), fi.Size(), max)
}

// checkRegular is the fstat every reader here makes before it reads.
func checkRegular(f *os.File, path string, max int64) (os.FileInfo, error) {
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
	return fi, nil
}

// readBounded reads f, which fstat said is size bytes, to its end; a file
// that grows past max meanwhile is refused.
func readBounded(f *os.File, path string, size, max int64) ([]byte, error) {
	b := make([]byte, 0, size+1)
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
