//go:build e2e

package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// readmeSection returns the text of deploy/README.md's "## title"
// section, up to the next "## ".
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("deploy/README.md has no section %q", title)
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}

// shBlock matches a fenced sh block.
var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// shCommands returns the commands of the sh blocks of section, one per
// line (a line ending in \ continues on the next), without comments.
func shCommands(section string) [][]string {
	var cmds [][]string
	for _, m := range shBlock.FindAllStringSubmatch(section, -1) {
		var block []string
		for _, line := range strings.Split(strings.ReplaceAll(m[1], "\\\n", " "), "\n") {
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			if line = strings.TrimSpace(line); line != "" {
				block = append(block, line)
			}
		}
		cmds = append(cmds, block)
	}
	return cmds
}

// indexOf returns the index of the first command of cmds that starts
// with prefix, failing t when there is none.
func indexOf(t *testing.T, where string, cmds []string, prefix string) int {
	t.Helper()
	i := slices.IndexFunc(cmds, func(c string) bool { return strings.HasPrefix(c, prefix) })
	if i < 0 {
		t.Errorf("%s: no command %q in\n%s", where, prefix, strings.Join(cmds, "\n"))
	}
	return i
}

// TestDeployReadme checks deploy/README.md's Kubernetes and Helm guides:
// the Redis Secret is created before the Deployment is applied or
// installed (after its namespace); every helm install and upgrade of the
// guide renders (run as helm template, with the same arguments, from the
// repository's root); and the table of values lists exactly the chart's
// values, with their defaults.
func TestDeployReadme(t *testing.T) {
	const secret = "kubectl -n sluice create secret generic sluice-redis "

	k8s := shCommands(readmeSection(t, "Kubernetes"))
	if len(k8s) == 0 {
		t.Fatal("deploy/README.md's Kubernetes section has no sh block")
	}
	first := k8s[0]
	ns, sec := indexOf(t, "Kubernetes", first, "kubectl apply -f deploy/kubernetes/namespace.yaml"), indexOf(t, "Kubernetes", first, secret)
	apply := slices.Index(first, "kubectl apply -f deploy/kubernetes/")
	if !(ns >= 0 && ns < sec && sec < apply) {
		t.Errorf("Kubernetes: the namespace (command %d), then the Secret (%d), then the manifests (%d): want them in this order, or pods start before the Secret exists", ns, sec, apply)
	}

	helmSection := readmeSection(t, "Helm")
	helmBlocks := shCommands(helmSection)
	if len(helmBlocks) < 2 {
		t.Fatalf("deploy/README.md's Helm section has %d sh blocks, want the install with the Secret first, and with redis.url", len(helmBlocks))
	}
	if sec, inst := indexOf(t, "Helm", helmBlocks[0], secret), indexOf(t, "Helm", helmBlocks[0], "helm install "); !(sec >= 0 && sec < inst) {
		t.Errorf("Helm: the Secret is command %d, helm install %d: want the Secret first", sec, inst)
	}
	checkValuesTable(t, helmSection)

	helm := needHelm(t)
	dir := t.TempDir()
	// The values file the guide writes with printf, and the policy file it
	// upgrades with: made here, in a directory of their own.
	for _, block := range helmBlocks {
		for _, c := range block {
			if strings.HasPrefix(c, "printf ") {
				run(t, time.Minute, "sh", "-c", "cd "+dir+" && "+c)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "my-policy.yaml"), []byte("rules: [{name: api, key: header:X-API-Key, limit: 10, period: 1s}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rendered := 0
	for _, block := range helmBlocks {
		for _, c := range block {
			args := strings.Fields(c)
			if len(args) < 4 || args[0] != "helm" || (args[1] != "install" && args[1] != "upgrade") {
				continue
			}
			tmpl := []string{"template", args[2], filepath.Join("..", args[3])}
			for i := 4; i < len(args); i++ {
				switch a := args[i]; {
				case a == "--create-namespace" || a == "--reuse-values" || a == "--wait":
					// install and upgrade only: nothing to render
				case a == "--values" || a == "-f":
					tmpl = append(tmpl, a, filepath.Join(dir, args[i+1]))
					i++
				case a == "--set-file":
					k, v, _ := strings.Cut(args[i+1], "=")
					tmpl = append(tmpl, a, k+"="+filepath.Join(dir, v))
					i++
				default:
					tmpl = append(tmpl, a)
				}
			}
			file := filepath.Join(dir, fmt.Sprintf("rendered-%d.yaml", rendered))
			out := helmRun(t, helm, tmpl...)
			if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			k := decodeKube(t, file)
			if img := k.sluicePod(t).c.Image; img != "registry.example/sluice:v1" && args[1] == "install" {
				t.Errorf("%s: image %s, want the one the guide pushed, registry.example/sluice:v1", c, img)
			}
			rendered++
		}
	}
	if rendered < 3 {
		t.Errorf("rendered %d helm commands of the guide, want its two installs and its upgrade", rendered)
	}
}

// valueRow matches a row of the table of values: | `key` | default | what |.
var valueRow = regexp.MustCompile("(?m)^\\| `([a-zA-Z.]+)` \\| ([^|]*) \\|")

// checkValuesTable fails t unless the table of section lists every leaf
// value of the chart's values.schema.json, and no other, each with the
// default of values.yaml where that is a scalar or empty.
func checkValuesTable(t *testing.T, section string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	raw, err = os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	leaves := map[string]any{}
	var walk func(prefix string, s map[string]any, v any)
	walk = func(prefix string, s map[string]any, v any) {
		props, ok := s["properties"].(map[string]any)
		if !ok {
			leaves[prefix] = v
			return
		}
		vm, _ := v.(map[string]any)
		for name, sub := range props {
			if prefix == "" && name == "global" {
				continue // Helm's, for subcharts
			}
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			if _, ok := vm[name]; !ok {
				t.Errorf("values.schema.json has %s, which values.yaml gives no default", key)
			}
			walk(key, sub.(map[string]any), vm[name])
		}
	}
	walk("", schema, values)

	table := map[string]string{}
	for _, m := range valueRow.FindAllStringSubmatch(section, -1) {
		if _, dup := table[m[1]]; dup {
			t.Errorf("the table of values lists %s twice", m[1])
		}
		table[m[1]] = strings.TrimSpace(m[2])
	}
	for key, def := range leaves {
		cell, ok := table[key]
		if !ok {
			t.Errorf("the table of values lacks %s", key)
			continue
		}
		var want string
		switch d := def.(type) {
		case string:
			if strings.Contains(d, "\n") {
				continue
			}
			want = d
			if d == "" {
				want = `""`
			}
		case bool, int:
			want = fmt.Sprint(d)
		case map[string]any:
			if len(d) > 0 {
				continue
			}
			want = "{}"
		case []any:
			if len(d) > 0 {
				continue
			}
			want = "[]"
		default:
			continue
		}
		if cell != "`"+want+"`" {
			t.Errorf("the table of values gives %s the default %s, values.yaml `%s`", key, cell, want)
		}
	}
	for key := range table {
		if _, ok := leaves[key]; !ok {
			t.Errorf("the table of values lists %s, which the chart has not", key)
		}
	}
}
