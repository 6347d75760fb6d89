package safeio

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// OpenFile opens by name a file the daemon keeps and writes (a log it
// appends to, a spool, a journal) as os.OpenFile does with flag and perm,
// with O_NOFOLLOW, O_NONBLOCK and O_NOCTTY added: a symbolic link as the
// last component is refused, never followed (ErrSymlink too), and a FIFO,
// a device, a socket or a directory is refused unread and unwritten,
// never waited on nor taken as a terminal. Each refusal is ErrNotRegular
// in an *os.PathError naming the path. O_TRUNC would act before the
// check: open without it and truncate the file OpenFile gives.
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, perm)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, &os.PathError{Op: "open", Path: path, Err: NotFollowed(err)}
	case errors.Is(err, syscall.EISDIR):
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (a directory)", ErrNotRegular)}
	case errors.Is(err, syscall.ENXIO):
		// Opened for writing only, a FIFO no one reads (or a device
		// without its unit) answers this instead of waiting.
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (a FIFO or a device)", ErrNotRegular)}
	case err != nil:
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, typeName(fi.Mode()))}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// NotFollowed names what an open with O_NOFOLLOW refused (ELOOP: a
// symbolic link as the last component) as ErrNotRegular that is also
// ErrSymlink; any other error comes back as it is.
func NotFollowed(err error) error {
	if errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("%w (%w)", ErrNotRegular, ErrSymlink)
	}
	return err
}
