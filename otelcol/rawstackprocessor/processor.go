package rawstackprocessor

import (
	"context"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/otlpcheck"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	_ "github.com/rawstack/rawstack/symbolizer/sources" // every symbol source, as every rawstack command has them
)

// maxBuildID caps a build id attribute (hex): GNU build ids are 20 bytes
// (SHA-1) or 16 (MD5/UUID); 64 leaves room for any hash.
const maxBuildID = 64

// maxPath caps a recorded path taken from a request.
const maxPath = 4096

type symProcessor struct {
	cfg  *Config
	lim  limits
	log  *zap.Logger
	res  *symbolizer.Resolver
	opts *symbolizer.Options
	htl  *htlIndex

	lookups  *limiter      // searches over time
	inFlight chan struct{} // searches running now
	missing  *negCache     // modules searched for and not found
	logs     *logLimiter

	// totals, for tests and debugging
	resolved, unresolved atomic.Int64
	// searched counts modules searched for; deferred, modules left raw
	// in a request because a lookup bound was reached; rejected,
	// requests refused; cut, requests whose symbolization stopped at
	// max_added_bytes or request_timeout.
	searched, deferred, rejected, cut atomic.Int64
}

func newSymbolizer(cfg *Config, log *zap.Logger) *symProcessor {
	o := &symbolizer.Options{
		DebugDirs:       cfg.DebugDirs,
		DebuginfodURLs:  cfg.DebuginfodURLs,
		NoDebuginfod:    len(cfg.DebuginfodURLs) == 0,
		DebuginfodCache: cfg.DebuginfodCache,
		SymbolPath:      cfg.SymbolPath,
		SymbolCache:     cfg.SymbolCache,
		NoRecordedPaths: !cfg.UseRecordedPaths,
		// The build-id cache of recordings made as the collector's user
		// on the collector's host is no source for other hosts' profiles:
		// a host's cache is given in debug_dirs (README, Containers).
		// Read by default, it named frames of a test fixture that another
		// test's recording had left there, in a profile the processor had
		// to leave as it came (TestUnresolvableFramesPassThrough).
		NoBuildIDCache: true,
	}
	p := &symProcessor{cfg: cfg, lim: cfg.limits(), log: log, opts: o, logs: newLogLimiter(logInterval, time.Now)}
	o.Warn = func(err error) {
		p.logs.info(log, "cannot symbolize a module", "rawstack: cannot symbolize a module", zap.Error(err))
	}
	p.res = symbolizer.NewResolver(o, cfg.MaxOpenFiles, cfg.MaxAddressesPerFile)
	p.htl = &htlIndex{dirs: cfg.HTLHashDirs, max: p.lim.maxIdx, log: log}
	p.lookups = newLimiter(p.lim.lookupRate, 1024, time.Now)
	p.inFlight = make(chan struct{}, p.lim.inFlight)
	p.missing = newNegCache(p.lim.negSize, p.lim.negTTL, time.Now)
	return p
}

