// Package companion finds rawstack's companion commands: subcommands built
// as binaries of their own because they link packages whose
// initialisation would slow the start of every rawstack command (delve
// for snapshot --goroutines, pprof's web UI for view, cilium/ebpf for
// record --backend ebpf, the Collector's pdata and grpc for OTLP). They
// are looked for next to the running executable, then on PATH.
package companion

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Find returns the path of the companion command name; what says what
// needs it, for the error when it is missing.
func Find(name, what string) (string, error) {
	if self, err := os.Executable(); err == nil {
		// LookPath of a path checks that one file, adding PATHEXT's
		// extensions (.exe) on Windows.
		if p, err := exec.LookPath(filepath.Join(filepath.Dir(self), name)); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s needs the %s command next to rawstack or on PATH "+
			"(go build -o . ./cmd/... builds it beside rawstack; or go install github.com/rawstack/rawstack/cmd/%s@latest)", what, name, name)
	}
	return p, nil
}
