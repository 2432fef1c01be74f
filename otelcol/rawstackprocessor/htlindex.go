package rawstackprocessor

import (
	"io/fs"
	"path/filepath"
	"sync"

	"go.uber.org/zap"

	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

// htlIndex maps process.executable.build_id.htlhash to files of the
// htlhash_dirs. The htlhash is a hash of a file's two ends and length, so
// unlike a GNU build id it cannot name a path in a .build-id tree: the
// only way to find a file by it is to hash the candidates. The index is
// built once, on the first mapping that needs it, and not refreshed (a
// collector restart picks up new files).
type htlIndex struct {
	dirs []string
	max  int
	log  *zap.Logger

	once   sync.Once
	byHash map[string]string
}

func (x *htlIndex) lookup(h string) string {
	if len(x.dirs) == 0 {
		return ""
	}
	x.once.Do(x.build)
	return x.byHash[h]
}

func (x *htlIndex) build() {
	x.byHash = map[string]string{}
	files, skipped := 0, 0
	for _, dir := range x.dirs {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				x.log.Info("rawstack: htlhash index", zap.String("path", p), zap.Error(err))
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if files >= x.max {
				skipped++
				return nil
			}
			h, err := otlp.HTLHashFile(p)
			if err != nil {
				return nil
			}
			files++
			if _, dup := x.byHash[h]; !dup {
				x.byHash[h] = p
			}
			return nil
		})
	}
	x.log.Info("rawstack: htlhash index built", zap.Strings("dirs", x.dirs), zap.Int("files", files), zap.Int("over max_indexed_files", skipped))
}
