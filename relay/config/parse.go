package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
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
// reported, one per line, as "name:LINE: field: problem".
func Parse(name string, data []byte, lookupEnv func(string) (string, bool)) (*File, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if err.Error() == "EOF" {
			return nil, fmt.Errorf("%s: the file is empty: it must list queues", name)
		}
		p := &parser{name: name}
		p.addRaw(strings.TrimPrefix(err.Error(), "yaml: "))
		return nil, p.err()
	}
	p := &parser{name: name, root: &root}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	// Every problem is collected before any is reported: an unset variable, an unknown field or a
	// value of the wrong type is reported where it is and left out (as if the field were not
	// there), so the rest of the file is still decoded and validated.
	p.expandEnv(doc, lookupEnv)
	p.checkFields(doc, reflect.TypeFor[File](), nil)
	f := &File{name: name}
	if err := doc.Decode(f); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, e := range te.Errors {
				p.addRaw(strings.TrimPrefix(e, "yaml: "))
			}
			return nil, p.err()
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.doc = doc
	f.validate(p)
	if err := p.err(); err != nil {
		return nil, err
	}
	for i, q := range f.Queues {
		f.queueLines = append(f.queueLines, p.lineOf([]string{"queues", strconv.Itoa(i), "queue"}))
		var lines []int
		for j := range q.Sinks {
			lines = append(lines, p.lineOf([]string{"queues", strconv.Itoa(i), "sinks", strconv.Itoa(j), "name"}))
		}
		f.sinkLines = append(f.sinkLines, lines)
	}
	return f, nil
}

// parser collects problems with their lines.
type parser struct {
	name string
	root *yaml.Node
	doc  *yaml.Node // the top mapping, once decoded
	errs []string
	// unsetNodes are the values that named an unset ${NAME}.
	unsetNodes map[*yaml.Node]bool
	// reported are the fields (as display writes them) already reported for a value that was left
	// out (an unset variable, a value of the wrong type): their other problems, and those of what
	// they hold, follow from it and are not reported. incomplete are the mappings that hold an
	// unknown field: what they miss follows from the typo.
	reported   map[string]bool
	incomplete map[string]bool
}

// leftOut notes that the value of the field at path was reported and left out.
func (p *parser) leftOut(path []string) {
	if p.reported == nil {
		p.reported = map[string]bool{}
	}
	p.reported[display(path)] = true
}

func (p *parser) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(p.errs, "\n"))
}

// addRaw records a problem that yaml already located ("line 3: ...").
func (p *parser) addRaw(msg string) {
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, tail, ok := strings.Cut(rest, ": "); ok {
			p.errs = append(p.errs, fmt.Sprintf("%s:%s: %s", p.name, n, tail))
			return
		}
	}
	p.errs = append(p.errs, fmt.Sprintf("%s: %s", p.name, msg))
}

// at records a problem of the field at path ("queues", "0", "sink", ...), at the line of its value
// or, when it is missing, of its nearest enclosing value.
func (p *parser) at(path []string, format string, args ...any) {
	if p.incomplete[display(path)] {
		return
	}
	for i := len(path); i > 0; i-- {
		if p.reported[display(path[:i])] {
			return
		}
	}
	p.errs = append(p.errs, fmt.Sprintf("%s:%d: %s %s", p.name, p.lineOf(path), display(path), fmt.Sprintf(format, args...)))
}

// display renders a path as queues[0].sink.webhook.url.
func display(path []string) string {
	var b strings.Builder
	for _, s := range path {
		if _, err := strconv.Atoi(s); err == nil {
			b.WriteString("[" + s + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

func (p *parser) lineOf(path []string) int {
	n := p.doc
	line := n.Line
	for _, s := range path {
		next, at := child(n, s)
		if next == nil {
			break
		}
		n, line = next, at
	}
	return line
}

// child returns the value under key s of a mapping (and the line of its key), or element s of a
// sequence (and its line).
func child(n *yaml.Node, s string) (*yaml.Node, int) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == s {
				return n.Content[i+1], n.Content[i].Line
			}
		}
	case yaml.SequenceNode:
		if i, err := strconv.Atoi(s); err == nil && i >= 0 && i < len(n.Content) {
			return n.Content[i], n.Content[i].Line
		}
	}
	return nil, 0
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces ${NAME} in every scalar with the environment variable NAME. A plain
// (unquoted) scalar is typed again after expansion, so `concurrency: ${WORKERS}` is a number.
func (p *parser) expandEnv(n *yaml.Node, lookupEnv func(string) (string, bool)) {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			v, ok := lookupEnv(name)
			if !ok {
				p.errs = append(p.errs, fmt.Sprintf("%s:%d: ${%s} is not set in the environment", p.name, n.Line, name))
				if p.unsetNodes == nil {
					p.unsetNodes = map[*yaml.Node]bool{}
				}
				p.unsetNodes[n] = true
			}
			return v
		})
		if n.Style == 0 {
			n.Tag = ""
		}
	}
	for _, c := range n.Content {
		p.expandEnv(c, lookupEnv)
	}
}

