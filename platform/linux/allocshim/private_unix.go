//go:build unix

package allocshim

import (
	"fmt"
	"os"
	"syscall"
)

// private checks that dir is a directory (not a link to one) of this
// user that no other user can write to.
func private(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s does not belong to uid %d", dir, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by other users (mode %v)", dir, fi.Mode().Perm())
	}
	return nil
}
