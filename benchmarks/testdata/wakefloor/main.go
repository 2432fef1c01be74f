// Command wakefloor does nothing but wake once a second, until a signal
// ends it: the floor of the agent scenario's CPU figures
// (benchmarks/agent_linux.go). Every daemon written in Go pays at least
// this for each wakeup a second, and the agent is two such processes.
package main

import "time"

func main() {
	for range time.Tick(time.Second) {
	}
}
