//go:build linux && !amd64

package linux

import "github.com/rawstack/rawstack/platform"

// bpfState: the eBPF back end's programs are built for x86-64 only (they
// copy x86-64 user registers).
type bpfState struct{}

func (b *bpfState) close() {}

func errBPFArch() error {
	return &platform.NotSupportedError{Feature: "eBPF back end", Reason: "its BPF programs are built for x86-64 only"}
}

// ProbeBPF returns an error wrapping platform.ErrNotSupported: the eBPF
// back end runs on x86-64 only.
func ProbeBPF() error { return errBPFArch() }

func (s *Session) attachBPF() error { return errBPFArch() }
func (s *Session) readAllBPF()      {}

// BPFRingBytes returns 0: no eBPF back end here.
func (s *Session) BPFRingBytes() uint64 { return 0 }
