// Package docs holds sluice's guides (the Markdown files of this
// directory, linked from the repository's README) and the tests that keep
// them true: every link resolves, every Go block compiles or is the body
// of a runnable Example, every policy file is valid, every sluice command
// takes the flags it is shown with, every make target, test name and
// package a command names exists, and the getting-started guide's quick
// start is run as written. A guide's block can say what checks it in an
// HTML comment on the line before it:
//
//	<!-- example: path/to/example_test.go -->  the block holds that file's Example body
//	<!-- excerpt: path/to/example_test.go -->  the block's lines appear, in order, in that Example
//	<!-- file: path/in/the/repository -->      the block is that file as it is
//	<!-- envoy: rate_limits -->                the block is a list of Envoy route rate limits
//	<!-- godoc: config Format -->              the block is the one under "# Format" in config's package doc
//
// Blocks of no language (program output, diagrams) are not checked.
package docs
