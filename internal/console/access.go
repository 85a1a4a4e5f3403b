package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// CheckListen refuses to serve a non-loopback address without authentication: the pages show
// queue names, error texts and payload previews, and the actions change the queues.
func CheckListen(addr string, authenticated bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen must be host:port, got %q: %v", addr, err)
	}
	if authenticated || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("--listen %s is not a loopback address: give --token or --basic-auth (or listen on 127.0.0.1)", addr)
}

// isLoopbackHost: "localhost" or a loopback IP. An empty host (all interfaces) or any other name
// is not: a name could resolve anywhere.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

type ctxKey int

const (
	whoKey ctxKey = iota
	csrfKey
)

const authCookie = "pgdrain_console_auth"

// who names the person behind a request for the action log: the basic-auth user, "token" (the
// shared token proves no more), or "local" for an unauthenticated loopback console.
func who(r *http.Request) string {
	if v, ok := r.Context().Value(whoKey).(string); ok {
		return v
	}
	return "local"
}

// access wraps h with the security headers and, when configured, authentication. Without
// authentication (loopback only, CheckListen) it still checks the Host header, so that a web page
// elsewhere can not read the console through DNS rebinding.
func (s *Server) access(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-store")

		if !s.cfg.authenticated() {
			host := r.Host
			if h, _, err := net.SplitHostPort(r.Host); err == nil {
				host = h
			}
			if !isLoopbackHost(strings.Trim(host, "[]")) {
				http.Error(w, "this console serves loopback only: open it as http://127.0.0.1:PORT/ or http://localhost:PORT/", http.StatusMisdirectedRequest)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		if name, ok := s.authenticate(w, r); ok {
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), whoKey, name)))
		}
	})
}

// authenticate accepts basic auth (when configured) or the token (when configured): as a bearer
// header, as the cookie set on the first visit, or as ?token= on a GET, which sets that cookie and
// redirects to the same page without the token in its address.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.cfg.BasicUser != "" {
		if u, p, ok := r.BasicAuth(); ok && equal(u, s.cfg.BasicUser) && equal(p, s.cfg.BasicPassword) {
			return u, true
		}
	}
	if s.cfg.Token != "" {
		if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(b, s.cfg.Token) {
			return "token", true
		}
		if c, err := r.Cookie(authCookie); err == nil && equal(c.Value, s.mac("auth", s.cfg.Token)) {
			return "token", true
		}
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && equal(t, s.cfg.Token) {
			http.SetCookie(w, &http.Cookie{Name: authCookie, Value: s.mac("auth", s.cfg.Token), Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode})
			q := r.URL.Query()
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return "", false
		}
	}
	if s.cfg.BasicUser != "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="pgdrain console", charset="UTF-8"`)
	}
	http.Error(w, "authentication required: basic auth, or the token (open /?token=... once, or send Authorization: Bearer ...)", http.StatusUnauthorized)
	return "", false
}

// mac is HMAC-SHA256 under the server's per-process key, hex: cookies minted by one run of
// pgdrain web mean nothing to another.
func (s *Server) mac(purpose, v string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
