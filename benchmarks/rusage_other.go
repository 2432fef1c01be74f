//go:build !linux

package main

// rssWatch is a no-op off Linux.
type rssWatch struct{}

func watchRSS(pid int, notExe string) *rssWatch { return &rssWatch{} }
func (w *rssWatch) finishing()                  {}
func (w *rssWatch) peakKiB() int64              { return 0 }
