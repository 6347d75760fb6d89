package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/hooks"
)

// Root's `drafts edit` runs the editor as the mailbox's owner (asOwner), and
// the owner decides what that process does: the editor reads its rc files
// from the owner's home, and the owner may trace a process of its own uid.
// So the process must hold nothing of root's. Not root's terminal: through it
// the owner could push input to root's shell (TIOCSTI) for root to run once
// the editor is gone, or read what root types next from a process left
// behind. Not root's session, whose /dev/tty is that terminal. Not a
// descriptor root's shell left open. Not root's environment. It runs in a session of its own, on a terminal of its own that
// this process relays to root's while the editor runs and closes when it
// ends; without a terminal, on pipes.

// ownerEnvKeep are the variables of root's environment an editor run as the
// owner gets (besides HOME, USER, LOGNAME and SHELL, which are the owner's):
// how to draw and what language to speak, nothing that names root's files,
// sockets or credentials.
var ownerEnvKeep = []string{"TERM", "COLORTERM", "LANG", "LANGUAGE", "TZ", "PATH"}

// ownerEnv is the environment of an editor root runs as another user.
func ownerEnv(environ []string, home, name, shell string) []string {
	var env []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LC_") || slices.Contains(ownerEnvKeep, k) {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "USER="+name, "LOGNAME="+name)
	if shell != "" {
		env = append(env, "SHELL="+shell)
	}
	return env
}

// runApart runs cmd, set up by asOwner to run as another user, in a session
// of its own: on a new terminal relayed to root's when stdin is a terminal,
// else on pipes. None of root's descriptors reaches it.
func runApart(cmd *exec.Cmd) error {
	// What started this process (root's shell: exec 3<file) may have left
	// descriptors open; the editor must not inherit them.
	if err := hooks.CloseOnExecAbove2(); err != nil {
		return err
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	saved, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		cmd.Stdin = struct{ io.Reader }{os.Stdin}
		// What the owner's process writes is the owner's words, printed
		// as every command prints outside text: root's stdout may be a
		// terminal when its stdin is not.
		cmd.Stdout, cmd.Stderr = stdout, stderr
		// A process the editor leaves behind holding the pipes is not
		// waited for.
		cmd.WaitDelay = time.Second
		return cmd.Run()
	}
	return runOnTerminal(cmd, saved)
}

// runOnTerminal runs cmd on a new pseudo-terminal with the modes and size of
// root's (on stdin, saved), relaying root's keys to it and its output,
// through termFilter, to stdout until cmd ends; then it closes the terminal, so that whatever cmd
// left behind on it reads and writes nothing of root's.
func runOnTerminal(cmd *exec.Cmd, saved *unix.Termios) error {
	pm, ps, err := openPTY()
	if err != nil {
		return err
	}
	defer pm.Close()
	psFD := int(ps.Fd())
	unix.IoctlSetTermios(psFD, unix.TCSETS, saved)
	copySize := func() {
		if ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ); err == nil {
			onFD(pm, func(fd int) { unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws) })
		}
	}
	copySize()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ps, ps, ps
	cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 0
	err = cmd.Start()
	ps.Close()
	if err != nil {
		return err
	}

	raw := *saved
	makeRaw(&raw)
	unix.IoctlSetTermios(0, unix.TCSETS, &raw)
	defer unix.IoctlSetTermios(0, unix.TCSETS, saved)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	// Stopped meanwhile, mailctl stops the editor and gives root's terminal
	// back as it was, rather than leave it raw.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	defer signal.Stop(stop)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	wakeR, wakeW, err := os.Pipe()
	if err != nil {
		cmd.Process.Kill()
		<-waited
		return err
	}
	defer wakeR.Close()
	defer wakeW.Close()
	keysDone := make(chan struct{})
	go func() { defer close(keysDone); relayKeys(pm, int(wakeR.Fd())) }()
	outDone := make(chan struct{})
	go func() { defer close(outDone); io.Copy(&termFilter{w: os.Stdout}, pm) }()

wait:
	for {
		select {
		case <-winch:
			copySize()
		case sig := <-stop:
			cmd.Process.Signal(sig)
		case err = <-waited:
			break wait
		}
	}
	// What the editor wrote is shown; a process it left behind on the
	// terminal is not waited for.
	pm.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	<-outDone
	wakeW.Write([]byte{0})
	pm.SetWriteDeadline(time.Now())
	<-keysDone
	return err
}

// relayKeys copies what root types (stdin) to the editor's terminal until
// wake is readable. It reads stdin only when poll says it holds something, so
// that nothing typed after the editor ended is taken from root's shell.
func relayKeys(pm *os.File, wake int) {
	buf := make([]byte, 4096)
	for {
		fds := []unix.PollFd{{Fd: 0, Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(0, buf)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		if _, err := pm.Write(buf[:n]); err != nil {
			return
		}
	}
}

// makeRaw sets t as cfmakeraw(3) does: keys pass through as typed, for the
// editor's terminal to interpret.
func makeRaw(t *unix.Termios) {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
}

// openPTY opens a new pseudo-terminal: its master, which this process keeps
// (non-blocking, so reads and writes on it take deadlines), and its slave,
// opened from the master (TIOCGPTPEER) rather than by a name in /dev/pts.
func openPTY() (master, slave *os.File, err error) {
	pm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	sfd := -1
	onFD(pm, func(fd int) {
		if err = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return
		}
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
		if errno != 0 {
			err = errno
			return
		}
		sfd = int(r)
	})
	if err != nil {
		pm.Close()
		return nil, nil, err
	}
	return pm, os.NewFile(uintptr(sfd), "pty"), nil
}

// onFD runs fn on f's descriptor without making it blocking, as Fd would.
func onFD(f *os.File, fn func(fd int)) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { fn(int(fd)) })
	}
}
