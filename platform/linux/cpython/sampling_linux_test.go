//go:build linux

package cpython

import (
	"bufio"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// versions are the interpreters the tests read: pyenv's 3.8 to 3.13 and
// Debian's 3.11 (a static, stripped, non-PIE executable).
var versions = []string{"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "debian3.11"}

// startSpin runs testdata/spin.py with python until the test ends and
// returns it once the program has printed its oracle lines (leaf first,
// "name:line" each) and "ready".
func startSpin(t testing.TB, python string) (*exec.Cmd, [][]string) {
	t.Helper()
	cmd := exec.Command(python, filepath.Join("testdata", "spin.py"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var oracle [][]string
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				done <- nil
				go io.Copy(io.Discard, out)
				return
			}
			if rest, ok := strings.CutPrefix(line, "oracle "); ok {
				oracle = append(oracle, strings.Fields(rest))
			}
		}
		done <- io.ErrUnexpectedEOF
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s spin.py ended before it was ready", python)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s spin.py not ready after 30s", python)
	}
	return cmd, oracle
}

// TestFramesOfSpinningThread reads the main thread of spin.py from
// outside and holds its frames to the program's own view of itself
// (sys._current_frames): the same functions in the same order, leaf
// first, the outermost one an entry frame.
func TestFramesOfSpinningThread(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			cmd, oracle := startSpin(t, testbuild.Python(t, v))
			pid := uint32(cmd.Process.Pid)
			s := NewSampling()
			if !s.AttachMaps(pid) {
				t.Fatalf("no interpreter found in pid %d: %v", pid, s.Errors())
			}
			var want []string
			for _, f := range oracle[len(oracle)-1] {
				want = append(want, f[:strings.LastIndexByte(f, ':')])
			}
			codes := map[uint64]format.PyCode{}
			good, held := 0, 0
			const n = 200
			for i := 0; i < n; i++ {
				frames, fresh := s.Frames(pid, pid, time.Now().UnixNano())
				if s.GIL() == format.PyGILHeld {
					held++
				}
				for _, c := range fresh {
					codes[c.ID] = c
				}
				var got []string
				for _, f := range frames {
					c, ok := codes[f.Code]
					if !ok {
						t.Fatalf("frame refers to code %d, never reported", f.Code)
					}
					got = append(got, c.Name)
				}
				if strings.Join(got, " ") == strings.Join(want, " ") {
					good++
					if !frames[len(frames)-1].Entry {
						t.Errorf("the outermost frame (%s) is not an entry frame", want[len(want)-1])
					}
				} else if i < 3 {
					t.Logf("sample %d: %v, want %v", i, got, want)
				}
				time.Sleep(time.Millisecond)
			}
			st := s.Stats()
			t.Logf("%d/%d reads gave the oracle's chain %v; stats %+v", good, n, want, st)
			if good < n*95/100 {
				t.Errorf("%d/%d reads gave the chain %v", good, n, want)
			}
			// The GIL: the spinning main thread holds it (no other
			// thread asks for it), the sleeping thread never does.
			if held < n*95/100 {
				t.Errorf("the spinning main thread held the GIL in %d/%d reads", held, n)
			}
			sleepers := 0
			tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(int(pid)) + "/task")
			for _, task := range tasks {
				tid, _ := strconv.Atoi(task.Name())
				if uint32(tid) == pid {
					continue
				}
				frames, fresh := s.Frames(pid, uint32(tid), time.Now().UnixNano())
				for _, c := range fresh {
					codes[c.ID] = c
				}
				if len(frames) == 0 || codes[frames[0].Code].Name != "delta_py" {
					continue
				}
				sleepers++
				for i := 0; i < 50; i++ {
					if s.Frames(pid, uint32(tid), time.Now().UnixNano()); s.GIL() != format.PyGILNone {
						t.Fatalf("the sleeping thread %d: GIL %v", tid, s.GIL())
					}
				}
			}
			if sleepers != 1 {
				t.Errorf("%d threads in delta_py, want the sleeper", sleepers)
			}
			src, err := os.ReadFile(filepath.Join("testdata", "spin.py"))
			if err != nil {
				t.Fatal(err)
			}
			def := uint32(strings.Count(string(src[:strings.Index(string(src), "def gamma_py")]), "\n") + 1)
			for _, c := range codes {
				if c.Name == "gamma_py" && (!strings.HasSuffix(c.File, "spin.py") || c.FirstLine != def || len(c.Lines) == 0) {
					t.Errorf("gamma_py's code object: %+v", c)
				}
			}
			// The sleeping thread has its own chain; a thread with no
			// thread state has none.
			if frames, _ := s.Frames(pid, 1, time.Now().UnixNano()); len(frames) != 0 {
				t.Errorf("tid 1 (not a thread of the process) got %d frames", len(frames))
			}
		})
	}
}