// process symbolizes the raw locations of pd in place. A request that
// breaks the OTLP profiles conformance rules (internal/otlpcheck: indices
// out of range, duplicate or orphan entries, ...) or exceeds
// max_locations or max_request_entries is refused as a permanent error:
// the OTLP receiver answers InvalidArgument, which tells the sender not
// to retry, and nothing downstream sees it. What the processor adds keeps
// a conforming request conforming.
func (p *symProcessor) process(ctx context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	if err := p.admit(pd); err != nil {
		p.rejected.Add(1)
		p.logs.info(p.log, "rejected", "rawstack: request refused", zap.Error(err))
		return pd, consumererror.NewPermanent(status.Error(codes.InvalidArgument, err.Error()))
	}
	deadline := time.Now().Add(p.lim.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	d := pd.Dictionary()
	strs := d.StringTable()
	frameTypeKey := int32(-1)
	var in *interner
	lookups, bounded := 0, false
	mods := make([]*symbolizer.Module, d.MappingTable().Len())
	modDone := make([]bool, len(mods))
	for li := 1; li < d.LocationTable().Len(); li++ {
		if li%64 == 0 && time.Now().After(deadline) {
			p.stop("request_timeout", zap.Duration("request_timeout", p.lim.timeout), zap.Int("locations_left", d.LocationTable().Len()-li))
			break
		}
		loc := d.LocationTable().At(li)
		mi := int(loc.MappingIndex())
		if loc.Lines().Len() > 0 || mi == 0 {
			continue
		}
		if frameTypeKey < 0 {
			frameTypeKey = findString(strs, otlp.AttrFrameType)
		}
		if isKernel(d, loc.AttributeIndices().AsRaw(), frameTypeKey) {
			continue
		}
		if !modDone[mi] {
			modDone[mi] = true
			m := p.module(d, d.MappingTable().At(mi))
			if m != nil && !p.res.Known(m) {
				switch {
				case p.missing.has(moduleKey(m)):
					// Searched for lately and not found.
					m = nil
				case lookups >= p.lim.maxLookups || !p.lookups.take():
					// A search: debug directories, debuginfod, symbol
					// servers. Bounded per request and over time, so a
					// request naming thousands of build ids costs a
					// bounded amount of work; the rest stay raw.
					p.deferred.Add(1)
					if !bounded {
						bounded = true // one line per request, not per module
						p.logs.info(p.log, "lookup bound", "rawstack: module lookup bound reached; frames of further new modules stay raw in this request",
							zap.Int("max_lookups_per_request", p.lim.maxLookups))
					}
					m = nil
				default:
					lookups++
					if !p.search(m, loc.Address(), deadline) {
						m = nil
					}
				}
			}
			mods[mi] = m
		}
		m := mods[mi]
		if m == nil {
			p.unresolved.Add(1)
			continue
		}
		frames, _, _ := p.res.Resolve(m, loc.Address())
		if len(frames) == 0 {
			p.unresolved.Add(1)
			continue
		}
		if in == nil {
			in = newInterner(d)
		}
		if in.added+in.cost(frames) > p.lim.maxAdded {
			p.stop("max_added_bytes", zap.Int("max_added_bytes", p.lim.maxAdded), zap.Int("locations_left", d.LocationTable().Len()-li))
			break
		}
		in.lines(loc, frames)
		p.resolved.Add(1)
	}
	return pd, nil
}

// stop notes that a request's symbolization stopped at a bound.
func (p *symProcessor) stop(bound string, fields ...zap.Field) {
	p.cut.Add(1)
	p.logs.info(p.log, bound, "rawstack: "+bound+" reached; the request's remaining frames stay raw", fields...)
}

// search looks for module m's files, which the first address resolved in
// it does, waiting at most until deadline: a search that takes longer
// goes on in the background, and its module stays raw in this request.
// It reports whether m's files were found. A search needs one of
// max_lookups_in_flight slots; without one, m stays raw.
func (p *symProcessor) search(m *symbolizer.Module, addr uint64, deadline time.Time) bool {
	select {
	case p.inFlight <- struct{}{}:
	default:
		p.deferred.Add(1)
		p.logs.info(p.log, "lookups in flight", "rawstack: max_lookups_in_flight searches running; a module stays raw in this request",
			zap.Int("max_lookups_in_flight", p.lim.inFlight))
		return false
	}
	p.searched.Add(1)
	done := make(chan bool, 1)
	go func() {
		defer func() { <-p.inFlight }()
		_, _, err := p.res.Resolve(m, addr)
		if err != nil {
			p.missing.add(moduleKey(m))
		}
		done <- err == nil
	}()
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case found := <-done:
		return found
	case <-wait.C:
		return false
	}
}

// moduleKey identifies a module's files for the negative cache: what
// they are searched by.
func moduleKey(m *symbolizer.Module) string {
	return fmt.Sprintf("%d\x00%x\x00%s\x00%s\x00%x%d\x00%x%x", m.Kind, m.BuildID, m.GoBuildID, m.Path, m.PDBGUID, m.PDBAge, m.TimeDateStamp, m.SizeOfImage)
}

