package console

import (
	"bytes"
	"crypto/hmac"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgdrain/pgdrain/internal/console/timetext"
)

//go:embed web/*.html
var templateFS embed.FS

//go:embed web/static
var staticRoot embed.FS

// staticFS serves web/static under /static/.
var staticFS = func() fs.FS {
	sub, err := fs.Sub(staticRoot, "web")
	if err != nil {
		panic(err)
	}
	return sub
}()

// pages holds one template set per page: the layout plus the page's "main". A request with the
// header X-Pgdrain-Fragment (live.js) gets only "main", which the script swaps in.
type pages struct{ sets map[string]*template.Template }

var pageNames = []string{"queues", "queue", "escalations", "confirm", "message"}

func loadPages() (*pages, error) {
	p := &pages{sets: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "web/layout.html", "web/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parsing console template %s: %w", name, err)
		}
		p.sets[name] = t
	}
	return p, nil
}

// pageData is what every page template gets; Body is the page's own data.
type pageData struct {
	Title    string
	Nav      string // "queues" or "escalations": the highlighted tab
	ReadOnly bool
	CSRF     string
	Flash    *outcome // the result of the action that redirected here
	Refresh  int      // seconds between live refreshes
	Live     bool     // refresh this page (not a confirmation or a result)
	Who      string
	Body     any
}

// Bounds of an outcome in the flash cookie: a browser drops a cookie over 4 KiB, and with it the
// outcome. At most maxOutcomeLines lines (then "and N more"), the sentence at most
// maxOutcomeText bytes and each line at most maxOutcomeLine: about 3 KiB once encoded.
const (
	maxOutcomeText  = 500
	maxOutcomeLine  = 200
	maxOutcomeLines = 8
)

// bounded returns o cut to the bounds above, each text at a character boundary.
func (o outcome) bounded() outcome {
	cut := func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		s = s[:n-len("…")]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		return s + "…"
	}
	b := outcome{Changed: o.Changed, Text: cut(o.Text, maxOutcomeText)}
	for i, l := range o.Lines {
		if i == maxOutcomeLines-1 && len(o.Lines) > maxOutcomeLines {
			b.Lines = append(b.Lines, fmt.Sprintf("and %d more", len(o.Lines)-i))
			break
		}
		b.Lines = append(b.Lines, cut(l, maxOutcomeLine))
	}
	return b
}

// flashTTL is how long an action's result waits for the page it redirects to.
const flashTTL = time.Minute

// outcome is what an action did, as the page it redirects to shows it: whether it changed
// anything, a sentence saying what (or why nothing), and the figures that moved.
type outcome struct {
	Changed bool     `json:"changed"`
	Text    string   `json:"text"`
	Lines   []string `json:"lines,omitempty"`
}

// setFlash leaves an action's outcome for the page the action redirects to (POST, redirect, GET:
// reloading that page does not repeat the action). The cookie is signed with the server's key
// (flashValue): cookies do not isolate ports, so another local origin can set a cookie this
// console receives, but not one it shows.
func (s *Server) setFlash(w http.ResponseWriter, r *http.Request, o outcome) {
	msg, _ := json.Marshal(o.bounded())
	http.SetCookie(w, &http.Cookie{Name: s.cookies.flash, Value: s.flashValue(string(msg), time.Now().Add(flashTTL)), Path: "/",
		MaxAge: int(flashTTL / time.Second), HttpOnly: true, Secure: servedOverTLS(r), SameSite: http.SameSiteStrictMode})
}

// flashValue is "<message, base64url>.<expiry, unix seconds>.<HMAC of both>".
func (s *Server) flashValue(msg string, expires time.Time) string {
	body := base64.RawURLEncoding.EncodeToString([]byte(msg)) + "." + strconv.FormatInt(expires.Unix(), 10)
	return body + "." + s.mac("flash", body)
}

