package config

import (
	"fmt"
	"os"
	"strconv"

	"github.com/pgdrain/pgdrain/internal/yamlfile"
)

// Load reads and validates the file at path; ${NAME} is looked up with os.LookupEnv.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading relay config: %w", err)
	}
	return Parse(path, data, os.LookupEnv)
}

// Parse reads and validates a config file's contents; name is used in errors. Every problem is
// reported, one per line, as "name:LINE: field: problem" (package internal/yamlfile: ${NAME}
// expansion, unknown fields, values of the wrong type).
func Parse(name string, data []byte, lookupEnv func(string) (string, bool)) (*File, error) {
	f := &File{name: name}
	p, err := yamlfile.Decode(name, data, lookupEnv, f, "it must list queues")
	if err != nil {
		return nil, err
	}
	f.validate(p)
	if err := p.Err(); err != nil {
		return nil, err
	}
	for i, q := range f.Queues {
		f.queueLines = append(f.queueLines, p.LineOf([]string{"queues", strconv.Itoa(i), "queue"}))
		var lines []int
		for j := range q.Sinks {
			lines = append(lines, p.LineOf([]string{"queues", strconv.Itoa(i), "sinks", strconv.Itoa(j), "name"}))
		}
		f.sinkLines = append(f.sinkLines, lines)
	}
	return f, nil
}
