//go:build linux

package tracking

// What the external tests (package tracking_test, which record with
// package perf) take from the package and its tests.
var (
	DwarfSampleRecord = dwarfSampleRecord
	SampleRecord      = sampleRecord
)

const (
	PerfContextUser = perfContextUser
	LeafWindow      = leafWindow
)

// SetLeafRepair makes s unwind as --unwind auto does on a frame-pointer
// program (what ChooseAuto decides for one).
func SetLeafRepair(s *Tracker) { s.uw.leaf, s.uw.size = true, leafWindow }
