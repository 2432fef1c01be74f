package snapshot

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/arch/winunwind"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform/windows"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// Minidump opens the minidump at path and unwinds its threads.
func MinidumpFile(path string, opts *Options) (*Snapshot, error) {
	d, err := OpenMinidump(path)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Snapshot(opts)
}

// Snapshot unwinds every thread of an x64 minidump from its CONTEXT over
// the dumped stack memory, with each image's x64 unwind data (.pdata):
// from the image's memory when the dump holds it, else from the image
// file (found at the path the dump names, with opts.Root and opts.Exe as
// for cores), and through frame pointers where neither is there.
//
// opts.Root maps Windows paths: "C:\dir\x.dll" is looked for at
// ROOT/c:/dir/x.dll and ROOT/dir/x.dll, so a Wine prefix's dosdevices
// directory works as ROOT. Paths on Wine's Z: drive map to Unix paths.
func (d *Minidump) Snapshot(opts *Options) (*Snapshot, error) {
	if d.Arch != mdArchAMD64 {
		return nil, &MinidumpError{File: d.Name, Msg: "unwinding needs an x64 dump; this one's processor architecture is " + archName(d.Arch)}
	}
	s := &Snapshot{Pid: d.Pid, Arch: arch.AMD64, OS: format.OSWindows}
	u := &winunwind.Unwinder{}
	for _, dm := range d.Modules {
		m := Module{Start: dm.Base, End: dm.Base + uint64(dm.Size), Path: dm.Name, Kind: format.ModulePE,
			TimeDateStamp: dm.TimeDateStamp, SizeOfImage: dm.Size}
		if dm.HasCodeView {
			m.PDBGUID, m.PDBAge, m.PDBPath = dm.PDBGUID, dm.PDBAge, dm.PDBPath
		}
		if s.Name == "" && strings.HasSuffix(strings.ToLower(dm.Name), ".exe") {
			s.Name = baseName(dm.Name)
		}
		img := &dumpImage{d: d, base: dm.Base, size: uint64(dm.Size)}
		if file := resolvePE(dm.Name, opts); file != "" {
			if f, err := openPEInMemory(file); err == nil && f.TimeDateStamp == dm.TimeDateStamp {
				img.file = f
				m.File = file
				m.Bias, m.HaveBias = dm.Base-f.ImageBase, true
			}
		}
		if fns := img.functions(); fns != nil {
			u.Add(&winunwind.Module{Base: dm.Base, Size: uint64(dm.Size), Functions: fns, Image: img})
			m.HasCFI = true
		}
		s.Modules = append(s.Modules, m)
	}
	sort.Slice(s.Modules, func(i, j int) bool { return s.Modules[i].Start < s.Modules[j].Start })
	for _, dt := range d.Threads {
		t := Thread{Tid: int(dt.Tid), Name: dt.Name}
		var c winunwind.Context
		ctx := dt.Context
		if d.Exception != nil && d.Exception.Tid == dt.Tid && len(d.Exception.Context) >= winunwind.ContextSize {
			ctx = d.Exception.Context // the faulting frame, not the handler's
		}
		if len(ctx) == 0 {
			t.Err = &MinidumpError{File: d.Name, Msg: "thread " + itoa(int(dt.Tid)) + ": the dump holds no CONTEXT for it (dbghelp leaves out the thread that writes the dump)"}
			s.Threads = append(s.Threads, t)
			continue
		}
		if err := winunwind.DecodeContext(ctx, &c); err != nil {
			t.Err = &MinidumpError{File: d.Name, Msg: "thread " + itoa(int(dt.Tid)) + ": " + err.Error()}
			s.Threads = append(s.Threads, t)
			continue
		}
		t.Regs = c.Regs
		t.PCs, t.Stop = u.Walk(&c, d, nil, opts.maxFrames())
		s.Threads = append(s.Threads, t)
	}
	return s, nil
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func archName(a uint16) string {
	switch a {
	case mdArchAMD64:
		return "x64"
	case mdArchARM64:
		return "arm64"
	case 0:
		return "x86"
	}
	return "#" + itoa(int(a))
}

func baseName(winPath string) string {
	return winPath[strings.LastIndexAny(winPath, `\/`)+1:]
}

// resolvePE finds the file of an image a dump names.
func resolvePE(name string, opts *Options) string {
	var cands []string
	if opts != nil && opts.Exe != "" && strings.EqualFold(baseName(name), filepath.Base(opts.Exe)) {
		cands = append(cands, opts.Exe)
	}
	p := strings.TrimPrefix(name, `\\?\`)
	cands = append(cands, p)
	if len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') {
		rest := strings.ReplaceAll(p[3:], `\`, "/")
		drive := strings.ToLower(p[:1])
		if opts != nil && opts.Root != "" {
			cands = append(cands, filepath.Join(opts.Root, drive+":", rest), filepath.Join(opts.Root, rest))
		}
		if drive == "z" {
			cands = append(cands, "/"+rest)
		}
	}
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
			return c
		}
	}
	return ""
}

// maxImageFile caps the image files read whole.
const maxImageFile = 512 << 20

// openPEInMemory reads an image file whole: an unwind reads unwind info
// and code bytes many times in small pieces, and each read of a file
// costs a system call (under Wine, a wineserver round trip).
func openPEInMemory(path string) (*pe.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxImageFile {
		return pe.Open(path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return pe.NewFile(bytes.NewReader(b), path, int64(len(b)))
}

// dumpImage reads an image by RVA from the dump's memory, else from its
// file.
type dumpImage struct {
	d    *Minidump
	base uint64
	size uint64
	file *pe.File
}

func (m *dumpImage) ReadRVA(rva uint32, p []byte) error {
	err := m.d.ReadMemory(m.base+uint64(rva), p)
	if err != nil && m.file != nil {
		return m.file.ReadRVA(rva, p)
	}
	return err
}

// functions returns the image's x64 function table, or nil.
func (m *dumpImage) functions() []winunwind.RuntimeFunction {
	var b []byte
	if m.file != nil {
		b, _ = m.file.ExceptionData()
	}
	if len(b) == 0 {
		ii, err := windows.ReadImageInfo(m.ReadRVA)
		if err != nil || ii.ExceptionSize < 12 {
			return nil
		}
		b = make([]byte, ii.ExceptionSize/12*12)
		if m.ReadRVA(ii.ExceptionRVA, b) != nil {
			return nil
		}
	}
	fns, err := winunwind.ParseFunctionTable(b[:len(b)/12*12])
	if err != nil {
		return nil
	}
	return fns
}
