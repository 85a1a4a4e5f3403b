package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"
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
	Flash    string
	Refresh  int  // seconds between live refreshes
	Live     bool // refresh this page (not a confirmation or a result)
	Who      string
	Body     any
}

const flashCookie = "pgdrain_console_flash"

// setFlash leaves a one-line result for the page the action redirects to (POST, redirect, GET:
// reloading that page does not repeat the action).
func setFlash(w http.ResponseWriter, msg string) {
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(msg), Path: "/", MaxAge: 60,
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, d pageData) {
	d.ReadOnly = s.cfg.ReadOnly
	d.CSRF = csrfToken(r)
	d.Refresh = int(s.cfg.Refresh / time.Second)
	d.Who = who(r)
	fragment := r.Header.Get("X-Pgdrain-Fragment") != ""
	if c, err := r.Cookie(flashCookie); err == nil && !fragment {
		d.Flash, _ = url.QueryUnescape(c.Value)
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1})
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
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil {
				return "–"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
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
	"qpath": func(q string) string { return "/queues/" + url.PathEscape(q) },
	"add":   func(a, b int) int { return a + b },
}

// human rounds a duration for a person: 850ms, 42s, 3m12s, 5m, 2h5m, 3d4h.
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
		return fmt.Sprintf("%dd%dh", days, int((d%(24*time.Hour))/time.Hour))
	}
}
