//go:build linux

package jit

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/jitfile"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// JIT runtimes publish their code for profilers in files that are local
// to the host and short-lived: perf maps (/tmp/perf-PID.map, written by
// node --perf-basic-prof, the JVM's -XX:+DumpPerfMapAtExit or jcmd
// Compiler.perfmap, DOTNET_PerfMapEnabled=1, python -X perf) and jitdump
// files (jit-PID.dump, node --perf-prof, JVMTI agents), which the runtime
// announces by mapping the file executable, so that a MMAP2 record names
// it. The Tracker tails both while recording, reads them once more when
// the process exits (maps written at exit), and reports their contents to
// the handler as JIT code events.

const (
	jitPollInterval = 100 * time.Millisecond
	// jitMaxFile caps what is read of one perf map or jitdump file.
	jitMaxFile = 1 << 30
	// jitMaxRead caps one read; the rest waits for the next poll.
	jitMaxRead = 16 << 20
	// jitMaxSeen caps the entries remembered per process to recognize
	// lines of a rewritten perf map that were already reported.
	jitMaxSeen = 1 << 22
	jitMaxErrs = 16
	// jitMaxBackoff caps the interval between looks for a perf map that
	// does not exist (whole-host sessions).
	jitMaxBackoff = 3200 * time.Millisecond
)

type Tracker struct {
	h        platform.JITHandler
	keepCode bool
	// FileBacked reports whether addr of pid lies in a file-backed module:
	// such addresses are named from the file, so map lines for them (V8's
	// embedded builtins) are not recorded.
	FileBacked func(pid uint32, addr uint64) bool
	// OnDemand (whole-host sessions): a process's perf map is watched
	// from its first sample on, not from its start, so that the hundreds
	// of processes a host runs that are never sampled cost nothing.
	OnDemand bool
	procs    map[uint32]*jitProc
	lastPoll time.Time
	errs     []error
	buf      []byte
	jc       platform.JITCode
}

type jitProc struct {
	pid, nspid uint32
	start      time.Time // process start (wall clock), to ignore stale maps
	root       string    // "/proc/self/fd/N": the process's root directory, kept open
	rootF      *os.File
	perfMap    jitFile
	dumps      []*jitFile
	seen       map[perfKey]struct{}
	live       map[uint64]liveCode // jitdump code by address, for CODE_MOVE
	exiting    bool                // the last read: no backoff
	debugAddr  uint64              // the DEBUG_INFO that precedes the next CODE_LOAD
	debugLines []platform.JITLine
}

type perfKey struct {
	addr, size uint64
	name       string
}

type liveCode struct {
	size uint64
	name string
}

// jitFile is a file being tailed.
type jitFile struct {
	rel     string // path under the process's root
	dump    bool
	f       *os.File
	ino     uint64
	off     int64  // file bytes consumed
	pending []byte // a partial line or record
	head    []byte // the first bytes, to notice a rewrite
	hdr     *jitfile.JitdumpHeader
	dead    bool // a fatal error: not read again
	// retry: with OnDemand, a perf map not found is looked for again
	// from then on, after backoff (doubling up to jitMaxBackoff).
	retry   time.Time
	backoff time.Duration
	// reread: the file was rewritten and is read again from the start;
	// its lines already reported are recognized and skipped. (A map that
	// is only appended to may repeat a line legitimately: code freed and
	// compiled again at the same address, after other code was there.)
	reread bool
}

func New(cfg platform.Config, h platform.Handler) *Tracker {
	jh, ok := h.(platform.JITHandler)
	if !ok || cfg.NoJIT {
		return nil
	}
	return &Tracker{h: jh, keepCode: cfg.JITCodeBytes, procs: map[uint32]*jitProc{}}
}

// started is called when process pid appears (at the start of the
// session or by fork): it tracks it unless tracking is on demand.
func (j *Tracker) Started(pid uint32) {
	if j != nil && !j.OnDemand {
		j.Track(pid)
	}
}

// Tracked returns how many processes' files are watched.
func (j *Tracker) Tracked() int {
	if j == nil {
		return 0
	}
	return len(j.procs)
}

// track starts watching process pid's perf map.
func (j *Tracker) Track(pid uint32) {
	if j == nil {
		return
	}
	if p := j.procs[pid]; p != nil {
		return
	}
	p := &jitProc{pid: pid, nspid: pid, seen: map[perfKey]struct{}{}, live: map[uint64]liveCode{}}
	dir := procfs.Dir(int(pid))
	// A process in this recorder's mount namespace sees /tmp as it does,
	// and one in its pid namespace calls itself pid: no root to hold open
	// and no status to read for them (most of a host's; a whole-host
	// session tracks every process it samples).
	if !sameNamespace(dir, "mnt") {
		if f, err := os.Open(dir + "/root"); err == nil {
			p.rootF = f
			p.root = "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
		}
	}
	if !sameNamespace(dir, "pid") {
		p.nspid = innermostNSPid(dir, pid)
	}
	p.start = procStartTime(int(pid))
	p.perfMap.rel = "/tmp/perf-" + strconv.FormatUint(uint64(p.nspid), 10) + ".map"
	j.procs[pid] = p
}

