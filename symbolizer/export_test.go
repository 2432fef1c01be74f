package symbolizer

import "time"

// SetNow makes the Resolver's clock f and returns the function that
// puts time.Now back.
func SetNow(f func() time.Time) (restore func()) {
	now = f
	return func() { now = time.Now }
}