// module describes a mapping as the symbolizer's Module, or returns nil
// when nothing could find its files.
func (p *symProcessor) module(d pprofile.ProfilesDictionary, mp pprofile.Mapping) *symbolizer.Module {
	m := &symbolizer.Module{}
	m.Kind = format.ModuleELF
	m.Base, m.Size, m.FileOffset = mp.MemoryStart(), mp.MemoryLimit()-mp.MemoryStart(), mp.FileOffset()
	strs := d.StringTable()
	htl := ""
	for _, ai := range mp.AttributeIndices().All() {
		a := d.AttributeTable().At(int(ai))
		if a.Value().Type() != pcommon.ValueTypeStr {
			continue
		}
		switch strs.At(int(a.KeyStrindex())) {
		case otlp.AttrPDBGUIDAge:
			if g, age, err := otlp.ParsePDBGUIDAge(a.Value().Str()); err == nil {
				m.Kind, m.PDBGUID, m.PDBAge = format.ModulePE, g, age
			}
		case otlp.AttrPDBPath:
			if s := a.Value().Str(); len(s) <= maxPath {
				m.PDBPath = s
			}
		case otlp.AttrPECodeID:
			if ts, size, err := otlp.ParsePECodeID(a.Value().Str()); err == nil {
				m.Kind, m.TimeDateStamp, m.SizeOfImage = format.ModulePE, ts, size
			}
		case otlp.AttrBuildIDGNU:
			if s := a.Value().Str(); len(s) <= maxBuildID {
				if b, err := hex.DecodeString(s); err == nil {
					m.BuildID = b
				}
			}
		case otlp.AttrBuildIDGo:
			if s := a.Value().Str(); len(s) <= maxPath {
				m.GoBuildID = s
			}
		case otlp.AttrBuildIDHTLHash:
			htl, _ = otlp.ParseHTLHash(a.Value().Str())
		}
	}
	if m.Kind == format.ModulePE {
		// Found by identity (code id, PDB GUID and age) under its base
		// name; the symbolizer's NoRecordedPaths keeps it from opening
		// the recorded path unless use_recorded_paths says so.
		if name := strs.At(int(mp.FilenameStrindex())); len(name) <= maxPath {
			m.Path = name
		}
		return m
	}
	if p.cfg.UseRecordedPaths {
		m.Path = strs.At(int(mp.FilenameStrindex()))
	}
	if m.Path == "" && htl != "" {
		// A file of the htlhash_dirs with the same htlhash (its debug
		// file is still looked for by its GNU build id, if any).
		m.Path = p.htl.lookup(htl)
	}
	if len(m.BuildID) == 0 && m.Path == "" {
		return nil
	}
	return m
}

func isKernel(d pprofile.ProfilesDictionary, attrs []int32, key int32) bool {
	if key <= 0 {
		return false
	}
	for _, ai := range attrs {
		a := d.AttributeTable().At(int(ai))
		if a.KeyStrindex() == key && a.Value().Str() == otlp.FrameKernel {
			return true
		}
	}
	return false
}

func findString(strs interface {
	Len() int
	At(int) string
}, s string) int32 {
	for i := 0; i < strs.Len(); i++ {
		if strs.At(i) == s {
			return int32(i)
		}
	}
	return -1
}

// interner adds strings and functions to a dictionary without
// duplicating the ones already there, and counts what it added.
type interner struct {
	d     pprofile.ProfilesDictionary
	strs  map[string]int32
	funcs map[[2]int32]int32
	// added is what the request grew by: bytes of new strings, and
	// entryCost for each new string, function and line
	added int
}

// entryCost is what one added entry counts against max_added_bytes.
const entryCost = 32

func newInterner(d pprofile.ProfilesDictionary) *interner {
	in := &interner{d: d, strs: make(map[string]int32, d.StringTable().Len()), funcs: map[[2]int32]int32{}}
	for i, s := range d.StringTable().All() {
		if _, ok := in.strs[s]; !ok {
			in.strs[s] = int32(i)
		}
	}
	for i, f := range d.FunctionTable().All() {
		if f.NameStrindex() == f.SystemNameStrindex() {
			in.funcs[[2]int32{f.NameStrindex(), f.FilenameStrindex()}] = int32(i)
		}
	}
	return in
}

