package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/rawstack/rawstack/format"
)

var infoCmd = command{
	name:  "info",
	usage: "[--dump] FILE",
	short: "summarize a trace: events per kind, processes, threads, modules, duration, lost data, damaged chunks",
	run:   runInfo,
}

func runInfo(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("info", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dump := fs.Bool("dump", false, "also print every event, one per line, with its byte offset")
	if err := fs.Parse(args); err != nil {
		return &usageError{err.Error()}
	}
	if fs.NArg() != 1 {
		return &usageError{"want exactly one FILE"}
	}
	path := fs.Arg(0)
	r, err := format.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()

	type module struct {
		ev       format.ModuleLoad
		unloaded bool
	}
	var (
		counts             [256]int64
		first, last        int64
		haveTime           bool
		procs              = map[uint32]string{}
		threads            = map[uint64]string{} // pid<<32|tid
		modules            []*module
		moduleByID         = map[uint64]*module{}
		lost               = map[format.LostReason]uint64{}
		sampleWeight       uint64
		rawBytes           int64
		chunkErrs          []string
		walls              int
		wallAt, wallAtTime int64
	)
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		var ce *format.ChunkError
		if errors.As(err, &ce) {
			chunkErrs = append(chunkErrs, ce.Error())
			continue
		}
		if err != nil {
			return err
		}
		if *dump {
			fmt.Fprintf(stdout, "%10d %s\n", ev.Offset, format.DumpEvent(ev))
		}
		counts[ev.Code]++
		if t, ok := ev.Time(); ok {
			if !haveTime || t < first {
				first = t
			}
			if !haveTime || t > last {
				last = t
			}
			haveTime = true
		}
		switch ev.Kind {
		case format.KindProcess:
			procs[ev.Process.Pid] = ev.Process.Name
		case format.KindThreadStart:
			k := uint64(ev.ThreadStart.Pid)<<32 | uint64(ev.ThreadStart.Tid)
			if _, ok := threads[k]; !ok {
				threads[k] = ""
			}
		case format.KindThreadName:
			threads[uint64(ev.ThreadName.Pid)<<32|uint64(ev.ThreadName.Tid)] = ev.ThreadName.Name
		case format.KindModuleLoad:
			m := &module{ev: ev.ModuleLoad}
			m.ev.BuildID = append([]byte(nil), ev.ModuleLoad.BuildID...)
			modules = append(modules, m)
			moduleByID[m.ev.ID] = m
		case format.KindModuleUnload:
			if m := moduleByID[ev.ModuleUnload.ID]; m != nil {
				m.unloaded = true
			}
		case format.KindSample:
			sampleWeight += ev.Sample.Weight
			if ev.Sample.Pid != 0 {
				if _, ok := threads[uint64(ev.Sample.Pid)<<32|uint64(ev.Sample.Tid)]; !ok {
					threads[uint64(ev.Sample.Pid)<<32|uint64(ev.Sample.Tid)] = ""
				}
			}
		case format.KindRawStack:
			rawBytes += int64(len(ev.RawStack.Data))
		case format.KindLost:
			lost[ev.Lost.Reason] += ev.Lost.Count
		case format.KindClockSync:
			if walls == 0 {
				wallAt, wallAtTime = ev.ClockSync.WallNano, ev.ClockSync.Time
			}
			walls++
		}
	}
	st := r.Stats()
	h := r.Header()
	fmt.Fprintf(stdout, "file:      %s\n", path)
	fmt.Fprintf(stdout, "format:    version %d, %v/%v, %d-byte pointers, clock %v\n", h.Version, h.OS, h.Arch, h.PointerSize, h.Clock)
	fmt.Fprintf(stdout, "chunks:    %d read, %d skipped (%d bytes)\n", st.Chunks, st.ChunksSkipped, st.BytesSkipped)
	if haveTime {
		fmt.Fprintf(stdout, "duration:  %v", time.Duration(last-first))
		if walls > 0 {
			start := time.Unix(0, wallAt-(wallAtTime-first)).UTC()
			fmt.Fprintf(stdout, " (from %s)", start.Format(time.RFC3339Nano))
		}
		fmt.Fprintln(stdout)
	}
	samples := counts[format.KindSample] + counts[format.KindRawStack]
	fmt.Fprintf(stdout, "samples:   %d (weight %d), %d raw stack bytes\n", samples, sampleWeight, rawBytes)
	var lostTotal uint64
	reasons := make([]format.LostReason, 0, len(lost))
	for k, v := range lost {
		lostTotal += v
		reasons = append(reasons, k)
	}
	sort.Slice(reasons, func(i, j int) bool { return reasons[i] < reasons[j] })
	fmt.Fprintf(stdout, "lost:      %d", lostTotal)
	for _, k := range reasons {
		fmt.Fprintf(stdout, " %v=%d", k, lost[k])
	}
	fmt.Fprintln(stdout)

	fmt.Fprintln(stdout, "events:")
	for code, n := range counts {
		if n == 0 {
			continue
		}
		name := format.Kind(code).String()
		if code >= format.NumKinds {
			name = fmt.Sprintf("unknown(%d)", code)
		}
		fmt.Fprintf(stdout, "  %-13s %d\n", name, n)
	}

	pids := make([]uint32, 0, len(procs))
	for p := range procs {
		pids = append(pids, p)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	fmt.Fprintf(stdout, "processes: %d\n", len(pids))
	for _, p := range pids {
		fmt.Fprintf(stdout, "  %d %s\n", p, procs[p])
	}
	keys := make([]uint64, 0, len(threads))
	for k := range threads {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	fmt.Fprintf(stdout, "threads:   %d\n", len(keys))
	for _, k := range keys {
		fmt.Fprintf(stdout, "  %d/%d %s\n", k>>32, uint32(k), threads[k])
	}
	fmt.Fprintf(stdout, "modules:   %d\n", len(modules))
	for _, m := range modules {
		e := &m.ev
		id := ""
		switch {
		case len(e.BuildID) > 0:
			id = " buildid=" + hex.EncodeToString(e.BuildID)
		case e.HasPDB():
			id = fmt.Sprintf(" pdb=%s/%d", hex.EncodeToString(e.PDBGUID[:]), e.PDBAge)
		}
		if e.GoBuildID != "" {
			id += " go"
		}
		un := ""
		if m.unloaded {
			un = " (unloaded)"
		}
		fmt.Fprintf(stdout, "  %#x-%#x %-6v %s%s%s\n", e.Base, e.Base+e.Size, e.Kind, e.Path, id, un)
	}
	for _, e := range chunkErrs {
		fmt.Fprintf(stdout, "damaged:   %s\n", e)
	}
	return nil
}
