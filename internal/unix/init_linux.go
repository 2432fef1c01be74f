//go:build linux

package unix

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// What a process running as a machine's first process (the arm64 test
// VM's /init, internal/arm64vm) needs: the kernel starts it with an
// empty root file system and nothing configured.

// Mount mounts a file system of type fstype from source at target,
// creating target.
func Mount(source, target, fstype, data string) error {
	if err := unix.Mkdir(target, 0o755); err != nil && err != unix.EEXIST {
		return fmt.Errorf("mkdir %s: %w", target, err)
	}
	if err := unix.Mount(source, target, fstype, 0, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, target, err)
	}
	return nil
}

// LinkUp sets network interface name up (the loopback interface is down
// in a new machine).
func LinkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: SIOCGIFFLAGS: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: SIOCSIFFLAGS: %w", name, err)
	}
	return nil
}

// PowerOff flushes the file systems and powers the machine off; it
// returns only on failure.
func PowerOff() error {
	unix.Sync()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

// WaitAny waits for any child to end and reaps it: a first process
// reaps the orphans the kernel gives it. It returns the child's pid and
// exit code (128+signal for a signal).
func WaitAny() (pid, code int, err error) {
	var ws unix.WaitStatus
	for {
		pid, err = unix.Wait4(-1, &ws, 0, nil)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return 0, 0, err
	}
	code = ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return pid, code, nil
}
