// Command benchmarks runs rawstack side by side with its peers on this
// machine and prints one table: scenario, metric, rawstack's figure, the
// peer's figure and their ratio. Both sides of a row are measured in the same
// run, interleaved where it matters, because these machines are noisy.
//
//	go run ./benchmarks [-run REGEXP] [-short]
//
// A scenario whose peer, tool or kernel feature is missing prints a row
// saying so instead of a figure; under CI=true that is an error. The
// command exits 1 when any scenario returns an error, so CI fails on a
// broken scenario or a missing peer instead of printing a table.
//
// Figures are medians of an odd number of runs (median, in stats.go);
// where rawstack is timed against a peer, both run as the processes users
// run, start-up included, in alternating order (inTurn).
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"text/tabwriter"
	"time"
)

// row is one line of the table. Peer may be empty when a figure has no peer
// (an absolute target such as ns/event); Ratio is then omitted.
type row struct {
	Scenario string
	Metric   string
	Rawstack float64
	Peer     string
	PeerVal  float64
	// Better says which direction wins: "lower" or "higher".
	Better string
	// Note explains a missing figure or names the target.
	Note string
}

// scenario is a registered benchmark. Each lives in its own file and
// registers itself from init.
type scenario struct {
	name  string
	order int // sort key; scenarios of one issue share a decade
	run   func(cfg *config) ([]row, error)
}

type config struct {
	short  bool
	work   string // scratch directory for built fixtures and traces
	cli    string // cmd/rawstack built by buildCLI, once per run
	logger io.Writer
}

var scenarios []*scenario

func register(s *scenario) { scenarios = append(scenarios, s) }

func main() {
	runRE := flag.String("run", "", "run only scenarios whose name matches this regexp")
	short := flag.Bool("short", false, "smaller workloads (used by CI)")
	flag.Parse()
	re, err := regexp.Compile(*runRE)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(2)
	}
	work, err := os.MkdirTemp("", "rawstack-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(work)
	cfg := &config{short: *short, work: work, logger: os.Stderr}

	sort.SliceStable(scenarios, func(i, j int) bool { return scenarios[i].order < scenarios[j].order })
	var rows []row
	failed := false
	for _, s := range scenarios {
		if !re.MatchString(s.name) {
			continue
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "running %s...\n", s.name)
		r, err := runScenario(s, cfg)
		if err != nil {
			failed = true
			rows = append(rows, row{Scenario: s.name, Metric: "error", Note: err.Error()})
			continue
		}
		fmt.Fprintf(os.Stderr, "  %s done in %v\n", s.name, time.Since(start).Round(time.Millisecond))
		rows = append(rows, r...)
	}
	printTable(os.Stdout, rows)
	if failed {
		os.Exit(1)
	}
}

// runScenario runs s, turning a panic of s (an even count given to
// median, an index out of range) into its error, so that the other
// scenarios still run and the table is printed.
func runScenario(s *scenario, cfg *config) (rows []row, err error) {
	defer func() {
		if p := recover(); p != nil {
			rows, err = nil, fmt.Errorf("%s panicked: %v", s.name, p)
		}
	}()
	return s.run(cfg)
}

func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmetric\trawstack\tpeer\tpeer value\tratio\tnote")
	for _, r := range rows {
		peerVal, ratio := "", ""
		if r.Peer != "" && !math.IsNaN(r.PeerVal) {
			// A peer's 0 is a figure (no samples, no bytes): printed,
			// with no ratio to divide by it.
			peerVal = fmtNum(r.PeerVal)
		}
		if peerVal != "" && r.PeerVal != 0 && !math.IsNaN(r.Rawstack) {
			q := r.Rawstack / r.PeerVal
			if r.Better == "lower" {
				// rawstack's 0 against a peer's figure: no finite ratio.
				if r.Rawstack != 0 {
					ratio = fmt.Sprintf("%.2fx better", r.PeerVal/r.Rawstack)
				}
				if q > 1 {
					ratio = fmt.Sprintf("%.2fx worse", q)
				}
			} else if r.Better == "higher" && r.PeerVal != 0 {
				ratio = fmt.Sprintf("%.2fx better", q)
				if q < 1 {
					ratio = fmt.Sprintf("%.2fx worse", 1/q)
				}
			} else {
				ratio = fmt.Sprintf("%.3f", q)
			}
		}
		raw := ""
		if r.Metric != "error" && !math.IsNaN(r.Rawstack) {
			raw = fmtNum(r.Rawstack)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Metric, raw, r.Peer, peerVal, ratio, r.Note)
	}
	tw.Flush()
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.4f", v)
	}
}
