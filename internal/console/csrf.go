package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

const csrfCookie = "pgdrain_console_csrf"

// csrf gives every browser a random cookie (SameSite=Strict, HttpOnly) and every form a token
// derived from it with the server's key; a POST must carry both, matching. Another site can make
// a browser POST here but can neither read the token from a page nor send the strict cookie.
func (s *Server) csrf(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(csrfCookie)
		if r.Method == http.MethodPost {
			if err != nil || !equal(r.PostFormValue("csrf"), s.mac("csrf", c.Value)) ||
				r.Header.Get("Sec-Fetch-Site") == "cross-site" {
				s.cfg.Logger.Warn("console action refused: missing or wrong CSRF token", "who", who(r), "remote", r.RemoteAddr, "path", r.URL.Path)
				http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
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
			http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), csrfKey, s.mac("csrf", value))))
	})
}

// csrfToken is the token the forms of this response carry.
func csrfToken(r *http.Request) string {
	v, _ := r.Context().Value(csrfKey).(string)
	return v
}
