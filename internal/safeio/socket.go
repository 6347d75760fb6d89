package safeio

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// ListenSocket binds a Unix socket at path and gives it mode. The socket's
// directory must be one where no other user can rename, remove or replace
// the caller's entries: it belongs to the caller or to root, and no one
// else may write it, or it has the sticky bit (as /tmp). Elsewhere another
// user could swap the new socket for a symbolic link between the bind and
// the chmod, which would then change the mode of whatever the link names
// (a file of root's, with a daemon run as root), or put their own socket
// in its place afterwards; such a directory is refused before anything is
// bound, naming why.
func ListenSocket(path string, mode os.FileMode) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	sticky := st.Mode&syscall.S_ISVTX != 0
	switch euid := uint32(os.Geteuid()); {
	case st.Uid != euid && st.Uid != 0:
		return nil, fmt.Errorf("the socket's directory %s belongs to uid %d, who could replace the socket: put it in a directory of root's or of uid %d", dir, st.Uid, euid)
	case st.Mode&0o022 != 0 && !sticky:
		return nil, fmt.Errorf("the socket's directory %s may be written by other users (mode %04o, no sticky bit), who could replace the socket: put it in a directory only its owner writes", dir, st.Mode&0o7777)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
