package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFileLimit: a file over MaxFileBytes is refused with
// ErrFileTooLarge, naming the file and the limit; one of exactly
// MaxFileBytes loads. A sparse file of a terabyte is refused by its size,
// unread, and an endless device after MaxFileBytes+1 bytes.
func TestReadFileLimit(t *testing.T) {
	dir := t.TempDir()
	const rules = "rules:\n  - {name: r, key: ip, limit: 5, period: 1m}\n"
	sized := func(name string, size int64) string {
		t.Helper()
		path := filepath.Join(dir, name)
		pad := strings.Repeat("#", int(size)-len(rules)-1) + "\n" // a YAML comment
		if err := os.WriteFile(path, []byte(rules+pad), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	sparse := filepath.Join(dir, "sparse.yaml")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()

	at := sized("at.yaml", MaxFileBytes)
	if file, err := Load(at); err != nil || len(file.Rules) != 1 {
		t.Errorf("Load of a file of exactly MaxFileBytes: %v, %v; want its one rule", file, err)
	}
	for _, tt := range []struct {
		name, path, want string
	}{
		{"one byte over", sized("over.yaml", MaxFileBytes+1), "4194305 bytes, over the limit of 4194304 bytes (4 MiB)"},
		{"sparse terabyte", sparse, "1099511627776 bytes, over the limit of 4194304 bytes (4 MiB)"},
		{"endless device", "/dev/zero", "more than 4194304 bytes, over the limit of 4194304 bytes (4 MiB)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file, err := Load(tt.path)
			if !errors.Is(err, ErrFileTooLarge) || file != nil || !strings.HasPrefix(err.Error(), tt.path+": file too large: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load(%s): %v, %v; want ErrFileTooLarge naming the file and saying %q", tt.path, file, err, tt.want)
			}
		})
	}
}
