package main

import (
	"errors"
	"io"
	"os/exec"

	"github.com/rawstack/rawstack/cmd/internal/companion"
	"github.com/rawstack/rawstack/cmd/internal/record"
)

// otlpHelper writes OTLP for convert --to otlp (record streams through
// it too, in package cmd/internal/record).
const otlpHelper = record.OTLPHelper

func otlpHelperPath() (string, error) { return companion.Find(otlpHelper, "OTLP") }

// runOTLPConvert is convert --to otlp: rawstack-otlp convert writes the
// request.
func runOTLPConvert(file string, raw bool, out string, sf *symFlags, stdout, stderr io.Writer) error {
	args := []string{"convert", file}
	if raw {
		args = append(args, "--raw")
	}
	if out != "" {
		args = append(args, "-o", out)
	}
	args = append(args, sf.Args()...)
	path, err := otlpHelperPath()
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return errors.New(otlpHelper + " failed (see above)")
	}
	return err
}
