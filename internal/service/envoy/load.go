package envoy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/config"
)

// LoadOption configures LoadConfig and Merge.
type LoadOption func(*loadSettings)

type loadSettings struct{ merge bool }

// MergeDomains makes files that define the same domain add up, as
// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true does: the second file's
// top-level descriptors join the first's, and a descriptor both define is
// an error. Without it a domain defined twice is an error.
func MergeDomains() LoadOption { return func(s *loadSettings) { s.merge = true } }

// LoadConfig reads an envoyproxy/ratelimit configuration: one YAML file,
// or a directory of them, as envoyproxy/ratelimit reads
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (point path at
// that directory). Of a directory it reads every file ConfigFiles lists
// and merges their domains; an error in any file fails the whole load,
// with every file's errors, so that a reload never applies half a
// directory. A directory with no files is a Config with no domains,
// under which every request is OK, as in envoyproxy/ratelimit. A file
// over config.MaxFileBytes is refused (config.ErrFileTooLarge) unread.
func LoadConfig(path string, opts ...LoadOption) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		if files, err = ConfigFiles(path); err != nil {
			return nil, err
		}
	}
	var cfgs []*Config
	var errs []error
	for _, f := range files {
		data, err := config.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("envoy: %w", err))
			continue
		}
		c, err := ParseConfig(f, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cfgs = append(cfgs, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return Merge(cfgs, opts...)
}

// ConfigFiles lists the files LoadConfig reads of the directory dir: every
// regular file in it and in its subdirectories, or symbolic link to one,
// in lexical order, whatever its extension (as envoyproxy/ratelimit reads
// them), except those whose name, or a directory's on the way, starts
// with '.'. Those are skipped as RUNTIME_IGNOREDOTFILES=true skips them:
// a Kubernetes ConfigMap mounts its files both as links and in a
// "..<timestamp>" directory, which would otherwise define each domain
// twice; editors leave dotted swap files. Links to directories are not
// followed, except dir itself.
func ConfigFiles(dir string) ([]string, error) {
	var files []string
	// With a trailing separator the root is followed when it is itself a
	// link (/etc/ratelimit -> /srv/runtime_data/current/ratelimit/config),
	// as WalkDir would not; the files are still named under dir.
	root := dir + string(filepath.Separator)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("envoy: %w", err)
		}
		if path != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.Type().IsRegular():
			files = append(files, path)
		case d.Type()&fs.ModeSymlink != 0:
			if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
				files = append(files, path)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	return files, nil
}

// Merge combines configs into one. A domain defined by two of them is an
// error naming both files, unless MergeDomains is given.
func Merge(cfgs []*Config, opts ...LoadOption) (*Config, error) {
	var set loadSettings
	for _, o := range opts {
		o(&set)
	}
	out := &Config{Domains: map[string]*Domain{}}
	var errs []error
	for _, c := range cfgs {
		out.Files = append(out.Files, c.Files...)
		for _, name := range sortedDomains(c) {
			d := c.Domains[name]
			prev := out.Domains[name]
			switch {
			case prev == nil:
				out.Domains[name] = d
			case !set.merge:
				errs = append(errs, fmt.Errorf("%s: duplicate domain %q, also defined in %s", d.file(), name, prev.file()))
			default:
				merged, err := prev.merge(d)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				out.Domains[name] = merged
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func sortedDomains(c *Config) []string {
	names := make([]string, 0, len(c.Domains))
	for name := range c.Domains {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// file names the file a domain was read from, for errors.
func (d *Domain) file() string {
	if d.path != "" {
		return d.path
	}
	return "(config)"
}

// merge returns a domain with d's descriptors and then o's, leaving both
// as they are; a top-level descriptor both have is an error.
func (d *Domain) merge(o *Domain) (*Domain, error) {
	m := &Domain{Name: d.Name, path: d.path, replaces: d.replaces || o.replaces, index: &node{}}
	var errs []error
	for _, src := range []*Domain{d, o} {
		for _, desc := range src.Descriptors {
			if !m.index.add(desc, desc.n) {
				errs = append(errs, fmt.Errorf("%s:%d: duplicate descriptor %q in domain %q, merged from several files", desc.File, desc.Line, desc.Key+"_"+desc.Value, d.Name))
				continue
			}
			m.Descriptors = append(m.Descriptors, desc)
		}
	}
	return m, errors.Join(errs...)
}

// topLevel matches a line that starts an envoyproxy/ratelimit file's
// top-level field.
var topLevel = regexp.MustCompile(`(?m)^(domain|descriptors)\s*:`)

// IsConfig reports whether the file at path is an envoyproxy/ratelimit
// configuration rather than a sluice policy file: a directory (of such
// files), or a file whose top level has a domain or descriptors field. A
// file that is not valid YAML is judged by its lines, so that its error
// is reported by the parser it was written for.
func IsConfig(path string) bool {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return true
	}
	data, err := config.ReadFile(path)
	if err != nil {
		return false
	}
	var top map[string]any
	if yaml.Unmarshal(data, &top) != nil {
		return topLevel.Match(data)
	}
	_, domain := top["domain"]
	_, descriptors := top["descriptors"]
	return domain || descriptors
}
