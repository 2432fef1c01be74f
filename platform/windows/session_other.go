//go:build !windows || !amd64

package windows

import (
	"context"
	"os/exec"
	"runtime"

	"github.com/rawstack/rawstack/platform"
)

// Session samples one process. It is only implemented on windows/amd64.
type Session struct{}

func errNS() error {
	return &platform.NotSupportedError{Feature: "Windows thread sampling", Reason: "the Windows back end runs on windows/amd64, not " + runtime.GOOS + "/" + runtime.GOARCH}
}

// Open returns an error wrapping platform.ErrNotSupported.
func Open(cfg platform.Config, h platform.Handler) (*Session, error) { return nil, errNS() }

// Launch returns an error wrapping platform.ErrNotSupported.
func Launch(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (*Session, error) {
	return nil, errNS()
}

func (s *Session) Pid() int                      { return 0 }
func (s *Session) Event() string                 { return "" }
func (s *Session) ExitErr() error                { return nil }
func (s *Session) Stats() platform.Stats         { return platform.Stats{} }
func (s *Session) Run(ctx context.Context) error { return errNS() }
func (s *Session) Close() error                  { return nil }