// mmap is called for every MMAP2 record; it reports whether the mapping is
// a jitdump marker (and so not a module).
func (j *Tracker) MMap(pid uint32, filename string) bool {
	base := path.Base(filename)
	if !strings.HasPrefix(base, "jit-") || !strings.HasSuffix(base, ".dump") {
		return false
	}
	if _, err := strconv.ParseUint(base[4:len(base)-5], 10, 32); err != nil {
		return false
	}
	if j == nil {
		return true
	}
	j.Track(pid)
	p := j.procs[pid]
	for _, d := range p.dumps {
		if d.rel == filename {
			return true
		}
	}
	if len(p.dumps) < 8 {
		p.dumps = append(p.dumps, &jitFile{rel: filename, dump: true})
		j.readFile(p, p.dumps[len(p.dumps)-1])
	}
	return true
}

// poll reads what the runtimes appended since the last poll.
func (j *Tracker) Poll() {
	if j == nil || time.Since(j.lastPoll) < jitPollInterval {
		return
	}
	j.lastPoll = time.Now()
	for _, p := range j.procs {
		j.readAll(p)
	}
}

// exit reads pid's files a last time (a runtime may write its map as it
// exits) and stops tracking it.
func (j *Tracker) Exit(pid uint32) {
	if j == nil {
		return
	}
	if p := j.procs[pid]; p != nil {
		p.exiting = true
		j.readAll(p)
		p.close()
		delete(j.procs, pid)
	}
}

// finish reads every tracked file a last time and closes them.
func (j *Tracker) Finish() {
	if j == nil {
		return
	}
	for pid := range j.procs {
		j.Exit(pid)
	}
}

func (j *Tracker) Close() {
	if j == nil {
		return
	}
	for pid, p := range j.procs {
		p.close()
		delete(j.procs, pid)
	}
}

func (p *jitProc) close() {
	for _, f := range append([]*jitFile{&p.perfMap}, p.dumps...) {
		if f.f != nil {
			f.f.Close()
			f.f = nil
		}
	}
	if p.rootF != nil {
		p.rootF.Close()
		p.rootF = nil
	}
}

func (j *Tracker) readAll(p *jitProc) {
	j.readFile(p, &p.perfMap)
	for _, d := range p.dumps {
		j.readFile(p, d)
	}
}

func (j *Tracker) warn(err error) {
	if len(j.errs) < jitMaxErrs {
		j.errs = append(j.errs, err)
	}
}

// open opens f's path inside p's root, falling back to the host path when
// the root could not be kept.
func (p *jitProc) open(f *jitFile) (*os.File, os.FileInfo, error) {
	name := p.root + f.rel
	if p.root == "" {
		name = f.rel
	}
	fi, err := os.Stat(name)
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s is not a regular file", f.rel)
	}
	fd, err := os.Open(name)
	if err != nil {
		return nil, nil, err
	}
	return fd, fi, nil
}

// readFile reads what is new in f and reports it.
func (j *Tracker) readFile(p *jitProc, f *jitFile) {
	if f.dead {
		return
	}
	if f.f == nil && !p.exiting && time.Now().Before(f.retry) {
		return // no map yet; looked for again later, and at exit
	}
	// (Re)open when the file appeared or its path now names another file.
	fi, err := os.Stat(p.rootPath(f.rel))
	if err == nil && fi.Mode().IsRegular() {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && (f.f == nil || st.Ino != f.ino) {
			if !f.dump && !p.start.IsZero() && fi.ModTime().Before(p.start.Add(-2*time.Second)) {
				return // left by an earlier process with the same pid
			}
			nf, _, err := p.open(f)
			if err != nil {
				return
			}
			if f.f != nil {
				f.f.Close()
			}
			f.reread = f.f != nil // a new file at the path: a rewrite
			f.f, f.ino = nf, st.Ino
			f.off, f.pending, f.head, f.hdr = 0, f.pending[:0], nil, nil
		}
	}
	if f.f == nil {
		if j.OnDemand && !f.dump {
			// A whole host has hundreds of processes without perf maps:
			// look for one less and less often (entries read late still
			// name earlier samples; the symbolizer matches them at the end).
			f.backoff = min(max(2*f.backoff, jitPollInterval), jitMaxBackoff)
			f.retry = time.Now().Add(f.backoff)
		}
		return
	}
	st, err := f.f.Stat()
	if err != nil {
		return
	}
	size := st.Size()
	if size > jitMaxFile {
		size = jitMaxFile
	}
	// A file shorter than what was read, or whose first bytes changed, was
	// rewritten (the JVM writes its map anew at exit and on each jcmd
	// Compiler.perfmap): read it again from the start; lines already
	// reported are recognized and not repeated.
	if size < f.off || len(f.head) > 0 && !f.sameHead() {
		f.off, f.pending, f.head, f.hdr = 0, f.pending[:0], nil, nil
		f.reread = true
	}
	for f.off < size {
		n := size - f.off
		if n > jitMaxRead {
			n = jitMaxRead
		}
		if cap(j.buf) < int(n) {
			j.buf = make([]byte, n)
		}
		b := j.buf[:n]
		m, err := f.f.ReadAt(b, f.off)
		if m == 0 {
			if err != nil && err != io.EOF {
				j.warn(fmt.Errorf("pid %d: reading %s: %w", p.pid, f.rel, err))
			}
			break
		}
		if f.off == 0 && len(f.head) == 0 {
			f.head = append([]byte(nil), b[:min(m, 64)]...)
		}
		j.consume(p, f, b[:m])
		if f.dead {
			return
		}
	}
}

