//go:build !amd64

package main

const haveTSC = false

func tscLoop(n int)       {}
func tscpLoop(n int)      {}
func lfenceTscLoop(n int) {}
func tscCall() int64      { return 0 }
func emptyCall() int64    { return 0 }