var durationType = reflect.TypeFor[time.Duration]()

// checkFields reports every mapping key that t has no yaml field for, with the line and the
// fields it does have, so that a typo is never silently a default; and every value that is not of
// its field's type, naming the field. Such a key or value is removed from the tree, so that the
// file decodes and the rest of it is validated.
func (p *parser) checkFields(n *yaml.Node, t reflect.Type, path []string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p.unsetNodes[n] {
		p.leftOut(path)
		if n.Decode(reflect.New(t).Interface()) != nil {
			nullify(n)
		}
		return
	}
	if n.Kind == yaml.AliasNode || n.ShortTag() == "!!null" {
		return
	}
	if msg := p.typeProblem(n, t); msg != "" {
		field := display(path)
		if field == "" {
			field = "the file"
		}
		p.errs = append(p.errs, fmt.Sprintf("%s:%d: %s %s", p.name, n.Line, field, msg))
		p.leftOut(path)
		nullify(n)
		return
	}
	switch {
	case t.Kind() == reflect.Struct && t != durationType && n.Kind == yaml.MappingNode:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fields[k.Value]
			if !ok {
				known := make([]string, 0, len(fields))
				for name := range fields {
					known = append(known, name)
				}
				slices.Sort(known)
				p.errs = append(p.errs, fmt.Sprintf("%s:%d: %s is not a known field (known: %s)",
					p.name, k.Line, display(append(slices.Clone(path), k.Value)), strings.Join(known, ", ")))
				if p.incomplete == nil {
					p.incomplete = map[string]bool{}
				}
				p.incomplete[display(path)] = true
				continue
			}
			p.checkFields(v, f.Type, append(slices.Clone(path), k.Value))
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, c := range n.Content {
			p.checkFields(c, t.Elem(), append(slices.Clone(path), strconv.Itoa(i)))
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p.checkFields(n.Content[i+1], t.Elem(), append(slices.Clone(path), n.Content[i].Value))
		}
	}
}

// typeProblem says, in the file's words, why n cannot be a value of type t ("" when it can). A
// mapping, list or value is checked for its shape only; its contents are checked one by one.
func (p *parser) typeProblem(n *yaml.Node, t reflect.Type) string {
	got := func() string {
		switch n.Kind {
		case yaml.MappingNode:
			return "a mapping"
		case yaml.SequenceNode:
			return "a list"
		}
		return strconv.Quote(n.Value)
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode || n.Decode(new(time.Duration)) != nil {
			return fmt.Sprintf("must be a duration with a unit (250ms, 5s, 1m30s), got %s", got())
		}
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return fmt.Sprintf("must be a mapping (key: value), got %s", got())
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fmt.Sprintf("must be a list ([a, b]), got %s", got())
		}
	case n.Kind != yaml.ScalarNode || n.Decode(reflect.New(t).Interface()) != nil:
		want := "a single value"
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			want = "a whole number"
		case reflect.Bool:
			want = "true or false"
		}
		return fmt.Sprintf("must be %s, got %s", want, got())
	}
	return ""
}

// nullify makes n a null value: the field is left at its zero value (its default).
func nullify(n *yaml.Node) {
	*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line, Column: n.Column}
}

// yamlFields maps the yaml keys of struct t to its fields (fields tagged "-" have none; those of
// an inline struct are t's).
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for f := range t.Fields() {
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" && opts == "inline" && f.Type.Kind() == reflect.Struct {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		out[tag] = f
	}
	return out
}

// yamlKey is the yaml key of the Go field name of struct t ("" when it has none).
func yamlKey(t reflect.Type, goName string) string {
	if f, ok := t.FieldByName(goName); ok {
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag != "-" {
			return tag
		}
	}
	return ""
}
