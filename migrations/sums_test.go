package migrations

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// TestLandedMigrationsAreUnchanged fails when a migration listed in SUMS was edited or removed, and
// when a migration is not listed (run `make sums` after adding one). No database needed.
func TestLandedMigrationsAreUnchanged(t *testing.T) {
	f, err := os.Open("SUMS")
	if err != nil {
		t.Fatalf("reading SUMS: %v (run make sums)", err)
	}
	defer f.Close()
	listed := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, path, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("malformed SUMS line %q", sc.Text())
		}
		listed[strings.TrimPrefix(path, "./")] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err = fs.WalkDir(FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(FS, path)
		if err != nil {
			return err
		}
		seen[path] = true
		h := sha256.Sum256(b)
		want, ok := listed[path]
		switch {
		case !ok:
			t.Errorf("%s is not in migrations/SUMS: run make sums after adding a migration", path)
		case want != hex.EncodeToString(h[:]):
			t.Errorf("%s changed after it landed: never edit a landed migration, add a new one", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path := range listed {
		if !seen[path] {
			t.Errorf("%s is listed in SUMS but gone: landed migrations are never removed", path)
		}
	}
}
