package gocheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// The markdown a reader walks: README.md, CONTRIBUTING.md, examples/README.md and every page of
// docs/. TestDocs_LinksResolve checks that every relative link in them (outside code) names a file
// or folder that exists and, for a link into a markdown page with a #fragment, a heading (or an
// <a id> / <a name>) of that page; TestDocs_IndexListsEveryPage that docs/README.md links every
// page of docs/.

// docsPages returns the markdown files whose links are checked, relative to the repository root.
func docsPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	for _, p := range []string{"../README.md", "../CONTRIBUTING.md", "../examples/README.md"} {
		if _, err := os.Stat(p); err == nil {
			pages = append(pages, p)
		}
	}
	return pages
}

var (
	// mdLink matches an inline link or image: [text](target) or ![alt](target "title").
	mdLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// mdRefDef matches a reference definition: [name]: target
	mdRefDef = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	// htmlAnchor matches <a id="x"> and <a name="x">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// mdLines returns the lines of a markdown file, those inside fenced code blocks blanked.
func mdLines(text string) []string {
	var out []string
	fence := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "" {
				fence = ""
			}
			out = append(out, "")
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			n := len(trimmed) - len(strings.TrimLeft(trimmed, trimmed[:1]))
			fence = strings.Repeat(trimmed[:1], n)
			out = append(out, "")
			continue
		}
		out = append(out, line)
	}
	return out
}

// mdProse returns the lines of a markdown file outside fenced code blocks, with code spans blanked.
func mdProse(text string) []string {
	lines := mdLines(text)
	for i, line := range lines {
		lines[i] = withoutCodeSpans(line)
	}
	return lines
}

// withoutCodeSpans drops the code spans of a line: a run of backticks up to the next run of as many.
func withoutCodeSpans(line string) string {
	var b strings.Builder
	for {
		open := strings.IndexByte(line, '`')
		if open < 0 {
			b.WriteString(line)
			return b.String()
		}
		n := len(line[open:]) - len(strings.TrimLeft(line[open:], "`"))
		closing := -1
		for i := open + n; i < len(line); {
			j := strings.IndexByte(line[i:], '`')
			if j < 0 {
				break
			}
			m := len(line[i+j:]) - len(strings.TrimLeft(line[i+j:], "`"))
			if m == n {
				closing = i + j
				break
			}
			i += j + m
		}
		if closing < 0 { // no closing run: the backticks are text
			b.WriteString(line[:open+n])
			line = line[open+n:]
			continue
		}
		b.WriteString(line[:open])
		line = line[closing+n:]
	}
}

// mdAnchors returns the fragments a markdown file answers to: GitHub's heading slugs (see
// githubSlug; "-1", "-2" ... for repeats) and the ids of its <a id> / <a name> tags.
func mdAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range mdLines(text) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(withoutCodeSpans(line), -1) {
			anchors[m[1]] = true
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if level == 0 || level > 6 || !strings.HasPrefix(line[level:], " ") {
			continue
		}
		slug := githubSlug(strings.TrimSpace(line[level:]))
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// githubSlug is the anchor GitHub gives a heading: lower case, spaces become '-', and every
// character but letters, digits, '-' and '_' is dropped (a code span keeps its text).
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdLinks returns the targets of every link and image of a markdown file, outside code.
func mdLinks(text string) []string {
	var targets []string
	for _, line := range mdProse(text) {
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
	}
	for _, m := range mdRefDef.FindAllStringSubmatch(strings.Join(mdProse(text), "\n"), -1) {
		targets = append(targets, m[1])
	}
	return targets
}

func isExternalLink(target string) bool {
	return regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) || strings.HasPrefix(target, "//")
}

func TestDocs_LinksResolve(t *testing.T) {
	t.Parallel()
	anchorsOf := map[string]map[string]bool{}
	anchors := func(path string) map[string]bool {
		if a, ok := anchorsOf[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		a := mdAnchors(string(b))
		anchorsOf[path] = a
		return a
	}
	var broken []string
	for _, page := range docsPages(t) {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		name := strings.TrimPrefix(page, "../")
		for _, target := range mdLinks(string(b)) {
			if isExternalLink(target) {
				continue
			}
			file, fragment, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
			}
			if _, err := os.Stat(path); err != nil {
				broken = append(broken, fmt.Sprintf("%s: %s: no such file", name, target))
				continue
			}
			if fragment != "" && strings.HasSuffix(path, ".md") && !anchors(path)[fragment] {
				broken = append(broken, fmt.Sprintf("%s: %s: no heading or anchor #%s in %s", name, target,
					fragment, strings.TrimPrefix(filepath.ToSlash(path), "../")))
			}
		}
	}
	require.Empty(t, broken, "relative links that do not resolve:\n%s", strings.Join(broken, "\n"))
}

func TestDocs_IndexListsEveryPage(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/README.md")
	require.NoError(t, err, "docs/README.md is the index of the docs pages")
	linked := map[string]bool{}
	for _, target := range mdLinks(string(b)) {
		file, _, _ := strings.Cut(target, "#")
		linked[filepath.Clean(file)] = true
	}
	pages, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	var missing []string
	for _, p := range pages {
		if base := filepath.Base(p); base != "README.md" && !linked[base] {
			missing = append(missing, "docs/"+base)
		}
	}
	require.Empty(t, missing, "docs/README.md must list every page of docs/, one line each (what it covers, who it is for): %v", missing)
}
