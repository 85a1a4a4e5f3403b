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

const csrfCookie = "pgdrain_console_csrf"

// csrfHeader carries the CSRF token for a client that posts without a form (a script); the forms
// carry it in their action's query string (?csrf=...).
const csrfHeader = "X-Pgdrain-Csrf"

// maxFormBytes bounds the body of an action: its form has a handful of short fields.
const maxFormBytes = 64 << 10

// crossOrigin refuses a browser's cross-origin POST by its Sec-Fetch-Site or Origin header
// (another site, but also another port of the same host, which SameSite cookies do not tell apart).
var crossOrigin = http.NewCrossOriginProtection()

// csrf gives every browser a random cookie (SameSite=Strict, HttpOnly) and every form a token
// derived from it with the server's key. A POST is checked before anything reads its body: it must
// come from this origin (Sec-Fetch-Site/Origin, when the browser sends them), carry the cookie and
// the matching token in its address (?csrf=, as the forms send it) or the X-Pgdrain-Csrf header,
// and only then is its body read: a URL-encoded form of at most 64 KiB (415 for any other type, so
// a multipart body is never parsed). Another site can make a browser POST here but can neither
// read the token from a page nor send the strict cookie.
func (s *Server) csrf(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(csrfCookie)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := s.checkCSRF(r, c); err != nil {
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
		var value string
		if err == nil && len(c.Value) == 32 {
			value = c.Value
		} else {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			value = hex.EncodeToString(b)
			http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: value, Path: "/", HttpOnly: true,
				Secure: servedOverTLS(r), SameSite: http.SameSiteStrictMode})
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), csrfKey, s.mac("csrf", value))))
	})
}

// checkCSRF looks only at the request's headers and address, never at its body.
func (s *Server) checkCSRF(r *http.Request, c *http.Cookie) error {
	if err := crossOrigin.Check(r); err != nil {
		return err
	}
	if c == nil {
		return errors.New("no CSRF cookie")
	}
	token := r.Header.Get(csrfHeader)
	if token == "" {
		token = r.URL.Query().Get("csrf")
	}
	if token == "" || !hmac.Equal([]byte(token), []byte(s.mac("csrf", c.Value))) {
		return errors.New("no CSRF token, or not the one of this cookie")
	}
	return nil
}

// csrfToken is the token the forms of this response carry.
func csrfToken(r *http.Request) string {
	v, _ := r.Context().Value(csrfKey).(string)
	return v
}
