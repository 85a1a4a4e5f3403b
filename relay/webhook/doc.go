// Package webhook is a relay.Sink that POSTs each event to an HTTP endpoint, signed as the
// Standard Webhooks specification describes (https://www.standardwebhooks.com): headers
// webhook-id (the event's identity, to dedupe on), webhook-timestamp (Unix seconds) and
// webhook-signature ("v1,<base64 HMAC-SHA256 of id.timestamp.body>", one per secret, separated by
// spaces, so a secret can be rotated: sign with the old and the new one until every receiver has
// the new one).
//
// A producer's event headers go with the request only as Config.EventHeaders allows (by default
// x-* and the W3C trace context; never a credential, a proxy's header, the sink's own or what HTTP
// controls unless named exactly, where that is allowed at all).
//
// A 2xx answer is sent. 408, 421, 425 and 429 are transient, as are 5xx, 3xx (a redirect is not
// followed: the URL is wrong, and an operator can fix it without poisoning events), timeouts and
// connection errors; every other 4xx is permanent. A Retry-After header (seconds or an HTTP date,
// at most MaxRetryAfter) is reported as the Result's RetryAfter. A connection error names the
// URL by its scheme and host only: its path and query may hold the credential.
//
// Verify checks a request as a receiver should: a signature that matches one of its secrets and a
// timestamp within a tolerance.
package webhook
