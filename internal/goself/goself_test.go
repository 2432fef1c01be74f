package goself

import (
	"context"
	"runtime"
	"runtime/pprof"
	"testing"
)

func TestSelf(t *testing.T) {
	l, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *l)
	if !l.HasStartPC || !l.HasLabels || !l.LabelList || !l.HasParentGoid || !l.HasSched || !l.HasCurg {
		t.Errorf("fields not found: %+v", *l)
	}
	if runtime.GOOS == "linux" && !l.HasProcid {
		t.Errorf("m.procid not found")
	}
	// The calling goroutine reads back as runtime.Stack names it.
	if got, want := l.Goid(G()), stackGoid(); got != want {
		t.Errorf("Goid(G()) = %d, want %d", got, want)
	}
	pprof.Do(context.Background(), pprof.Labels("k", "v"), func(context.Context) {
		if p := Word(G() + l.GLabels); uintptr(p) != uintptr(Labels()) {
			t.Errorf("g.labels = %#x, want %p", p, Labels())
		}
	})
}
