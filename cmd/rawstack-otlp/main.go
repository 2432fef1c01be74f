// Command rawstack-otlp is the OTLP side of rawstack: `rawstack convert
// --to otlp` and `rawstack record --otlp-endpoint` run it. It links the
// OpenTelemetry Collector's pdata, whose package initialization (feature
// gates, a JSON codec) would slow the start of every rawstack command, so
// it is a binary of its own, looked for next to rawstack and then on PATH.
//
//	rawstack-otlp convert FILE [--raw] [-o OUT] [--debug-dir DIR]... [--path-map OLD=NEW]... [--no-debuginfod] [--kallsyms FILE] [--symbol-path PATH] [--symbol-cache DIR] [-j N] [--raw-kernel] [--no-file-hash]
//	rawstack-otlp stream --endpoint HOST:PORT [--raw [--raw-kernel]] [--interval D] [--queue N] [--tls] [--ca FILE] [--header K=V]... [--service NAME] [--compression gzip|none] < STREAM
//
// stream reads a rawstack stream on standard input (record writes it as
// one of its tracer's streams), sends it in batches and, at the end,
// prints one summary line on standard error (package
// cmd/internal/otlpstream, which rawstack-ebpf runs in its own process).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rawstack/rawstack/cmd/internal/otlpstream"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/selfprof"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	"github.com/rawstack/rawstack/symbolizer/sources"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rawstack-otlp convert|stream ARGS")
		os.Exit(2)
	}
	stop := selfprof.Start("rawstack-otlp")
	var err error
	switch os.Args[1] {
	case "convert":
		err = convert(os.Args[2:])
	case "stream":
		err = stream(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "rawstack-otlp: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rawstack-otlp %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func convert(args []string) error {
	fs := flag.NewFlagSet("convert", flag.ExitOnError)
	raw := fs.Bool("raw", false, "leave locations unsymbolized")
	out := fs.String("o", "", "output file (default: standard output)")
	var sf sources.Flags
	sf.Register(fs)
	rawKernel := fs.Bool("raw-kernel", false, "with --raw, leave kernel frames unnamed too")
	noFileHash := fs.Bool("no-file-hash", false, "leave out process.executable.build_id.htlhash (the files at the recorded paths are not the recorded ones)")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("want the trace FILE first")
	}
	file := args[0]
	fs.Parse(args[1:])
	o, err := sf.Options()
	if err != nil {
		return err
	}
	warned := map[string]bool{}
	o.Warn = func(err error) {
		if !warned[err.Error()] {
			warned[err.Error()] = true
			fmt.Fprintf(os.Stderr, "warning: %v\n", err)
		}
	}
	r, err := format.Open(file)
	if err != nil {
		return err
	}
	defer r.Close()
	host, _ := os.Hostname()
	opts := otlp.Options{Raw: *raw, RawKernel: *rawKernel, HostName: host, NoFileHash: *noFileHash}
	// In raw mode it names kernel frames only (--kallsyms applies).
	opts.Resolver = symbolizer.NewResolver(o, 0, 0)
	defer opts.Resolver.Close()
	p, c, err := otlp.Convert(r, opts, o.Warn)
	if err != nil {
		return err
	}
	if c.Samples == 0 && c.RawStacks > 0 {
		return otlp.ErrRawStacks
	}
	var w io.Writer = os.Stdout
	var f *os.File
	if *out != "" && *out != "-" {
		if f, err = os.Create(*out); err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriter(w)
	if err := otlp.Write(bw, p); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if f != nil {
		return f.Close()
	}
	return nil
}

// stream is package otlpstream fed from standard input.
func stream(args []string) error {
	// The stream ends when standard input does: the recorder closes it
	// after an interrupt or SIGTERM, which a terminal or a service manager
	// also sends here. Dying on them would lose what is queued.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	s, err := otlpstream.Start(args, os.Stderr)
	if err != nil {
		return err
	}
	_, cerr := io.Copy(s, os.Stdin)
	if err := s.Close(); err != nil && cerr == nil {
		cerr = err
	}
	return cerr
}
