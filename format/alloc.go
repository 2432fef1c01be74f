package format

// Alloc says that the allocations a sampler picked at stack Stack of
// process Pid stand for Bytes bytes in Objects allocations (SPEC.md
// §6.22). Bytes and Objects are already unbiased: a reader sums them.
//
// A sampler that sees individual allocations (uprobes on malloc) sets
// Addr to the sampled block's address, and a later [Free] with that
// address releases it. A sampler that only sees per-stack totals (the Go
// runtime's heap profile) writes Addr 0 and reports releases as
// aggregate Frees of the same stack.
type Alloc struct {
	Time    int64
	Pid     uint32
	Tid     uint32 // 0: unknown
	Stack   uint64 // interned Stack id; 0 = no stack
	Addr    uint64 // address of the sampled block; 0: not tracked by address
	Bytes   uint64 // bytes this sample stands for
	Objects uint64 // allocations this sample stands for
}

// Free says that allocations recorded by Alloc events were released
// (SPEC.md §6.23). With Addr set it releases the live Alloc of Pid with
// that address, whatever Stack, Bytes and Objects say (a writer leaves
// them 0); a Free whose address matches no live Alloc is a free of an
// unsampled block and changes nothing. With Addr 0 it releases Bytes
// bytes in Objects allocations made at Stack.
type Free struct {
	Time    int64
	Pid     uint32
	Tid     uint32
	Addr    uint64
	Stack   uint64
	Bytes   uint64
	Objects uint64
}

// WriteAlloc appends an Alloc event.
func (w *Writer) WriteAlloc(e Alloc) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindAlloc)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(uint64(e.Tid))
	w.uv(e.Stack)
	w.uv(e.Addr)
	w.uv(e.Bytes)
	w.uv(e.Objects)
	return w.end(lp)
}

// WriteFree appends a Free event.
func (w *Writer) WriteFree(e Free) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindFree)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(uint64(e.Tid))
	w.uv(e.Addr)
	w.uv(e.Stack)
	w.uv(e.Bytes)
	w.uv(e.Objects)
	return w.end(lp)
}

func (r *Reader) decodeAlloc(d *decoder, a *Alloc) {
	a.Time = r.time(d)
	a.Pid = d.u32()
	a.Tid = d.u32()
	a.Stack = d.uv()
	a.Addr = d.uv()
	a.Bytes = d.uv()
	a.Objects = d.uv()
}

func (r *Reader) decodeFree(d *decoder, f *Free) {
	f.Time = r.time(d)
	f.Pid = d.u32()
	f.Tid = d.u32()
	f.Addr = d.uv()
	f.Stack = d.uv()
	f.Bytes = d.uv()
	f.Objects = d.uv()
}
