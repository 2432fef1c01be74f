package symsrv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rawstack/rawstack/symbolizer/pe"
)

// ErrImageNotFound says no image with the wanted code id was found.
var ErrImageNotFound = errors.New("symsrv: no matching image found")

// LocateImage finds a PE image by its file name and code id
// (TimeDateStamp as eight upper-case hex digits, then SizeOfImage in
// lower-case hex, see pe.File.CodeID) the way debuggers fetch binaries
// for a minidump: in the debug directories, flat and as symbol stores
// (NAME/CODEID/NAME, compressed NAME with its last character '_', or a
// file.ptr), and along the symbol path, downloading from symbol servers
// (GET server/NAME/CODEID/NAME) into the cache. Every candidate's code id
// is checked; the local path of the first match is returned. The code id
// is all a store knows of an image: two links of different code that
// share TimeDateStamp and SizeOfImage are the same build to LocateImage
// (and to every symbol server), so a build that must be told apart needs
// its own timestamp (link /timestamp:N, or /Brepro, which stamps a hash
// of the output).
func LocateImage(ctx context.Context, name, codeID string, o *Options) (string, error) {
	if o == nil {
		o = &Options{}
	}
	k := Key{Name: name, ID: codeID}
	var tried []string
	try := func(p string) bool {
		tried = append(tried, p)
		ok := imageMatches(p, codeID)
		o.logf("symsrv: %s: match=%v", p, ok)
		return ok
	}
	for _, d := range o.DebugDirs {
		if p := filepath.Join(d, name); try(p) {
			return p, nil
		}
		if p, ok := findInStore(d, k, try); ok {
			return p, nil
		}
	}
	cache := o.CacheDir
	if cache == "" {
		if uc, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(uc, "rawstack", "symbols")
		} else {
			cache = filepath.Join(os.TempDir(), "rawstack-symbols")
		}
	}
	for _, el := range parseSymbolPath(o.SymbolPath, cache) {
		if el.flat {
			if p := filepath.Join(el.stores[len(el.stores)-1], name); try(p) {
				return p, nil
			}
		}
		for i, s := range el.stores {
			var p string
			var ok bool
			if isURL(s) {
				var err error
				if p, ok, err = download(ctx, o, s, k, el.stores[:i], try); err != nil {
					o.logf("symsrv: %s: %v", s, err)
					continue
				}
			} else if p, ok = findInStore(s, k, try); ok && i > 0 {
				p = copyToCaches(p, k, el.stores[:i], o)
			}
			if ok {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w: %s %s; searched %d places", ErrImageNotFound, name, codeID, len(tried))
}

// imageMatches says whether p is a PE image with the code id.
func imageMatches(p, codeID string) bool {
	if !fileExists(p) {
		return false
	}
	f, err := pe.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	return strings.EqualFold(f.CodeID(), codeID)
}
