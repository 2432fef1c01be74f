package testbuild

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Service is a test program driven through its standard input and
// output, a command a line and an answer a line (a running service to
// attach to, say). It is killed at the end of the test.
type Service struct {
	t   testing.TB
	Cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// StartService starts args (a program, or a prefix such as unshare and
// then the program) and waits for its first line, ready.
func StartService(t testing.TB, ready string, args ...string) *Service {
	t.Helper()
	s := &Service{t: t, Cmd: exec.Command(args[0], args[1:]...)}
	s.Cmd.Stderr = os.Stderr
	var err error
	if s.in, err = s.Cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := s.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.out = bufio.NewReader(stdout)
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Cmd.Process.Kill()
		s.Cmd.Wait()
	})
	if line := s.Line(); line != ready {
		t.Fatalf("%s said %q, want %q", args[0], line, ready)
	}
	return s
}

// Pid returns the program's process: the command's own, or under a
// prefix that forks it (unshare --fork), the command's child.
func (s *Service) Pid() int {
	pid := s.Cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return pid
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		if c, err := strconv.Atoi(f[0]); err == nil {
			return c
		}
	}
	return pid
}

// Line returns the next line the program prints.
func (s *Service) Line() string {
	s.t.Helper()
	done := make(chan struct{})
	var line string
	var err error
	go func() {
		line, err = s.out.ReadString('\n')
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		s.t.Fatalf("%s printed nothing in 2 minutes", s.Cmd.Path)
	}
	if err != nil {
		s.t.Fatalf("%s: %v (did it die?)", s.Cmd.Path, err)
	}
	return strings.TrimSpace(line)
}

// Do sends a command and returns the answer's line.
func (s *Service) Do(cmd string) string {
	s.t.Helper()
	s.Send(cmd)
	return s.Line()
}

// Send sends a command; Line reads the answer.
func (s *Service) Send(cmd string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, cmd+"\n"); err != nil {
		s.t.Fatalf("%s: %v", cmd, err)
	}
}

// Close ends the program's input and waits for it to exit.
func (s *Service) Close() error {
	s.in.Close()
	return s.Cmd.Wait()
}
