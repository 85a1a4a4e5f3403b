package gocheck

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestDashboards_ReferenceOnlyExportedMetrics: every metric docs/grafana-dashboard.json and
// docs/prometheus-alerts.yml query is one the Go code exports. The exported names are read from
// the source of drainer/ and escalation/ (the Name of every prometheus.*Opts literal and the
// first argument of prometheus.NewDesc; a histogram also exports _bucket, _sum and _count), so a
// renamed metric fails this test until the dashboard and the rules follow.
func TestDashboards_ReferenceOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	exported := exportedMetrics(t, "../drainer", "../escalation")
	require.GreaterOrEqual(t, len(exported), 10, "found too few exported metrics: %v", exported)

	raw, err := os.ReadFile("../docs/grafana-dashboard.json")
	require.NoError(t, err)
	var dash any
	require.NoError(t, json.Unmarshal(raw, &dash), "docs/grafana-dashboard.json is not JSON")
	var exprs []string
	collectExprs(dash, &exprs)
	checkExprs(t, "docs/grafana-dashboard.json", exprs, exported)

	raw, err = os.ReadFile("../docs/prometheus-alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules), "docs/prometheus-alerts.yml is not YAML")
	exprs = exprs[:0]
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			exprs = append(exprs, r.Expr)
		}
	}
	checkExprs(t, "docs/prometheus-alerts.yml", exprs, exported)
}

func checkExprs(t *testing.T, file string, exprs []string, exported map[string]bool) {
	t.Helper()
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, m := range promMetrics(e) {
			seen[m] = true
			require.True(t, exported[m], "%s queries %s, which the code does not export (it exports %v); expression: %s",
				file, m, sortedKeys(exported), e)
		}
	}
	require.GreaterOrEqual(t, len(seen), 5, "%s queries too few metrics: %v", file, sortedKeys(seen))
}

func exportedMetrics(t *testing.T, dirs ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		var files []*ast.File
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			require.NoError(t, err)
			files = append(files, f)
		}
		// Names may be string constants of the package: resolve them.
		consts := map[string]string{}
		for _, f := range files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							if v, ok := stringLit(vs.Values[i]); ok {
								consts[name.Name] = v
							}
						}
					}
				}
			}
		}
		stringLit := func(e ast.Expr) (string, bool) {
			if id, ok := e.(*ast.Ident); ok {
				v, ok := consts[id.Name]
				return v, ok
			}
			return stringLit(e)
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					sel, ok := n.Type.(*ast.SelectorExpr)
					if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
						return true
					}
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
								if name, ok := stringLit(kv.Value); ok {
									out[name] = true
									if sel.Sel.Name == "HistogramOpts" {
										out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
									}
								}
							}
						}
					}
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewDesc" && len(n.Args) > 0 {
						if name, ok := stringLit(n.Args[0]); ok {
							out[name] = true
						}
					}
				}
				return true
			})
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func collectExprs(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "expr" {
				*out = append(*out, s)
			} else {
				collectExprs(x, out)
			}
		}
	case []any:
		for _, x := range v {
			collectExprs(x, out)
		}
	}
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGroupings = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords  = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
)

// promMetrics returns the metric names a PromQL expression selects: identifiers left once string
// literals, label matchers, ranges and grouping clauses are removed, that are neither keywords nor
// called as functions.
func promMetrics(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promGroupings.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if promKeywords[strings.ToLower(name)] || strings.HasPrefix(rest, "(") {
			continue
		}
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // the unit of a number or duration, as in 1e3 or 5m
		}
		out = append(out, name)
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestDashboards_PromMetricsFindsTheSelectors(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"a_total", "b_bucket"}, promMetrics(
		`sum by (queue, outcome) (rate(a_total{outcome="x y", q=~"$q"}[5m])) / histogram_quantile(0.99, sum without (le) (rate(b_bucket[$__rate_interval]))) > 0.5 and on (queue) vector(1)`))
	require.Empty(t, promMetrics(`vector(1) > 1e3`))
}
