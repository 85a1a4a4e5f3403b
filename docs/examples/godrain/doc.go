// Package godrain holds the Go example quoted in the README (example_test.go, between the
// "readme:begin" and "readme:end" markers). go test runs it against a fresh database, and
// gocheck/docs_examples_test.go checks that the README quotes it verbatim.
package godrain
