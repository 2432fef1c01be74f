// Command rawstack-goroutines lists every goroutine of a live Go process
// or of a core dump of one; `rawstack snapshot --goroutines` runs it.
//
//	rawstack-goroutines (-p PID | --core FILE --exe BINARY) [--group] [--stats] [--max-frames N]
//
// It is a command of its own because it links github.com/go-delve/delve,
// whose package initialisation (a BPF probe in cilium/ebpf/rlimit, the
// disassembler tables of five architectures) would otherwise run at the
// start of every rawstack command.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rawstack/rawstack/platform/snapshot/goroutines"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if _, ok := err.(usageError); ok {
			fmt.Fprintf(os.Stderr, "rawstack snapshot --goroutines: %v\nusage: rawstack snapshot --goroutines (-p PID | --core FILE --exe BINARY) [--group] [--stats] [--max-frames N]\n", err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "rawstack snapshot --goroutines: %v\n", err)
		os.Exit(1)
	}
}

type usageError string

func (e usageError) Error() string { return string(e) }

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("goroutines", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.Int("p", 0, "the live Go process")
	core := fs.String("core", "", "a core dump of a Go process")
	exe := fs.String("exe", "", "with --core: the executable the core belongs to")
	group := fs.Bool("group", false, "group goroutines with the same state and stack, largest group first")
	stats := fs.Bool("stats", false, "print timings to stderr")
	maxFrames := fs.Int("max-frames", 0, "cap on frames per goroutine (0: 100)")
	fs.Bool("goroutines", true, "accepted for `rawstack snapshot --goroutines`")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of this command to FILE")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	if (*pid == 0) == (*core == "") {
		return usageError("give exactly one of -p PID and --core FILE")
	}
	if *core != "" && *exe == "" {
		return usageError("--core needs --exe BINARY: delve reads the runtime's types from the executable")
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument " + strconv.Quote(fs.Arg(0)))
	}
	if *core != "" {
		debug.SetGCPercent(400) // delve allocates much, and keeps little
	} else {
		// The live reader keeps the copy (~1 KB a goroutine) and the
		// listing; a soft limit keeps the peak near that (64 MiB at
		// 10,000 goroutines is the goal).
		debug.SetMemoryLimit(48 << 20)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	opts := &goroutines.Options{MaxFrames: *maxFrames}
	t0 := time.Now()
	var d *goroutines.Dump
	var err error
	if *core != "" {
		d, err = goroutines.Core(*core, *exe, opts)
	} else {
		d, err = goroutines.Process(*pid, opts)
	}
	if err != nil {
		return err
	}
	t1 := time.Now()
	bw := bufio.NewWriterSize(stdout, 64<<10)
	if *group {
		printGroups(bw, d)
	} else {
		printAll(bw, d)
	}
	err = bw.Flush()
	if *stats {
		fmt.Fprintf(stderr, "goroutines: %d goroutines; capture %v (threads stopped %v, %.1f MB copied), output %v\n",
			len(d.Goroutines), t1.Sub(t0).Round(time.Microsecond), d.Stopped.Round(time.Microsecond), float64(d.Copied)/1e6, time.Since(t1).Round(time.Microsecond))
	}
	return err
}

func printAll(w *bufio.Writer, d *goroutines.Dump) {
	fmt.Fprintf(w, "PID %d - %s (%s): %d goroutines\n", d.Pid, d.Exe, d.GoVersion, len(d.Goroutines))
	for i := range d.Goroutines {
		g := &d.Goroutines[i]
		w.WriteString("\ngoroutine ")
		w.WriteString(strconv.FormatInt(g.ID, 10))
		w.WriteString(" [")
		w.WriteString(g.State())
		if wt := d.Waited(g); wt >= time.Second {
			w.WriteString(", ")
			w.WriteString(waited(wt))
		}
		if g.Thread != 0 {
			w.WriteString(", thread ")
			w.WriteString(strconv.Itoa(g.Thread))
		}
		w.WriteString("]:")
		if len(g.Labels) > 0 {
			w.WriteString(" labels: ")
			w.WriteString(labels(g.Labels))
		}
		w.WriteByte('\n')
		printFrames(w, g.Frames)
		if g.Err != nil {
			fmt.Fprintf(w, "\t(stack unreadable: %v)\n", g.Err)
		}
		printCreator(w, g)
	}
}

func printFrames(w *bufio.Writer, frames []goroutines.Frame) {
	for _, f := range frames {
		name := f.Func
		if name == "" {
			name = "?"
		}
		w.WriteString(name)
		if f.Inlined {
			w.WriteString("(...) (inlined)\n\t")
		} else {
			w.WriteString("(...)\n\t")
		}
		w.WriteString(f.File)
		w.WriteByte(':')
		w.WriteString(strconv.Itoa(f.Line))
		w.WriteString(" pc=0x")
		w.WriteString(strconv.FormatUint(f.PC, 16))
		w.WriteByte('\n')
	}
}

func printCreator(w *bufio.Writer, g *goroutines.Goroutine) {
	if g.CreatedBy.Func == "" {
		return
	}
	fmt.Fprintf(w, "created by %s\n\t%s:%d\n", g.CreatedBy.Func, g.CreatedBy.File, g.CreatedBy.Line)
}

// waited prints a wait as the Go runtime's tracebacks do, in minutes from
// one minute on.
func waited(d time.Duration) string {
	if d >= time.Minute {
		m := int(d / time.Minute)
		if m == 1 {
			return "1 minute"
		}
		return strconv.Itoa(m) + " minutes"
	}
	return d.Round(time.Second).String()
}

func labels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(k))
		b.WriteByte(':')
		b.WriteString(strconv.Quote(m[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// printGroups prints one block per group: "N goroutines: state ← f1 ← f2
// ← …", the stack of one of them, and which ids.
func printGroups(w *bufio.Writer, d *goroutines.Dump) {
	groups := goroutines.GroupAll(d.Goroutines)
	fmt.Fprintf(w, "PID %d - %s (%s): %s goroutines in %d groups\n", d.Pid, d.Exe, d.GoVersion, commas(len(d.Goroutines)), len(groups))
	for _, gr := range groups {
		w.WriteByte('\n')
		w.WriteString(commas(len(gr.IDs)))
		if len(gr.IDs) == 1 {
			w.WriteString(" goroutine: ")
		} else {
			w.WriteString(" goroutines: ")
		}
		w.WriteString(gr.State)
		if gr.Thread != 0 {
			w.WriteString(" (thread ")
			w.WriteString(strconv.Itoa(gr.Thread))
			w.WriteByte(')')
		}
		// The runtime's parking frames say what the state says already.
		frames := gr.Frames
		for len(frames) > 1 && strings.HasPrefix(frames[0].Func, "runtime.") {
			frames = frames[1:]
		}
		const shown = 4
		for i, f := range frames {
			if i == shown {
				w.WriteString(" ← …")
				break
			}
			w.WriteString(" ← ")
			w.WriteString(f.Func)
		}
		w.WriteByte('\n')
		if len(gr.Labels) > 0 {
			w.WriteString("labels: ")
			w.WriteString(labels(gr.Labels))
			w.WriteByte('\n')
		}
		printFrames(w, gr.Frames)
		w.WriteString("ids: ")
		for i, id := range gr.IDs {
			if i == 20 {
				fmt.Fprintf(w, " … (%d more)", len(gr.IDs)-20)
				break
			}
			if i > 0 {
				w.WriteByte(' ')
			}
			w.WriteString(strconv.FormatInt(id, 10))
		}
		w.WriteByte('\n')
	}
}

// commas prints n with thousands separators, as "4,812".
func commas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
