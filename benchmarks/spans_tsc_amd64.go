package main

const haveTSC = true

func tscLoop(n int)
func tscpLoop(n int)
func lfenceTscLoop(n int)
func tscCall() int64
func emptyCall() int64
