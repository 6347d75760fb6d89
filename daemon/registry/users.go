package registry

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
)

// ResolveUser turns a user name or numeric uid into uid and primary gid. A
// numeric uid must have a passwd entry: mailboxes and hooks need a real user.
func ResolveUser(s string) (uint32, uint32, error) {
	var u *user.User
	var err error
	if _, nerr := strconv.ParseUint(s, 10, 32); nerr == nil {
		u, err = user.LookupId(s)
	} else {
		u, err = user.Lookup(s)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("no such user")
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, errors.New("user has a non-numeric id")
	}
	return uint32(uid), uint32(gid), nil
}

// UserName returns the login name of uid, or the number when it has none.
func UserName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return u.Username
	}
	return strconv.FormatUint(uint64(uid), 10)
}
