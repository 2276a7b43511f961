// Command kubestrict decodes Kubernetes manifests strictly into their API
// types, as an API server with strict field validation would: every
// document of every file named (a YAML stream, such as helm template's
// output) into the k8s.io/api (or prometheus-operator) type of its
// apiVersion and kind, refusing a field the type lacks (a misspelt one,
// one at the wrong depth), a duplicate field, a value of the wrong type
// (a string for a port number, a bad quantity) and a kind it does not
// know. It prints one line per object, file:line: apiVersion kind
// namespace/name, and each error as file:line: kind name: what.
//
// It is a module of its own, so that k8s.io/api never enters sluice's
// go.mod; deploy's tests build it and run it over deploy/kubernetes and
// over the Helm chart's renderings.
//
//	kubestrict deploy/kubernetes/*.yaml
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// kinds are the objects kubestrict knows, by "apiVersion kind": each
// returns a new value of its API type.
var kinds = map[string]func() any{
	"v1 Namespace":                  func() any { return new(corev1.Namespace) },
	"v1 ConfigMap":                  func() any { return new(corev1.ConfigMap) },
	"v1 Secret":                     func() any { return new(corev1.Secret) },
	"v1 Service":                    func() any { return new(corev1.Service) },
	"v1 ServiceAccount":             func() any { return new(corev1.ServiceAccount) },
	"apps/v1 Deployment":            func() any { return new(appsv1.Deployment) },
	"policy/v1 PodDisruptionBudget": func() any { return new(policyv1.PodDisruptionBudget) },
	"monitoring.coreos.com/v1 ServiceMonitor": func() any { return new(monitoringv1.ServiceMonitor) },
}

// run checks every file of args and writes the objects it decoded to
// stdout; the error lists every problem of every file.
func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: kubestrict FILE [FILE ...]")
	}
	var problems []string
	for _, file := range args {
		raw, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		objs, errs := check(file, raw)
		for _, o := range objs {
			fmt.Fprintln(stdout, o)
		}
		problems = append(problems, errs...)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// check decodes every document of raw (the file named file) strictly into
// its API type. It returns a line for each object decoded and one for
// each problem, both led by file:line.
func check(file string, raw []byte) (objs, problems []string) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return objs, problems
		}
		if err != nil {
			return objs, append(problems, fmt.Sprintf("%s: %v", file, err))
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" {
			continue // an empty document: only comments, or nothing between two ---
		}
		obj, errs := checkObject(file, doc.Content[0])
		if len(errs) == 0 {
			objs = append(objs, obj)
		}
		problems = append(problems, errs...)
	}
}

// checkObject decodes the object root of file strictly into its API type
// and returns its line for the listing, or its problems.
func checkObject(file string, root *yaml.Node) (obj string, problems []string) {
	at := fmt.Sprintf("%s:%d", file, root.Line)
	var head struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name      string `yaml:"name"`
			Namespace string `yaml:"namespace"`
		} `yaml:"metadata"`
	}
	if err := root.Decode(&head); err != nil {
		return "", []string{fmt.Sprintf("%s: %v", at, err)}
	}
	what := head.Kind + " " + head.Metadata.Name
	newObj, ok := kinds[head.APIVersion+" "+head.Kind]
	if !ok {
		return "", []string{fmt.Sprintf("%s: %s: apiVersion %q, kind %q: kubestrict knows no such object (it knows %s)", at, what, head.APIVersion, head.Kind, known())}
	}
	if head.Metadata.Name == "" {
		problems = append(problems, fmt.Sprintf("%s: %s: no metadata.name", at, what))
	}
	var tree any
	if err := root.Decode(&tree); err != nil {
		return "", append(problems, fmt.Sprintf("%s: %s: %v", at, what, err))
	}
	js, err := json.Marshal(tree)
	if err != nil {
		return "", append(problems, fmt.Sprintf("%s: %s: %v", at, what, err))
	}
	strict, err := kjson.UnmarshalStrict(js, newObj())
	if err != nil {
		return "", append(problems, fmt.Sprintf("%s: %s: %v", at, what, err))
	}
	for _, e := range strict {
		line := root.Line
		var fe kjson.FieldError
		if errors.As(e, &fe) {
			line = lineOf(root, fe.FieldPath())
		}
		problems = append(problems, fmt.Sprintf("%s:%d: %s: %v", file, line, what, e))
	}
	return fmt.Sprintf("%s: %s %s %s/%s", at, head.APIVersion, head.Kind, head.Metadata.Namespace, head.Metadata.Name), problems
}

// known lists the kinds kubestrict knows.
func known() string {
	ks := slices.Sorted(maps.Keys(kinds))
	return strings.Join(ks, ", ")
}

// step matches one step of a field path: a name and its indexes, such as
// containers[0].
var (
	step  = regexp.MustCompile(`^([^\[]*)((?:\[\d+\])*)$`)
	index = regexp.MustCompile(`\d+`)
)

// lineOf returns the line of the field at path in the mapping n, the path
// as sigs.k8s.io/json names it (spec.template.spec.containers[0].imagePullPolicyy),
// or the line of as much of the path as n holds.
func lineOf(n *yaml.Node, path string) int {
	line := n.Line
	for _, s := range strings.Split(path, ".") {
		m := step.FindStringSubmatch(s)
		if m == nil {
			return line
		}
		key, val := field(n, m[1])
		if key == nil {
			return line
		}
		line, n = key.Line, val
		for _, idx := range index.FindAllString(m[2], -1) {
			i, _ := strconv.Atoi(idx)
			if n.Kind != yaml.SequenceNode || i >= len(n.Content) {
				return line
			}
			n = n.Content[i]
			line = n.Line
		}
	}
	return line
}

// field returns the key and the value nodes of name in the mapping n, or
// nils.
func field(n *yaml.Node, name string) (key, val *yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}
