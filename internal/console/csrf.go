package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"mime"
	"net/http"
)

// csrfHeader carries the CSRF token for a client that posts without a form (a script); the forms
// carry it in their action's query string (?csrf=...).
const csrfHeader = "X-Pgdrain-Csrf"

// maxFormBytes bounds the body of an action: its form has a handful of short fields.
const maxFormBytes = 64 << 10

// crossOrigin refuses a browser's cross-origin POST by its Sec-Fetch-Site or Origin header
// (another site, but also another port of the same host, which SameSite cookies do not tell apart).
var crossOrigin = http.NewCrossOriginProtection()

// csrf gives every browser a random cookie (SameSite=Strict, HttpOnly) signed with the server's
// key, and every form a token derived from it with that key. A POST is checked before anything
// reads its body: it must come from this origin (Sec-Fetch-Site/Origin, when the browser sends
// them), carry the cookie and the matching token in its address (?csrf=, as the forms send it) or
// the X-Pgdrain-Csrf header, and only then is its body read: a URL-encoded form of at most 64 KiB
// (415 for any other type, so a multipart body is never parsed). Another site can make a browser
// POST here but can neither read the token from a page nor send the strict cookie.
//
// Cookies do not isolate ports: a page on another port of this host can set a cookie of the same
// name, and with a longer path (Path=/actions, Path=/queues) the browser sends it before the
// console's own. So every cookie of the name counts, not only the first: a page's forms carry the
// token of the first cookie the console signed, and a POST passes when any cookie it carries
// matches its token. A tossed cookie can thus neither block an action nor stand for the console's.
func (s *Server) csrf(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cookies := s.csrfCookies(r)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := s.checkCSRF(r, cookies); err != nil {
				s.cfg.Logger.Warn("console action refused: missing or wrong CSRF token", "who", who(r), "remote", r.RemoteAddr,
					"path", r.URL.Path, "reason", err.Error())
				http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
				return
			}
			if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/x-www-form-urlencoded" {
				http.Error(w, "actions take a URL-encoded form (application/x-www-form-urlencoded)", http.StatusUnsupportedMediaType)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if err := r.ParseForm(); err != nil {
				status := http.StatusBadRequest
				if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
					status = http.StatusRequestEntityTooLarge
				}
				http.Error(w, "reading the form: "+err.Error(), status)
				return
			}
		}
		value := ""
		for _, c := range cookies {
			if s.signedCSRFCookie(c) {
				value = c
				break
			}
		}
		if value == "" {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			nonce := hex.EncodeToString(b)
			value = nonce + s.mac("csrf-cookie", nonce)[:csrfNonceLen]
			http.SetCookie(w, &http.Cookie{Name: s.cookies.csrf, Value: value, Path: "/", HttpOnly: true,
				Secure: servedOverTLS(r), SameSite: http.SameSiteStrictMode})
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), csrfKey, s.mac("csrf", value))))
	})
}

// csrfNonceLen is the length of both halves of the CSRF cookie: 32 hex digits of randomness, then
// the first 32 hex digits of their HMAC under the server's key.
const csrfNonceLen = 32

// csrfCookies returns the values of every cookie of this console's CSRF cookie name, in the order
// the browser sent them (r.Cookie would return only the first).
func (s *Server) csrfCookies(r *http.Request) []string {
	var values []string
	for _, c := range r.Cookies() {
		if c.Name == s.cookies.csrf {
			values = append(values, c.Value)
		}
	}
	return values
}

// signedCSRFCookie reports whether v is a CSRF cookie this process minted.
func (s *Server) signedCSRFCookie(v string) bool {
	if len(v) != 2*csrfNonceLen {
		return false
	}
	return hmac.Equal([]byte(v[csrfNonceLen:]), []byte(s.mac("csrf-cookie", v[:csrfNonceLen])[:csrfNonceLen]))
}

// checkCSRF looks only at the request's headers and address, never at its body: the origin, then
// the token against every CSRF cookie the request carries.
func (s *Server) checkCSRF(r *http.Request, cookies []string) error {
	if err := crossOrigin.Check(r); err != nil {
		return err
	}
	if len(cookies) == 0 {
		return errors.New("no CSRF cookie")
	}
	token := r.Header.Get(csrfHeader)
	if token == "" {
		token = r.URL.Query().Get("csrf")
	}
	if token == "" {
		return errors.New("no CSRF token")
	}
	for _, c := range cookies {
		if hmac.Equal([]byte(token), []byte(s.mac("csrf", c))) {
			return nil
		}
	}
	return errors.New("a CSRF token, but not the one of any CSRF cookie sent")
}

// csrfToken is the token the forms of this response carry.
func csrfToken(r *http.Request) string {
	v, _ := r.Context().Value(csrfKey).(string)
	return v
}
