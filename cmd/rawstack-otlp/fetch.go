package main

// rawstack-otlp symbolizes with debuginfod and symbol servers itself: it
// links net/http for gRPC anyway, so it downloads in process.
import _ "github.com/rawstack/rawstack/symbolizer/fetch/httpfetch"
