package main

import (
	"fmt"
	"math"
	"os"
	"sort"
)

// ci says the run is CI's (CI=true, as GitHub Actions and .ci/run set
// it): a peer, tool or build that is missing is then an error, not a
// note, so that a machine without perf cannot pass with half a table.
var ci = os.Getenv("CI") == "true"

// absent reports that a scenario cannot run its peer or its own side
// here (a tool, a build, a privilege): a row with the reason on a
// laptop, an error under CI=true.
func absent(scen, metric, why string) ([]row, error) {
	if err := needPeer(why); err != nil {
		return nil, err
	}
	return []row{{Scenario: scen, Metric: metric, Note: why}}, nil
}

// needPeer returns an error naming why under CI=true and nil otherwise:
// for scenarios that print their own rows, with a note, when a peer is
// missing.
func needPeer(why string) error {
	if ci {
		return fmt.Errorf("%s (CI=true: a missing peer or tool fails the run)", why)
	}
	return nil
}

// errEvenMedian is what median panics with on an even count; main turns
// the panic into the scenario's error.
type errEvenMedian int

func (n errEvenMedian) Error() string {
	return fmt.Sprintf("median of %d values: an even count has no middle value, run an odd count", int(n))
}

// median is the one median of the package: the middle value of an odd
// count of figures. An even count panics (errEvenMedian): every scenario
// runs an odd number of rounds, so that the figure is a value that was
// measured, not the larger of two or a mean. No value at all is NaN,
// which the table prints blank.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	if len(v)%2 == 0 {
		panic(errEvenMedian(len(v)))
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// medianBy is median over f of each of xs.
func medianBy[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	return median(v)
}

// pairRatios runs a and b in alternating turns (inTurn), pairs times,
// and returns what each gave and the ratio a/b of each pair; it stops at
// the first error.
func pairRatios(pairs int, a, b func() (float64, error)) (as, bs, ratios []float64, err error) {
	for i := 0; i < pairs; i++ {
		var x, y float64
		err := inTurn(i,
			func() (err error) { x, err = a(); return err },
			func() (err error) { y, err = b(); return err })
		if err != nil {
			return nil, nil, nil, err
		}
		as, bs, ratios = append(as, x), append(bs, y), append(ratios, x/y)
	}
	return as, bs, ratios, nil
}

// inTurn runs the sides of one round in alternating order: as given in
// even rounds, reversed in odd ones (A B, B A, A B, ...), so that load
// which comes and goes, and whatever one side leaves in the caches, falls
// on each side as often. It stops at the first error.
func inTurn(round int, sides ...func() error) error {
	for i := range sides {
		j := i
		if round%2 == 1 {
			j = len(sides) - 1 - i
		}
		if err := sides[j](); err != nil {
			return err
		}
	}
	return nil
}
