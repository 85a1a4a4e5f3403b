// Package yamlfile reads pgdrain's YAML config files (`pgdrain relay`, `pgdrain escalate`) with
// one set of conventions: ${NAME} in a value is replaced by the environment variable NAME (an unset
// one is an error); unknown fields and values of the wrong type are errors naming the field by its
// key in the file; every problem is reported at once, one per line, as "FILE:LINE: field problem";
// and a problem that only follows from another is not repeated.
package yamlfile

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Problems collects a file's problems with their lines. The caller's validation adds its own with
// At, then reports them all with Err.
type Problems struct {
	name string
	doc  *yaml.Node // the top mapping, once decoded
	errs []string
	// unsetNodes are the values that named an unset ${NAME}.
	unsetNodes map[*yaml.Node]bool
	// reported are the fields (as Display writes them) already reported for a value that was left
	// out (an unset variable, a value of the wrong type): their other problems, and those of what
	// they hold, follow from it and are not reported. incomplete are the mappings that hold an
	// unknown field: what they miss follows from the typo.
	reported   map[string]bool
	incomplete map[string]bool
}

// Decode decodes a file's contents (name is used in problems) into v, a pointer to a struct whose
// fields carry yaml tags, after replacing ${NAME} with lookupEnv(NAME). An unset variable, an
// unknown field or a value of the wrong type is recorded in the returned Problems and left out (as
// if the field were not there), so that the rest of the file is still decoded and can be validated.
// It returns an error instead when nothing can be decoded: the file is not YAML, or it is empty
// (then the error is "NAME: the file is empty: " + empty).
func Decode(name string, data []byte, lookupEnv func(string) (string, bool), v any, empty string) (*Problems, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if err.Error() == "EOF" {
			return nil, fmt.Errorf("%s: the file is empty: %s", name, empty)
		}
		p := &Problems{name: name}
		p.addRaw(strings.TrimPrefix(err.Error(), "yaml: "))
		return nil, p.Err()
	}
	p := &Problems{name: name}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	p.expandEnv(doc, lookupEnv)
	p.checkFields(doc, reflect.TypeOf(v), nil)
	if err := doc.Decode(v); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, e := range te.Errors {
				p.addRaw(strings.TrimPrefix(e, "yaml: "))
			}
			return nil, p.Err()
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.doc = doc
	return p, nil
}

// Name is the file's name, as problems start.
func (p *Problems) Name() string { return p.name }

// Err returns every problem, one per line, or nil.
func (p *Problems) Err() error {
	if len(p.errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(p.errs, "\n"))
}

// addRaw records a problem that yaml already located ("line 3: ...").
func (p *Problems) addRaw(msg string) {
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, tail, ok := strings.Cut(rest, ": "); ok {
			p.errs = append(p.errs, fmt.Sprintf("%s:%s: %s", p.name, n, tail))
			return
		}
	}
	p.errs = append(p.errs, fmt.Sprintf("%s: %s", p.name, msg))
}

// leftOut notes that the value of the field at path was reported and left out.
func (p *Problems) leftOut(path []string) {
	if p.reported == nil {
		p.reported = map[string]bool{}
	}
	p.reported[Display(path)] = true
}

// At records a problem of the field at path ("queues", "0", "sink", ...), at the line of its value
// or, when it is missing, of its nearest enclosing value: "FILE:LINE: queues[0].sink problem".
// Nothing is recorded for a field whose value (or an enclosing one) was already reported and left
// out, or for a mapping that holds an unknown field.
func (p *Problems) At(path []string, format string, args ...any) {
	if p.incomplete[Display(path)] {
		return
	}
	for i := len(path); i > 0; i-- {
		if p.reported[Display(path[:i])] {
			return
		}
	}
	p.errs = append(p.errs, fmt.Sprintf("%s:%d: %s %s", p.name, p.LineOf(path), Display(path), fmt.Sprintf(format, args...)))
}

// FieldErrors places each line of a Validate error whose lines start with a Go field name of struct
// t, possibly indexed ("Secrets[1] must ..."), at the line of that field under path, with the Go
// field names it mentions in the file's words (InFileWords). A line naming no field of t is placed
// at path.
func (p *Problems) FieldErrors(path []string, t reflect.Type, err error) {
	for _, line := range SplitLines(err) {
		field, msg, _ := strings.Cut(line, " ")
		name, index, _ := strings.Cut(field, "[")
		key := Key(t, name)
		if key == "" {
			p.At(path, "%s", InFileWords(t, line))
			continue
		}
		at := append(slices.Clone(path), key)
		if index != "" {
			at = append(at, strings.TrimSuffix(index, "]"))
		}
		p.At(at, "%s", InFileWords(t, msg))
	}
}

// Display renders a path as queues[0].sink.webhook.url.
func Display(path []string) string {
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

// LineOf is the line of the value at path, or of its nearest enclosing value.
func (p *Problems) LineOf(path []string) int {
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
func (p *Problems) expandEnv(n *yaml.Node, lookupEnv func(string) (string, bool)) {
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
func (p *Problems) checkFields(n *yaml.Node, t reflect.Type, path []string) {
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
	if msg := typeProblem(n, t); msg != "" {
		field := Display(path)
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
					p.name, k.Line, Display(append(slices.Clone(path), k.Value)), strings.Join(known, ", ")))
				if p.incomplete == nil {
					p.incomplete = map[string]bool{}
				}
				p.incomplete[Display(path)] = true
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
func typeProblem(n *yaml.Node, t reflect.Type) string {
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

// yamlFields maps the yaml keys of struct t to its fields (fields tagged "-" have none).
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

// Key is the yaml key of the Go field goName of struct t ("" when it has none).
func Key(t reflect.Type, goName string) string {
	if f, ok := t.FieldByName(goName); ok {
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag != "-" {
			return tag
		}
	}
	return ""
}

// InFileWords replaces the Go field names of struct t that msg mentions ("TopicField") with their
// yaml keys ("topic_field"); a name is replaced only as a whole word, so Topic is not read inside
// TopicField, and only when its key is not the name in lower case (URL, Topic read the same).
func InFileWords(t reflect.Type, msg string) string {
	for f := range t.Fields() {
		key := Key(t, f.Name)
		if key == "" || key == strings.ToLower(f.Name) || !f.IsExported() || !strings.Contains(msg, f.Name) {
			continue
		}
		msg = regexp.MustCompile(`\b`+regexp.QuoteMeta(f.Name)+`\b`).ReplaceAllLiteralString(msg, key)
	}
	return msg
}

// SplitLines returns the lines of err's text (none for nil): a Validate error has one problem per
// line.
func SplitLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}
