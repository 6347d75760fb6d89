package hooks

import (
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseOnExecAbove2 marks every descriptor of the process above 2
// close-on-exec. Whatever started the daemon may have left descriptors open
// (a root-only file on fd 7, a pipe of the shell); without this a hook,
// which runs as a mailbox owner, would inherit and read them. Go opens its
// own descriptors close-on-exec already, so marking them all is harmless;
// closing them outright could pull one from under the runtime. The daemon
// calls it at start-up and the runner before every hook.
func CloseOnExecAbove2() error {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	// Kernels before 5.11: one descriptor at a time.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return err
		}
	}
	return nil
}
