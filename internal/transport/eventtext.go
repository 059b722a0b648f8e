package transport

import (
	"errors"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxEventText bounds the agent's error text the controller copies into Events (SPEC N6).
const MaxEventText = 512

// EventText is err's text fit for an Event message on every Service bound to the gateway (SPEC
// N6, N8). For an *AgentError it is the agent's message (its kernel's or nft's words about the
// state) with its IPv4 addresses replaced by "<address>" (they may be other tenants'), made one line (newlines and tabs become spaces, runs of them one), without control,
// format (bidi) or invalid UTF-8 characters, and cut at MaxEventText bytes on a character
// boundary, ending in "…". Any other error is the transport's (pod names, API server and exec
// details of the gateway namespace, which a Service's owner may not be able to read): the Event
// says only that the agent is unreachable, and the controller's log has the error.
func EventText(err error) string {
	if err == nil {
		return ""
	}
	var ae *AgentError
	if errors.As(err, &ae) {
		// The state is every tenant's: an address in the agent's words may be another tenant's
		// VIP or backend (SPEC N8).
		return sanitizeLine("the gateway agent rejected the state: "+redactAddresses(ae.Message), MaxEventText)
	}
	return "the gateway agent cannot be reached (the controller's log has the details)"
}

// StatusText is err's text for the controller's status ConfigMap, which readers of every tenant
// may be granted: fixed text only, never the agent's words (SPEC N8); the log has the error.
func StatusText(err error) string {
	if err == nil {
		return ""
	}
	var ae *AgentError
	if errors.As(err, &ae) {
		return "the gateway agent rejected the state (the controller's log has the details)"
	}
	return "the gateway agent cannot be reached (the controller's log has the details)"
}

// ipv4Literal matches an IPv4 address with an optional prefix length or port.
var ipv4Literal = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}(/\d{1,2})?(:\d{1,5})?\b`)

// redactAddresses replaces the IPv4 addresses in s (with their ports or prefix lengths).
func redactAddresses(s string) string { return ipv4Literal.ReplaceAllString(s, "<address>") }

// RefusalText is an agent's reason for refusing one identity (gwstate.Refusal.Reason), fit for
// an Event message on that identity's Service: one line, bounded, as EventText makes it.
func RefusalText(reason string) string {
	return sanitizeLine(reason, MaxEventText)
}

func sanitizeLine(s string, limit int) string {
	const ellipsis = "…"
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			continue // invalid UTF-8 (or a literal U+FFFD, equally useless here)
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case !unicode.IsPrint(r):
			continue // control, format (bidi overrides) and other invisible characters
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
		if b.Len() > limit {
			break // enough to know it is cut
		}
	}
	out := b.String()
	if len(out) <= limit {
		return out
	}
	cut := limit - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return strings.TrimRight(out[:cut], " ") + ellipsis
}
