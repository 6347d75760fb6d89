package store

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The store never crosses into a mount below it (see Dir): entries are
// opened with openat2(RESOLVE_NO_XDEV) and stated with statx told not to
// ask their file system.

// noOpenat2 is set once openat2(2) is found missing (before Linux 5.6) or
// filtered out.
var noOpenat2 atomic.Bool

// openat opens name, an entry of d, with flags, refusing with ErrOtherMount
// a mount point: the kernel refuses to cross it (RESOLVE_NO_XDEV), so its
// file system is never asked to open anything. Without openat2 the mount
// is looked for first, which leaves a window an owner racing a mount in
// could use.
func (d *Dir) openat(name string, flags int) (int, error) {
	return OpenOnMount(d.fd, name, flags, d.dev, d.mnt)
}

// OpenOnMount is openat of name in the directory dirfd, which is on the
// mount dev and mnt (MountOf): a mount point is refused with
// ErrOtherMount, its file system never asked.
func OpenOnMount(dirfd int, name string, flags int, dev, mnt uint64) (int, error) {
	if !noOpenat2.Load() {
		fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_XDEV})
		switch {
		case errors.Is(err, unix.EXDEV):
			return -1, ErrOtherMount
		case !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM):
			return fd, err
		}
		noOpenat2.Store(true)
	}
	if _, same, err := lstatOnMount(dirfd, name, dev, mnt); err == nil && !same {
		return -1, ErrOtherMount
	}
	return unix.Openat(dirfd, name, flags, 0)
}

// MountOf is the mount the open file fd is on, as OpenOnMount takes it: its
// device and, where the kernel says, its mount id (else 0). It does not ask
// a FUSE or remote file system (AT_STATX_DONT_SYNC).
func MountOf(fd int) (dev, mnt uint64, err error) {
	var sx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &sx); err != nil {
		return 0, 0, err
	}
	if sx.Mask&unix.STATX_MNT_ID != 0 {
		mnt = sx.Mnt_id
	}
	return unix.Mkdev(sx.Dev_major, sx.Dev_minor), mnt, nil
}

// lstat is fstatat(2) of name without following a symlink, with whether
// name is on d's mount.
func (d *Dir) lstat(name string) (st unix.Stat_t, same bool, err error) {
	return lstatOnMount(d.fd, name, d.dev, d.mnt)
}

// lstatOnMount is lstat of name in the directory dirfd, which is on the
// mount dev and mnt. It is statx(2) told not to ask a remote or FUSE file
// system (AT_STATX_DONT_SYNC), so that stating a mount point another file
// system answers for never waits on it; on the store's own local file
// system the answer is the same.
func lstatOnMount(dirfd int, name string, dev, mnt uint64) (st unix.Stat_t, same bool, err error) {
	var sx unix.Statx_t
	err = unix.Statx(dirfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_DONT_SYNC,
		unix.STATX_BASIC_STATS|unix.STATX_MNT_ID, &sx)
	if err != nil {
		return st, false, err
	}
	st = statOf(&sx)
	same = st.Dev == dev && (mnt == 0 || sx.Mask&unix.STATX_MNT_ID == 0 || sx.Mnt_id == mnt)
	return st, same, nil
}

// statOf gives what stat(2) would of what statx(2) said.
func statOf(sx *unix.Statx_t) unix.Stat_t {
	ts := func(t unix.StatxTimestamp) unix.Timespec { return unix.NsecToTimespec(t.Sec*1e9 + int64(t.Nsec)) }
	st := unix.Stat_t{
		Dev:    unix.Mkdev(sx.Dev_major, sx.Dev_minor),
		Ino:    sx.Ino,
		Mode:   uint32(sx.Mode),
		Uid:    sx.Uid,
		Gid:    sx.Gid,
		Rdev:   unix.Mkdev(sx.Rdev_major, sx.Rdev_minor),
		Size:   int64(sx.Size),
		Blocks: int64(sx.Blocks),
		Atim:   ts(sx.Atime),
		Mtim:   ts(sx.Mtime),
		Ctim:   ts(sx.Ctime),
	}
	setInt(&st.Nlink, int64(sx.Nlink)) // their widths differ between architectures
	setInt(&st.Blksize, int64(sx.Blksize))
	return st
}

func setInt[T ~int32 | ~int64 | ~uint32 | ~uint64](dst *T, v int64) { *dst = T(v) }
