package snapshot

import (
	"fmt"

	"github.com/rawstack/rawstack/arch"
)

const pageSize = 4096

// pageCache is an arch.Memory that reads whole pages through fill and
// keeps them. fill reads up to len(buf) bytes at the page-aligned addr,
// possibly several pages ahead, and returns how many bytes (a multiple of
// pageSize unless the source ends mid-page) it got.
type pageCache struct {
	fill  func(addr uint64, buf []byte) int
	ahead int // pages fill is asked for at once
	pages map[uint64][]byte
	// Reads counts fill calls.
	reads int
}

func newPageCache(ahead int, fill func(addr uint64, buf []byte) int) *pageCache {
	if ahead < 1 {
		ahead = 1
	}
	return &pageCache{fill: fill, ahead: ahead, pages: map[uint64][]byte{}}
}

func (c *pageCache) page(pg uint64) []byte {
	if b, ok := c.pages[pg]; ok {
		return b
	}
	buf := make([]byte, c.ahead*pageSize)
	n := c.fill(pg, buf)
	c.reads++
	if n <= 0 {
		c.pages[pg] = nil
		return nil
	}
	for off := 0; off < n; off += pageSize {
		end := off + pageSize
		if end > n {
			end = n
		}
		if _, ok := c.pages[pg+uint64(off)]; !ok {
			c.pages[pg+uint64(off)] = buf[off:end:end]
		}
	}
	return c.pages[pg]
}

// ReadMemory implements arch.Memory.
func (c *pageCache) ReadMemory(addr uint64, p []byte) error {
	for len(p) > 0 {
		pg := addr &^ (pageSize - 1)
		b := c.page(pg)
		in := addr - pg
		if in >= uint64(len(b)) {
			return fmt.Errorf("%w: %#x", arch.ErrBadAddress, addr)
		}
		n := copy(p, b[in:])
		p = p[n:]
		addr += uint64(n)
	}
	return nil
}
