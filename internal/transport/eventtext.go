package transport

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxEventText bounds the agent's error text the controller copies into Events (SPEC N6).
const MaxEventText = 512

// EventText is err's text fit for an Event message on every Service bound to the gateway (SPEC
// N6, N8). For an *AgentError it is the agent's message (its kernel's or nft's words about the
// state), made one line (newlines and tabs become spaces, runs of them one), without control,
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
		return sanitizeLine("the gateway agent rejected the state: "+ae.Message, MaxEventText)
	}
	return "the gateway agent cannot be reached (the controller's log has the details)"
}

// RefusalText is an agent's reason for refusing one identity (gwstate.Refusal.Reason), fit for
// an Event message on that identity's Service: one line, bounded, as EventText makes it.
func RefusalText(reason string) string {
	return sanitizeLine(reason, MaxEventText)
}

func sanitizeLine(s string, max int) string {
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
		if b.Len() > max {
			break // enough to know it is cut
		}
	}
	out := b.String()
	if len(out) <= max {
		return out
	}
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return strings.TrimRight(out[:cut], " ") + ellipsis
}
