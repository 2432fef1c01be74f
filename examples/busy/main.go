// Command busy is a CPU-bound program to record: it renders a small
// fractal for about two seconds, spending most of its time in
// main → render → pixel → iterate, with a little in checksum.
//
//	go build -o busy ./examples/busy && rawstack record -o trace.rawstack -- ./busy
package main

import (
	"flag"
	"fmt"
	"time"
)

func main() {
	d := flag.Duration("d", 2*time.Second, "how long to run")
	flag.Parse()
	img := make([]uint8, 256*256)
	var sum uint64
	frames := 0
	for start := time.Now(); time.Since(start) < *d; frames++ {
		render(img, float64(frames)*0.01)
		sum += checksum(img)
	}
	fmt.Printf("%d frames, checksum %x\n", frames, sum)
}

//go:noinline
func render(img []uint8, t float64) {
	for y := 0; y < 256; y++ {
		for x := 0; x < 256; x++ {
			img[y*256+x] = pixel(x, y, t)
		}
	}
}

//go:noinline
func pixel(x, y int, t float64) uint8 {
	cr := -2.0 + 2.5*float64(x)/256 + 0.01*t
	ci := -1.25 + 2.5*float64(y)/256
	return uint8(iterate(cr, ci))
}

//go:noinline
func iterate(cr, ci float64) int {
	zr, zi := 0.0, 0.0
	for i := 0; i < 200; i++ {
		zr, zi = zr*zr-zi*zi+cr, 2*zr*zi+ci
		if zr*zr+zi*zi > 4 {
			return i
		}
	}
	return 255
}

//go:noinline
func checksum(img []uint8) uint64 {
	var h uint64 = 14695981039346656037
	for _, b := range img {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}