// TestFramesAllocationFree: once its code objects are known, a sample's
// read allocates nothing.
func TestFramesAllocationFree(t *testing.T) {
	cmd, _ := startSpin(t, testbuild.Python(t, "3.12"))
	pid := uint32(cmd.Process.Pid)
	s := NewSampling()
	if !s.AttachMaps(pid) {
		t.Fatalf("no interpreter in pid %d: %v", pid, s.Errors())
	}
	for i := 0; i < 10; i++ {
		s.Frames(pid, pid, 1)
	}
	var n int
	allocs := testing.AllocsPerRun(200, func() {
		frames, _ := s.Frames(pid, pid, 1)
		n = len(frames)
	})
	if n < 4 || allocs != 0 {
		t.Fatalf("%d frames, %.1f allocations per read", n, allocs)
	}
}

// BenchmarkFrames measures one sample's read of spin.py's main thread
// (four frames) with process_vm_readv.
func BenchmarkFrames(b *testing.B) {
	cmd, _ := startSpin(b, testbuild.Python(b, "3.12"))
	pid := uint32(cmd.Process.Pid)
	s := NewSampling()
	if !s.AttachMaps(pid) {
		b.Fatalf("no interpreter in pid %d: %v", pid, s.Errors())
	}
	s.Frames(pid, pid, 1)
	b.ReportAllocs()
	b.ResetTimer()
	frames := 0
	for i := 0; i < b.N; i++ {
		f, _ := s.Frames(pid, pid, 1)
		frames += len(f)
	}
	b.ReportMetric(float64(frames)/float64(b.N), "frames/op")
}

// TestFramesOfMovingTarget reads a thread whose stack grows and shrinks
// under the reader, past MaxDepth, while code objects come and go: every
// frame read is one of the program's functions, chains stop at the cap,
// and the reader neither fails nor hangs.
func TestFramesOfMovingTarget(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			python := testbuild.Python(t, v)
			cmd := exec.Command(python, filepath.Join("testdata", "churn.py"))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("churn.py: %q %v", line, err)
			}
			pid := uint32(cmd.Process.Pid)
			s := NewSampling()
			if !s.AttachMaps(pid) {
				t.Fatalf("no interpreter in pid %d: %v", pid, s.Errors())
			}
			names := map[uint64]string{}
			known := map[string]bool{"rec_a": true, "rec_b": true, "<module>": true, "randint": true, "randrange": true, "_randbelow_with_getrandbits": true, "_randbelow": true}
			deepest, reads := 0, 0
			deadline := time.Now().Add(time.Second)
			for ; time.Now().Before(deadline); reads++ {
				frames, fresh := s.Frames(pid, pid, time.Now().UnixNano())
				for _, c := range fresh {
					names[c.ID] = c.Name
				}
				if len(frames) > MaxDepth {
					t.Fatalf("%d frames, past the cap of %d", len(frames), MaxDepth)
				}
				deepest = max(deepest, len(frames))
				for _, f := range frames {
					if n := names[f.Code]; !known[n] && !strings.HasPrefix(n, "fresh_") && !strings.HasPrefix(n, "Random.") {
						t.Fatalf("a frame of code %q, not a function of churn.py", n)
					}
				}
			}
			st := s.Stats()
			t.Logf("%d reads, deepest chain %d, stats %+v", reads, deepest, st)
			if st.Stacks == 0 || st.Cut[CutDepth] == 0 {
				t.Errorf("no chain read, or none cut at the depth cap: %+v", st)
			}
		})
	}
}

