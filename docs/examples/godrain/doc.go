// Package godrain holds the Go drainer example of the docs: readme_test.go, run by go test as an
// Example against a fresh database. docs/go.md quotes the program between the "quote:begin" and
// "quote:end" markers, README.md the part between "quote:excerpt:begin" and "quote:excerpt:end";
// gocheck/docs_examples_test.go checks both quotes verbatim.
package godrain
