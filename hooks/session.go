package hooks

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// signalSession sends sig to every live process of the session sid except
// its leader, and reports how many it signalled. A hook runs as the leader
// of a session of its own, so this reaches what the hook started, including
// children that moved to another process group with setpgid (a shell with job
// control does that for every background job); only a process that started
// a session of its own with setsid has left.
//
// A session id stays taken while any process is in the session, and the
// leader is not reaped before the session is killed, so a process found here
// is one the hook started. Each is signalled through a pidfd, and its
// session is read again after the pidfd is open, so a pid that ended and was
// reused in between is never signalled. Either check alone keeps every
// process outside the session from being signalled.
func signalSession(sid int, sig unix.Signal) int {
	n := 0
	for _, pid := range listProc() {
		if pid == sid {
			continue
		}
		// Most processes on the host are not the session's: read the
		// session first, and open a pidfd only for a member.
		if s, live := sessionOf(pid); !live || s != sid {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		// Read it again now that the pidfd holds the process: the pid may
		// have ended and been reused since the first look.
		if s, live := sessionOf(pid); live && s == sid && unix.PidfdSendSignal(fd, sig, nil, 0) == nil {
			n++
		}
		unix.Close(fd)
	}
	return n
}

// listProc lists the pids /proc shows.
func listProc() []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	pids := make([]int, 0, len(names))
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killSession kills every process of the session sid but its leader, again
// until none is left: a process may fork while it is being looked for. It
// gives up after a bounded number of rounds.
func killSession(sid int) {
	for range 100 {
		if signalSession(sid, unix.SIGKILL) == 0 {
			return
		}
	}
}

// sessionOf reads the session id of pid from /proc/pid/stat, and whether the
// process is live (not a zombie).
func sessionOf(pid int) (sid int, live bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	return parseStat(b)
}

// parseStat reads the session id from a /proc/pid/stat line, "pid (comm)
// state ppid pgrp session ...", and whether the process is live (not a
// zombie or dead). comm may hold anything, so the fields are counted from
// its last ')'.
func parseStat(b []byte) (sid int, live bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 || string(f[0]) == "Z" || string(f[0]) == "X" {
		return 0, false
	}
	sid, err := strconv.Atoi(string(f[3]))
	return sid, err == nil
}