func (p *jitProc) rootPath(rel string) string {
	if p.root == "" {
		return rel
	}
	return p.root + rel
}

// sameHead reports whether the file still starts with the bytes first read.
func (f *jitFile) sameHead() bool {
	var b [64]byte
	n, _ := f.f.ReadAt(b[:len(f.head)], 0)
	return bytes.Equal(b[:n], f.head)
}

// consume parses new bytes b of f (read at f.off), after f.pending.
func (j *Tracker) consume(p *jitProc, f *jitFile, b []byte) {
	start := f.off - int64(len(f.pending))
	f.off += int64(len(b))
	data := b
	if len(f.pending) > 0 {
		f.pending = append(f.pending, b...)
		data = f.pending
	}
	var used int
	var err error
	if !f.dump {
		used, err = j.perfMapLines(p, f, start, data)
	} else {
		if f.hdr == nil {
			h, herr := jitfile.ParseJitdumpHeader(f.rel, data)
			if herr != nil {
				if len(data) < 40 {
					f.pending = append(f.pending[:0], data...)
					return
				}
				j.warn(fmt.Errorf("pid %d: %w", p.pid, herr))
				f.dead = true
				return
			}
			if len(data) < int(h.Size) {
				f.pending = append(f.pending[:0], data...)
				return
			}
			f.hdr = &h
			data = data[h.Size:]
			start += int64(h.Size)
		}
		used, err = j.jitdumpRecords(p, f, start, data)
	}
	if err != nil {
		j.warn(fmt.Errorf("pid %d: %w", p.pid, err))
	}
	rest := data[used:]
	if len(rest) > jitfile.MaxRecord+jitfile.MaxPerfMapLine {
		rest = nil // cannot happen: the parsers consume what cannot complete
	}
	f.pending = append(f.pending[:0], rest...)
}

func (j *Tracker) perfMapLines(p *jitProc, f *jitFile, start int64, data []byte) (int, error) {
	now := sys.Monotonic()
	return jitfile.ParsePerfMap(f.rel, start, data, func(e *jitfile.PerfMapEntry) {
		if e.Size == 0 || j.FileBacked != nil && j.FileBacked(p.pid, e.Addr) {
			return
		}
		k := perfKey{e.Addr, e.Size, string(e.Name)}
		if _, dup := p.seen[k]; dup && f.reread {
			return
		}
		if len(p.seen) < jitMaxSeen {
			p.seen[k] = struct{}{}
		}
		jc := &j.jc
		*jc = platform.JITCode{Time: now, Pid: p.pid, Addr: e.Addr, Size: e.Size, Name: k.name, Source: format.JITSourcePerfMap}
		j.h.JITCode(jc)
	})
}

