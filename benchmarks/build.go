package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildC compiles benchmarks/testdata/NAME.c (or .cc, or a repository-relative
// path) with the given flags into the
// scratch directory and returns the binary's path.
func buildC(cfg *config, src string, flags ...string) (string, error) {
	out := filepath.Join(cfg.work, strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)))
	cc := "gcc"
	if strings.HasSuffix(src, ".cc") || strings.HasSuffix(src, ".cpp") {
		cc = "g++"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("%s not installed: %w", cc, err)
	}
	// A bare name is a file of benchmarks/testdata; a path is relative to
	// the repository root (a fixture shared with a package's tests).
	in := filepath.Join("benchmarks", "testdata", src)
	if strings.Contains(src, "/") {
		in = src
	}
	if _, err := os.Stat(in); err != nil {
		// run from inside benchmarks/
		in = filepath.Join("..", in)
	}
	args := append(append([]string{}, flags...), "-o", out, in)
	cmd := exec.Command(cc, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	return out, nil
}

// buildCLI builds cmd/rawstack into the scratch directory, once per run,
// and returns the binary's path. Every scenario measures the same binary.
func buildCLI(cfg *config) (string, error) {
	if cfg.cli != "" {
		return cfg.cli, nil
	}
	bin := filepath.Join(cfg.work, "rawstack")
	// The README's build command: static (CGO_ENABLED=0), no dynamic
	// loader at every start.
	cmd := exec.Command("go", "build", "-o", bin, "github.com/rawstack/rawstack/cmd/rawstack")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build rawstack: %v\n%s", err, b)
	}
	cfg.cli = bin
	return bin, nil
}

// buildCompanions builds the companion commands names (cmd/NAME) next to
// the CLI, where rawstack looks for them, and returns the CLI's path.
func buildCompanions(cfg *config, names ...string) (string, error) {
	rawstack, err := buildCLI(cfg)
	if err != nil {
		return "", err
	}
	for _, c := range names {
		b := exec.Command("go", "build", "-o", filepath.Join(filepath.Dir(rawstack), c), "github.com/rawstack/rawstack/cmd/"+c)
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %v\n%s", c, err, out)
		}
	}
	return rawstack, nil
}
