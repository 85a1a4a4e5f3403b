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
	"strconv"
	"strings"
	"time"
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
// redirects to the same page without the token in its address. Every comparison with a secret is
// constant-time over SHA-256 digests (secretEqual), and basic auth compares the password whether or
// not the user name matched, so the time an answer takes says nothing about either.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.cfg.BasicUser != "" {
		u, p, ok := r.BasicAuth()
		userOK := secretEqual(u, s.cfg.BasicUser)
		passwordOK := secretEqual(p, s.cfg.BasicPassword)
		if ok && userOK&passwordOK == 1 {
			return u, true
		}
	}
	if s.cfg.Token != "" {
		if b, ok := bearer(r.Header.Get("Authorization")); ok && secretEqual(b, s.cfg.Token) == 1 {
			return "token", true
		}
		if c, err := r.Cookie(s.cookies.auth); err == nil && s.validAuthCookie(c.Value, time.Now()) {
			return "token", true
		}
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && secretEqual(t, s.cfg.Token) == 1 {
			expires := time.Now().Add(s.cfg.SessionTTL)
			http.SetCookie(w, &http.Cookie{Name: s.cookies.auth, Value: s.authCookieValue(expires), Path: "/",
				Expires: expires, MaxAge: int(s.cfg.SessionTTL / time.Second),
				HttpOnly: true, Secure: servedOverTLS(r), SameSite: http.SameSiteStrictMode})
			q := r.URL.Query()
			q.Del("token")
			http.Redirect(w, r, sameOriginPath(r.URL.EscapedPath(), q.Encode()), http.StatusSeeOther)
			return "", false
		}
	}
	if s.cfg.BasicUser != "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="pgdrain console", charset="UTF-8"`)
	}
	http.Error(w, "authentication required: basic auth, or the token (open /?token=... once, or send Authorization: Bearer ...)", http.StatusUnauthorized)
	return "", false
}

// bearer returns the credentials of an "Authorization: Bearer T" header. The scheme is
// case-insensitive (RFC 7235: "bearer T" is the same) and one or more spaces follow it.
func bearer(header string) (string, bool) {
	scheme, credentials, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(credentials, " "), true
}

// authCookieValue is "<expiry, unix seconds>.<HMAC of the token and the expiry>": the cookie proves
// that its holder gave the token to this process, and until when that counts. The browser forgets
// it at the same time (Expires, Max-Age); the server does not rely on that.
func (s *Server) authCookieValue(expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + s.mac("auth", s.cfg.Token+"\x00"+exp)
}

func (s *Server) validAuthCookie(v string, now time.Time) bool {
	exp, mac, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !hmac.Equal([]byte(mac), []byte(s.mac("auth", s.cfg.Token+"\x00"+exp))) {
		return false
	}
	return now.Unix() < unix
}

// sameOriginPath is the address to redirect to after the token became a cookie: always a path on
// this server. A request for //evil.example/ (or /\evil.example/, which browsers read alike) must
// not become a redirect to another site, so leading slashes and backslashes collapse to one "/".
func sameOriginPath(escapedPath, rawQuery string) string {
	p := "/" + strings.TrimLeft(escapedPath, "/\\")
	if rawQuery != "" {
		p += "?" + rawQuery
	}
	return p
}

// servedOverTLS reports whether the browser reached the console over HTTPS: directly (r.TLS), or
// through a reverse proxy that terminates TLS and says so (X-Forwarded-Proto: https). Cookies are
// then Secure, so a browser never sends them over plain HTTP. A client that claims HTTPS falsely
// only gets cookies its browser will not send back over HTTP.
func servedOverTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
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

// constantTimeEqual compares two byte slices of equal length in time independent of their
// contents (a variable so that a test can watch what is compared).
var constantTimeEqual = subtle.ConstantTimeCompare

// secretEqual returns 1 when a equals b, else 0, in time that depends on neither: it compares the
// SHA-256 digests (always 32 bytes), so not even the lengths show.
func secretEqual(a, b string) int {
	da, db := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return constantTimeEqual(da[:], db[:])
}
