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

// timelineWriters are convert's time-resolved outputs; each needs the
// profile built with its timeline.
var timelineWriters = map[string]func(w io.Writer, p *symbolizer.Profile, trace string) error{
	"perfetto": func(w io.Writer, p *symbolizer.Profile, _ string) error { return perfetto.Write(w, p) },
	"chrome":   func(w io.Writer, p *symbolizer.Profile, _ string) error { return chrome.Write(w, p) },
	"firefox":  func(w io.Writer, p *symbolizer.Profile, _ string) error { return firefox.Write(w, p) },
	"speedscope": func(w io.Writer, p *symbolizer.Profile, trace string) error {
		return speedscope.Write(w, p, filepath.Base(trace))
	},
}
