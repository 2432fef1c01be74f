package main

import (
	"io"
	"path/filepath"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/chrome"
	"github.com/rawstack/rawstack/symbolizer/export/firefox"
	"github.com/rawstack/rawstack/symbolizer/export/perfetto"
	"github.com/rawstack/rawstack/symbolizer/export/speedscope"
)

// timelineWriter returns convert's time-resolved output named to (each
// needs the profile built with its timeline), nil if there is none. A
// switch, not a map: a map literal is built at every start-up.
func timelineWriter(to string) func(w io.Writer, p *symbolizer.Profile, trace string) error {
	switch to {
	case "perfetto":
		return func(w io.Writer, p *symbolizer.Profile, _ string) error { return perfetto.Write(w, p) }
	case "chrome":
		return func(w io.Writer, p *symbolizer.Profile, _ string) error { return chrome.Write(w, p) }
	case "firefox":
		return func(w io.Writer, p *symbolizer.Profile, _ string) error { return firefox.Write(w, p) }
	case "speedscope":
		return func(w io.Writer, p *symbolizer.Profile, trace string) error {
			return speedscope.Write(w, p, filepath.Base(trace))
		}
	}
	return nil
}