func (in *interner) str(s string) int32 {
	if i, ok := in.strs[s]; ok {
		return i
	}
	i := int32(in.d.StringTable().Len())
	in.d.StringTable().Append(s)
	in.strs[s] = i
	in.added += len(s) + entryCost
	return i
}

func (in *interner) function(name, file string) int32 {
	k := [2]int32{in.str(name), in.str(file)}
	if i, ok := in.funcs[k]; ok {
		return i
	}
	i := int32(in.d.FunctionTable().Len())
	f := in.d.FunctionTable().AppendEmpty()
	f.SetNameStrindex(k[0])
	f.SetSystemNameStrindex(k[0])
	f.SetFilenameStrindex(k[1])
	in.funcs[k] = i
	in.added += entryCost
	return i
}

// cost bounds what naming a location with frames adds.
func (in *interner) cost(frames []symbolizer.Frame) int {
	n := 0
	for _, f := range frames {
		n += len(f.Function) + len(f.File) + 4*entryCost
	}
	return n
}

// lines names loc with frames.
func (in *interner) lines(loc pprofile.Location, frames []symbolizer.Frame) {
	n := loc.Lines().Len()
	otlp.AppendLines(in.d, loc, frames, in.str, in.function)
	in.added += (loc.Lines().Len() - n) * entryCost
}

// RequestError says a request was refused.
type RequestError struct {
	Err error
}

func (e *RequestError) Error() string {
	return "rawstack processor: malformed profiles: " + e.Err.Error()
}

func (e *RequestError) Unwrap() error { return e.Err }

// admit checks a request before the processor does any work for it: its
// size, then every rule of the OTLP profiles conformance checks (every
// index in range among them, so that neither this processor nor anything
// after it indexes out of range).
func (p *symProcessor) admit(pd pprofile.Profiles) error {
	d := pd.Dictionary()
	if n := d.LocationTable().Len(); n > p.lim.maxLocations {
		return &RequestError{fmt.Errorf("%d locations, more than max_locations %d", n, p.lim.maxLocations)}
	}
	if n := entries(pd, p.lim.maxEntries); n > p.lim.maxEntries {
		return &RequestError{fmt.Errorf("more than max_request_entries %d entries", p.lim.maxEntries)}
	}
	if err := otlpcheck.Check(pd); err != nil {
		return &RequestError{err}
	}
	return nil
}

// entries counts a request's entries, stopping once past max.
func entries(pd pprofile.Profiles, max int) int {
	d := pd.Dictionary()
	n := d.StringTable().Len() + d.AttributeTable().Len() + d.MappingTable().Len() + d.LocationTable().Len() +
		d.FunctionTable().Len() + d.StackTable().Len() + d.LinkTable().Len()
	for _, s := range d.StackTable().All() {
		if n += s.LocationIndices().Len(); n > max {
			return n
		}
	}
	for _, l := range d.LocationTable().All() {
		if n += l.Lines().Len() + l.AttributeIndices().Len(); n > max {
			return n
		}
	}
	for _, m := range d.MappingTable().All() {
		n += m.AttributeIndices().Len()
	}
	for _, rp := range pd.ResourceProfiles().All() {
		n += 1 + rp.Resource().Attributes().Len()
		for _, sp := range rp.ScopeProfiles().All() {
			n += 1 + sp.Scope().Attributes().Len()
			for _, pr := range sp.Profiles().All() {
				n += 1 + pr.AttributeIndices().Len()
				for _, s := range pr.Samples().All() {
					if n += 1 + s.Values().Len() + s.TimestampsUnixNano().Len() + s.AttributeIndices().Len(); n > max {
						return n
					}
				}
			}
		}
	}
	return n
}

// limiter is a token bucket: take succeeds while tokens remain, and
// tokens come back at rate per second up to burst.
type limiter struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

func newLimiter(rate, burst float64, now func() time.Time) *limiter {
	return &limiter{rate: rate, burst: burst, tokens: burst, last: now(), now: now}
}

func (l *limiter) take() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.now()
	l.tokens = min(l.burst, l.tokens+t.Sub(l.last).Seconds()*l.rate)
	l.last = t
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}
