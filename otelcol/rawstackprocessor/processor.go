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
	log  *zap.Logger
	res  *symbolizer.Resolver
	opts *symbolizer.Options
	htl  *htlIndex

	maxLookups int      // per request
	lookups    *limiter // over time

	// totals, for tests and debugging
	resolved, unresolved atomic.Int64
	// searched counts modules searched for; deferred, modules left raw
	// in a request because a lookup bound was reached.
	searched, deferred atomic.Int64
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
		Warn:            func(err error) { log.Info("rawstack: cannot symbolize a module", zap.Error(err)) },
	}
	maxIdx := cfg.MaxIndexedFiles
	if maxIdx <= 0 {
		maxIdx = 100000
	}
	maxLookups := cfg.MaxLookupsPerRequest
	if maxLookups <= 0 {
		maxLookups = 256
	}
	rate := cfg.MaxLookupsPerSecond
	if rate <= 0 {
		rate = 64
	}
	return &symProcessor{cfg: cfg, log: log, opts: o, res: symbolizer.NewResolver(o, cfg.MaxOpenFiles, cfg.MaxAddressesPerFile),
		htl:        &htlIndex{dirs: cfg.HTLHashDirs, max: maxIdx, log: log},
		maxLookups: maxLookups, lookups: newLimiter(rate, 1024, time.Now)}
}

// process symbolizes the raw locations of pd in place.
func (p *symProcessor) process(_ context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	if err := validate(pd, p.cfg.MaxLocations); err != nil {
		// InvalidArgument: the OTLP receiver tells the sender not to retry.
		return pd, consumererror.NewPermanent(status.Error(codes.InvalidArgument, err.Error()))
	}
	d := pd.Dictionary()
	strs := d.StringTable()
	frameTypeKey := int32(-1)
	var in *interner
	lookups, bounded := 0, false
	mods := make([]*symbolizer.Module, d.MappingTable().Len())
	modDone := make([]bool, len(mods))
	for li := 1; li < d.LocationTable().Len(); li++ {
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
				// A search: debug directories, debuginfod, symbol
				// servers. Bounded per request and over time, so a
				// request naming thousands of build ids costs a
				// bounded amount of work; the rest stay raw.
				if lookups >= p.maxLookups || !p.lookups.take() {
					p.deferred.Add(1)
					if !bounded {
						bounded = true // one line per request, not per module
						p.log.Info("rawstack: module lookup bound reached; frames of further new modules stay raw in this request",
							zap.Int("max_lookups_per_request", p.maxLookups))
					}
					m = nil
				} else {
					lookups++
					p.searched.Add(1)
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
		otlp.AppendLines(d, loc, frames, in.str, in.function)
		p.resolved.Add(1)
	}
	return pd, nil
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
// duplicating the ones already there.
type interner struct {
	d     pprofile.ProfilesDictionary
	strs  map[string]int32
	funcs map[[2]int32]int32
}

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
	return i
}

// RequestError says a request's dictionary references are inconsistent.
type RequestError struct {
	What  string
	Index int
	Ref   int64
	Len   int
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("rawstack processor: malformed profiles: %s %d refers to index %d of a table of %d", e.What, e.Index, e.Ref, e.Len)
}

// validate checks every dictionary reference of pd, so that neither this
// processor nor anything after it indexes out of range.
func validate(pd pprofile.Profiles, maxLocs int) error {
	if maxLocs <= 0 {
		maxLocs = 1 << 20
	}
	d := pd.Dictionary()
	nStr, nAttr, nMap := d.StringTable().Len(), d.AttributeTable().Len(), d.MappingTable().Len()
	nLoc, nFn, nStack, nLink := d.LocationTable().Len(), d.FunctionTable().Len(), d.StackTable().Len(), d.LinkTable().Len()
	if nLoc > maxLocs {
		return fmt.Errorf("rawstack processor: %d locations, more than max_locations %d", nLoc, maxLocs)
	}
	check := func(what string, i int, ref int64, n int) error {
		if ref < 0 || ref >= int64(n) {
			return &RequestError{what, i, ref, n}
		}
		return nil
	}
	attrs := func(what string, i int, s []int32) error {
		for _, a := range s {
			if err := check(what+" attribute", i, int64(a), nAttr); err != nil {
				return err
			}
		}
		return nil
	}
	for i, a := range d.AttributeTable().All() {
		if err := check("attribute key", i, int64(a.KeyStrindex()), nStr); err != nil {
			return err
		}
		if err := check("attribute unit", i, int64(a.UnitStrindex()), nStr); err != nil {
			return err
		}
	}
	for i, m := range d.MappingTable().All() {
		if err := check("mapping filename", i, int64(m.FilenameStrindex()), nStr); err != nil {
			return err
		}
		if err := attrs("mapping", i, m.AttributeIndices().AsRaw()); err != nil {
			return err
		}
		if m.MemoryLimit() < m.MemoryStart() {
			return fmt.Errorf("rawstack processor: malformed profiles: mapping %d ends at %#x before it starts at %#x", i, m.MemoryLimit(), m.MemoryStart())
		}
	}
	for i, f := range d.FunctionTable().All() {
		for _, s := range []int32{f.NameStrindex(), f.SystemNameStrindex(), f.FilenameStrindex()} {
			if err := check("function string", i, int64(s), nStr); err != nil {
				return err
			}
		}
	}
	for i, l := range d.LocationTable().All() {
		if err := check("location mapping", i, int64(l.MappingIndex()), nMap); err != nil {
			return err
		}
		if err := attrs("location", i, l.AttributeIndices().AsRaw()); err != nil {
			return err
		}
		for _, ln := range l.Lines().All() {
			if err := check("location line function", i, int64(ln.FunctionIndex()), nFn); err != nil {
				return err
			}
		}
	}
	for i, s := range d.StackTable().All() {
		for _, l := range s.LocationIndices().All() {
			if err := check("stack location", i, int64(l), nLoc); err != nil {
				return err
			}
		}
	}
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				if err := attrs("profile", 0, pr.AttributeIndices().AsRaw()); err != nil {
					return err
				}
				for _, s := range []int32{pr.SampleType().TypeStrindex(), pr.SampleType().UnitStrindex(), pr.PeriodType().TypeStrindex(), pr.PeriodType().UnitStrindex()} {
					if err := check("profile value type string", 0, int64(s), nStr); err != nil {
						return err
					}
				}
				for i, s := range pr.Samples().All() {
					if err := check("sample stack", i, int64(s.StackIndex()), nStack); err != nil {
						return err
					}
					if s.LinkIndex() != 0 {
						if err := check("sample link", i, int64(s.LinkIndex()), nLink); err != nil {
							return err
						}
					}
					if err := attrs("sample", i, s.AttributeIndices().AsRaw()); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
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