func (j *Tracker) jitdumpRecords(p *jitProc, f *jitFile, start int64, data []byte) (int, error) {
	now := sys.Monotonic()
	return jitfile.ParseJitdump(f.rel, start, data, func(r *jitfile.JitdumpRecord) {
		t := int64(r.Timestamp)
		if f.hdr.Flags&jitfile.FlagArchTimestamp != 0 || t <= 0 || t > now {
			// TSC times cannot be put on the stream clock here, and a time
			// in the future is on another clock than CLOCK_MONOTONIC.
			t = now
		}
		switch r.ID {
		case jitfile.RecDebugInfo:
			p.debugAddr = r.CodeAddr
			p.debugLines = p.debugLines[:0]
			for _, e := range r.Lines {
				off := uint64(0)
				if e.Addr > r.CodeAddr {
					off = e.Addr - r.CodeAddr
				}
				p.debugLines = append(p.debugLines, platform.JITLine{Offset: off, Line: e.Line, Column: e.Discrim, File: string(e.File)})
			}
		case jitfile.RecCodeLoad:
			if r.CodeSize == 0 || j.FileBacked != nil && j.FileBacked(p.pid, r.CodeAddr) {
				p.debugLines = p.debugLines[:0]
				return
			}
			jc := &j.jc
			*jc = platform.JITCode{Time: t, Pid: p.pid, Addr: r.CodeAddr, Size: r.CodeSize, Name: string(r.Name), Source: format.JITSourceJitdump}
			if j.keepCode && r.Code != nil {
				jc.Code = r.Code
			}
			if p.debugAddr == r.CodeAddr && len(p.debugLines) > 0 {
				jc.Lines = p.debugLines
			}
			if len(p.live) < jitMaxSeen {
				p.live[r.CodeAddr] = liveCode{r.CodeSize, jc.Name}
			}
			j.h.JITCode(jc)
			p.debugLines = p.debugLines[:0]
		case jitfile.RecCodeMove:
			old, ok := p.live[r.OldAddr]
			j.h.JITUnload(&format.JITUnload{Time: t, Pid: p.pid, Addr: r.OldAddr, Size: r.CodeSize})
			if !ok {
				return
			}
			delete(p.live, r.OldAddr)
			p.live[r.CodeAddr] = liveCode{r.CodeSize, old.name}
			jc := &j.jc
			*jc = platform.JITCode{Time: t, Pid: p.pid, Addr: r.CodeAddr, Size: r.CodeSize, Name: old.name, Source: format.JITSourceJitdump}
			j.h.JITCode(jc)
		}
		// UNWINDING_INFO: V8 writes .eh_frame rows for its code, but its
		// JIT code keeps frame pointers, which the unwinders follow where
		// no module's CFI covers an address; the rows are not recorded.
	})
}

// innermostNSPid returns pid as the process's own pid namespace numbers
// it (the NSpid line of /proc/PID/status): a runtime in a container names
// its map after that number.
func innermostNSPid(dir string, pid uint32) uint32 {
	if ids := procfs.NSpids(dir); len(ids) > 0 {
		return ids[len(ids)-1]
	}
	return pid
}

// sameNamespace reports whether the process of /proc/PID dir is in this
// process's namespace of kind ns ("mnt", "pid"); false when unsure.
func sameNamespace(dir, ns string) bool {
	self := selfNamespaces()[ns]
	if self == "" {
		return false
	}
	other, err := os.Readlink(dir + "/ns/" + ns)
	return err == nil && other == self
}

// selfNamespaces reads this process's mount and pid namespaces once (a
// sync.Once, not a package-level OnceValue, whose closures are init work
// in every rawstack command: TestStartupInitCost).
func selfNamespaces() map[string]string {
	selfNSOnce.Do(func() {
		selfNS = map[string]string{}
		for _, ns := range []string{"mnt", "pid"} {
			if l, err := os.Readlink("/proc/self/ns/" + ns); err == nil {
				selfNS[ns] = l
			}
		}
	})
	return selfNS
}

var (
	selfNSOnce sync.Once
	selfNS     map[string]string
)

// procStartTime returns when pid started (wall clock, to the clock tick),
// or the zero time.
func procStartTime(pid int) time.Time {
	b, err := procfs.ReadSmall(procfs.Dir(pid)+"/stat", 4096)
	if err != nil {
		return time.Time{}
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return time.Time{}
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return time.Time{}
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64) // field 22, starttime
	if err != nil {
		return time.Time{}
	}
	bt := bootTime()
	if bt.IsZero() {
		return bt
	}
	const userHZ = 100 // sysconf(_SC_CLK_TCK) on Linux
	return bt.Add(time.Duration(ticks) * time.Second / userHZ)
}

// bootTime returns the host's boot time (btime of /proc/stat), read once.
// A sync.Once, not a package-level sync.OnceValue, whose closures would be
// allocated at the start of every program that links this package.
func bootTime() time.Time {
	bootTimeOnce.Do(func() { bootTimeVal = readBootTime() })
	return bootTimeVal
}

var (
	bootTimeOnce sync.Once
	bootTimeVal  time.Time
)

func readBootTime() time.Time {
	st, err := procfs.ReadSmall("/proc/stat", 64<<10)
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			bt, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}
			}
			return time.Unix(bt, 0)
		}
	}
	return time.Time{}
}

// Errors returns the first problems met reading perf maps and jitdump
// files (malformed lines or records, each naming the file, offset and
// pid); reading went on past each.
func (j *Tracker) Errors() []error {
	if j == nil {
		return nil
	}
	return j.errs
}
