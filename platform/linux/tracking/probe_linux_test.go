package tracking

import (
	"errors"
	"testing"

	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
)

// TestProbeErrorSorts checks the three ways probe() sorts a failed
// perf_event_open: a missing feature, a missing privilege, and our own
// attribute refused, which must be neither.
func TestProbeErrorSorts(t *testing.T) {
	for _, c := range []struct {
		errno         error
		notSupp, perm bool
	}{
		{sys.ENOENT, true, false},
		{sys.ENOSYS, true, false},
		{sys.EOPNOTSUPP, true, false},
		{sys.EACCES, false, true},
		{sys.EPERM, false, true},
		{sys.EINVAL, false, false},
		{sys.E2BIG, false, false},
		{sys.EBUSY, false, false},
	} {
		err := probeError(c.errno)
		var pe *platform.PermissionError
		if errors.Is(err, platform.ErrNotSupported) != c.notSupp || errors.As(err, &pe) != c.perm || !errors.Is(err, c.errno) && !c.notSupp {
			t.Errorf("%v: %v (not supported %v, permission %v; want %v, %v)", c.errno, err, errors.Is(err, platform.ErrNotSupported), errors.As(err, &pe), c.notSupp, c.perm)
		}
	}
}
