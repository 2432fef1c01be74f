package main

import (
	"bufio"
	"flag"
	"io"
	"os"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/folded"
	"github.com/rawstack/rawstack/symbolizer/export/pprof"
	"github.com/rawstack/rawstack/symbolizer/export/text"
)

var convertCmd = command{
	name:  "convert",
	usage: "FILE --to pprof|folded|text|perfetto|chrome|firefox|speedscope|otlp [--raw] [-o OUT] [--value samples|cpu|offcpu|alloc_space|alloc_objects|inuse_space|inuse_objects] [--top N] [--path-map OLD=NEW]... [--debug-dir DIR]... [--no-debuginfod] [--kallsyms FILE] [--symbol-path PATH] [--symbol-cache DIR] [-j N]",
	short: "symbolize a trace and write it as pprof, folded stacks, a text report, a timeline (Perfetto, Chrome JSON, Firefox Profiler, speedscope) or an OTLP profiles request",
	run:   runConvert,
}

func runConvert(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	to := fs.String("to", "", "output format: pprof, folded, a timeline: perfetto, chrome, firefox, speedscope, or otlp (a protobuf ExportProfilesServiceRequest)")
	raw := fs.Bool("raw", false, "otlp: leave locations unsymbolized (addresses, mappings, build ids)")
	out := fs.String("o", "", "output file (default: standard output)")
	value := fs.String("value", "samples", "folded and text: the number after each stack, samples, cpu (ns on CPU), offcpu (ns off CPU, from record --off-cpu), or from a trace with allocation samples alloc_space, alloc_objects, inuse_space, inuse_objects (bytes and allocations)")
	top := fs.Int("top", 20, "text: functions per table")
	var sf symFlags
	sf.register(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return &usageError{err.Error()}
	}
	if len(pos) != 1 {
		return &usageError{"want one trace FILE"}
	}
	timeline := timelineWriter(*to)
	if *to != "pprof" && *to != "folded" && *to != "text" && *to != "otlp" && timeline == nil {
		return &usageError{"--to must be pprof, folded, text, perfetto, chrome, firefox, speedscope or otlp"}
	}
	if *raw && *to != "otlp" {
		return &usageError{"--raw works with --to otlp"}
	}
	v, ok := folded.ParseValue(*value)
	if !ok {
		return &usageError{"--value must be samples, cpu, offcpu, alloc_space, alloc_objects, inuse_space or inuse_objects"}
	}
	if *to == "otlp" {
		return runOTLPConvert(pos[0], *raw, *out, &sf, stdout, stderr)
	}
	o, err := sf.options(stderr)
	if err != nil {
		return err
	}
	o.Timeline = timeline != nil
	p, err := buildProfile(pos[0], o)
	if err != nil {
		return err
	}
	w := stdout
	var f *os.File
	if *out != "" && *out != "-" {
		if f, err = os.Create(*out); err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriter(w)
	switch {
	case timeline != nil:
		err = timeline(bw, p, pos[0])
	case *to == "pprof":
		err = pprof.Write(bw, p)
	case *to == "text":
		err = writeText(bw, p, *top, v)
	default:
		err = folded.Write(bw, p, v)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && f != nil {
		err = f.Close()
	}
	return err
}

// writeText prints the text report of p weighted by v.
func writeText(w io.Writer, p *symbolizer.Profile, top int, v folded.Value) error {
	switch {
	case v == folded.Samples:
		return text.Write(w, p, top)
	case v.Memory() && !p.Memory:
		return folded.ErrNoMemory
	case v == folded.CPUNanos && p.Unweighted:
		return folded.ErrNoCPUTime
	}
	what := map[folded.Value]string{folded.CPUNanos: "ns on CPU", folded.OffCPUNanos: "ns off CPU",
		folded.AllocSpace: "bytes allocated (alloc_space)", folded.AllocObjects: "allocations (alloc_objects)",
		folded.InuseSpace: "bytes in use (inuse_space)", folded.InuseObjects: "allocations in use (inuse_objects)"}[v]
	return text.WriteValue(w, p, top, what, v.Of)
}
