package config

import (
	"fmt"
	"strings"
)

// An Error is one problem in a policy file: where it is and what is wrong.
type Error struct {
	// File is the path given to Load or Parse.
	File string
	// Line is the 1-based line of the offending value, or 0 when the
	// problem has no line (an empty file).
	Line int
	// Field is the path of the offending field, such as
	// `rules "search".limits[0].period`: a rule or plan is named by its
	// name, or by its index (counting from 0: rules[2]) when it has no
	// valid one. An unknown field's Field is the mapping it is in. Field
	// is "" when the problem is the file itself (a YAML syntax error).
	Field string
	// Msg says what is wrong and what is accepted.
	Msg string
}

// Error formats e as "field: message (file:line)".
func (e *Error) Error() string {
	var b strings.Builder
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	b.WriteString(" (")
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(")")
	return b.String()
}

// Errors is every problem found in one policy file, in line order. Parse
// and Load return it as their error when the file is invalid.
type Errors []*Error

// Error returns the errors one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the errors, for errors.As.
func (es Errors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}