// readFlash returns the message of a flash cookie this process signed and that has not expired,
// or "" for anything else.
func (s *Server) readFlash(v string, now time.Time) string {
	i := strings.LastIndexByte(v, '.')
	if i < 0 || !hmac.Equal([]byte(v[i+1:]), []byte(s.mac("flash", v[:i]))) {
		return ""
	}
	enc, exp, _ := strings.Cut(v[:i], ".")
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || now.Unix() >= unix {
		return ""
	}
	msg, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return ""
	}
	return string(msg)
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, d pageData) {
	d.ReadOnly = s.cfg.ReadOnly
	d.CSRF = csrfToken(r)
	d.Refresh = int(s.cfg.Refresh / time.Second)
	d.Who = who(r)
	fragment := r.Header.Get("X-Pgdrain-Fragment") != ""
	if c, err := r.Cookie(s.cookies.flash); err == nil && !fragment {
		var o outcome
		if msg := s.readFlash(c.Value, time.Now()); msg != "" && json.Unmarshal([]byte(msg), &o) == nil && o.Text != "" {
			d.Flash = &o
		}
		http.SetCookie(w, &http.Cookie{Name: s.cookies.flash, Path: "/", MaxAge: -1, HttpOnly: true,
			Secure: servedOverTLS(r), SameSite: http.SameSiteStrictMode})
	}
	tmpl := "layout.html"
	if fragment {
		tmpl = "main"
	}
	var buf bytes.Buffer
	if err := s.pages.sets[name].ExecuteTemplate(&buf, tmpl, d); err != nil {
		s.cfg.Logger.Error("rendering console page", "page", name, "err", err)
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// message renders a page with one sentence (an error or a refusal) and a way back.
func (s *Server) message(w http.ResponseWriter, r *http.Request, status int, title, text, back string) {
	s.render(w, r, status, "message", pageData{Title: title, Body: map[string]string{"Text": text, "Back": back}})
}

var funcs = template.FuncMap{
	"dur": func(d any) string {
		switch v := d.(type) {
		case time.Duration:
			return human(v)
		case *time.Duration:
			if v == nil {
				return "–"
			}
			return human(*v)
		}
		return fmt.Sprint(d)
	},
	"ts": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return timetext.Format(v)
		case *time.Time:
			if v == nil {
				return "–"
			}
			return timetext.Format(*v)
		}
		return fmt.Sprint(t)
	},
	"in": func(t *time.Time) string {
		if t == nil {
			return "–"
		}
		d := time.Until(*t)
		if d <= 0 {
			return "due now (" + human(-d) + " late)"
		}
		return "in " + human(d)
	},
	"perMin": func(r Rate) string {
		if !r.OK {
			return "–"
		}
		return fmt.Sprintf("%.1f", r.Delivered)
	},
	"str": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	// key shows a partition key (string or *string) shortened (shortKey).
	"key": func(k any) string {
		switch v := k.(type) {
		case string:
			return shortKey(v)
		case *string:
			if v == nil {
				return ""
			}
			return shortKey(*v)
		}
		return fmt.Sprint(k)
	},
	"ago":   func(t, now time.Time) string { return fromNow(t, now) },
	"qpath": func(q string) string { return "/queues/" + url.PathEscape(q) },
	"add":   func(a, b int) int { return a + b },
	"sub":   func(a, b time.Time) time.Duration { return a.Sub(b) },
	"deref": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
}

// human rounds a duration for a person: 850ms, 42s, 3m12s, 5m, 2h5m, 3d4h, 7d.
func human(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		unit := time.Second
		if d >= time.Hour {
			unit = time.Minute
		}
		s := strings.TrimSuffix(d.Round(unit).String(), "m0s")
		if strings.HasSuffix(s, "h0") {
			return strings.TrimSuffix(s, "0")
		}
		if strings.HasSuffix(s, "m") || strings.HasSuffix(s, "s") {
			return s
		}
		return s + "m"
	default:
		days := int(d / (24 * time.Hour))
		if hours := int((d % (24 * time.Hour)) / time.Hour); hours > 0 {
			return fmt.Sprintf("%dd%dh", days, hours)
		}
		return fmt.Sprintf("%dd", days)
	}
}