// TestWalkMatchesFrames reads spin.py's main thread as the eBPF back end's
// program does, from the Walk the reader hands out when it attaches the
// process (the interpreters' thread lists for the thread state whose id
// is the thread's, the GIL, then frame by frame: code, instruction, owner
// or is_entry, previous), and holds what FramesRaw makes of it to what
// Frames reads itself; FramesRaw allocates nothing once the code objects
// are known.
func TestWalkMatchesFrames(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			cmd, _ := startSpin(t, testbuild.Python(t, v))
			pid := uint32(cmd.Process.Pid)
			s := NewSampling()
			var walk *Walk
			s.SetOnProcess(func(p uint32, w Walk) {
				if p == pid {
					walk = &w
				}
			})
			if !s.AttachMaps(pid) || walk == nil {
				t.Fatalf("no interpreter found in pid %d (walk %v): %v", pid, walk, s.Errors())
			}
			codes := map[uint64]string{}
			names := func(frames []format.PyFrame, fresh []format.PyCode) string {
				for _, c := range fresh {
					codes[c.ID] = c.Name
				}
				var out []string
				for _, f := range frames {
					e := ""
					if f.Entry {
						e = "!"
					}
					out = append(out, codes[f.Code]+e)
				}
				return strings.Join(out, " ")
			}
			want := names(s.Frames(pid, pid, 1))
			if want == "" {
				t.Fatal("Frames read no frames")
			}
			mem := func(addr uint64, n int) []byte {
				b := make([]byte, n)
				if !s.read(pid, addr, b) {
					t.Fatalf("read %#x", addr)
				}
				return b
			}
			le := func(b []byte, off uint32) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
			w := walk
			tidOf := func(ts uint64) uint64 {
				tid := le(mem(ts+uint64(w.TSTid), 8), 0)
				if w.Legacy {
					tid = uint64(binary.LittleEndian.Uint32(mem(tid+uint64(w.PthreadTid), 4)))
				}
				return tid
			}
			raw := func() ([]uint64, bool) {
				var ts, gil uint64
				for interp := le(mem(w.Runtime+uint64(w.InterpretersHead), 8), 0); interp != 0 && ts == 0; interp = le(mem(interp, 8), 0) {
					for t := le(mem(interp+uint64(w.ThreadsHead), 8), 0); t != 0; t = le(mem(t+uint64(w.TSNext), 8), 0) {
						if tidOf(t) == uint64(pid) {
							ts = t
							if w.RTGIL != NoOffset {
								gil = w.Runtime + uint64(w.RTGIL)
							} else {
								gil = le(mem(interp+uint64(w.InterpGIL), 8), 0)
							}
							break
						}
					}
				}
				if ts == 0 {
					t.Fatal("no thread state names the main thread")
				}
				frame := le(mem(ts+uint64(w.TSFrame), 8), 0)
				if w.CFrameFrame != NoOffset {
					frame = le(mem(frame+uint64(w.CFrameFrame), 8), 0)
				}
				var out []uint64
				for i := 0; i < 64 && frame != 0; i++ {
					// As the BPF program: 128 bytes, offsets masked.
					fb := append(mem(frame, int(w.FrSize)), make([]byte, 136)...)
					flags := uint64(fb[w.FrOwner&127]) | uint64(fb[w.FrIsEntry&127])<<8
					out = append(out, le(fb, w.FrCode&120), le(fb, w.FrInstr&124), flags)
					frame = le(fb, w.FrPrevious&120)
				}
				held := le(mem(gil+uint64(w.GILHolder), 8), 0) == ts && binary.LittleEndian.Uint32(mem(gil+uint64(w.GILLocked), 4)) == 1
				return out, held
			}
			// The thread that printed "ready" hands the GIL back as it
			// ends; the main thread takes it once it is scheduled.
			time.Sleep(100 * time.Millisecond)
			good := 0
			for i := 0; i < 20; i++ {
				time.Sleep(time.Millisecond)
				r, held := raw()
				got := names(s.FramesRaw(pid, r, false, held))
				if got == want && s.GIL() == format.PyGILHeld {
					good++
				} else {
					t.Logf("raw read %d: %q (GIL %v), Frames %q", i, got, s.GIL(), want)
				}
			}
			if good < 18 {
				t.Errorf("%d/20 raw reads gave Frames' %q holding the GIL", good, want)
			}
			r, held := raw()
			if n := testing.AllocsPerRun(100, func() { s.FramesRaw(pid, r, false, held) }); n != 0 {
				t.Errorf("FramesRaw allocates %.1f times a call", n)
			}
			// A whole host's last samples of a process are often drained
			// after it exited (issue 33: the agent lost the Python chain
			// of a process's last 0.2–0.5 s): frames read at the sample
			// are named from the code objects read before.
			cmd.Process.Kill()
			cmd.Wait()
			if got := names(s.FramesRaw(pid, r, false, held)); got != want {
				t.Errorf("after the process exited, raw frames give %q, want %q", got, want)
			}
			if s.Stats().Remembered == 0 {
				t.Errorf("no frame counted as named from a code object read before")
			}
		})
	}
}
