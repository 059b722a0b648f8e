package testutil

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// GuideStep is one thing a reader of a guide does: apply a YAML block (Manifest), or run a
// command (Argv) from a sh block, whose trimmed output the guide names Capture when it ends with
// `# → <name>`.
type GuideStep struct {
	Line     int // the step's line in the guide, for a failure's message
	Manifest string
	Argv     []string
	Capture  string
	Comment  string // what the guide says after the command's #
}

// GuideSteps reads the steps of the section of markdown whose heading is heading (up to the next
// heading of the same level): its ```yaml blocks and the command lines of its ```sh blocks, in
// order. A command line is words as a POSIX shell splits them, with quotes but nothing a shell
// would expand or connect (no $, backquote, pipe, redirection, ;, &): a guide that a test follows
// command by command keeps its commands that plain; anything else is an error naming the line.
func GuideSteps(markdown, heading string) ([]GuideStep, error) {
	lines := strings.Split(markdown, "\n")
	level := strings.SplitN(heading, " ", 2)[0] + " "
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == heading {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no section %q", heading)
	}
	var steps []GuideStep
	for i := start; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, level) {
			break
		}
		lang, indent, ok := fenceOpen(l)
		if !ok {
			continue
		}
		var body []string
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, strings.TrimPrefix(lines[j], indent))
		}
		if j == len(lines) {
			return nil, fmt.Errorf("line %d: a code block that does not end", i+1)
		}
		switch lang {
		case "yaml":
			steps = append(steps, GuideStep{Line: i + 2, Manifest: strings.Join(body, "\n") + "\n"})
		case "sh":
			for k, cmd := range body {
				step, err := commandStep(cmd, i+2+k)
				if err != nil {
					return nil, err
				}
				if step != nil {
					steps = append(steps, *step)
				}
			}
		}
		i = j
	}
	return steps, nil
}

func fenceOpen(l string) (lang, indent string, ok bool) {
	t := strings.TrimLeft(l, " ")
	rest, ok := strings.CutPrefix(t, "```")
	if !ok || rest == "" {
		return "", "", false
	}
	return strings.TrimSpace(rest), l[:len(l)-len(t)], true
}

var placeholderRe = regexp.MustCompile(`^<[A-Za-z][A-Za-z0-9 .-]*>`)

// placeholderAt is the length of the placeholder rs begins with, 0 for none.
func placeholderAt(rs []rune) int {
	return len([]rune(placeholderRe.FindString(string(rs))))
}

var captureRe = regexp.MustCompile(`^→ (<[^>]+>)$`)

// commandStep is one line of a sh block: nil for a blank or comment line.
func commandStep(line string, n int) (*GuideStep, error) {
	words, comment, err := SplitWords(line)
	if err != nil {
		return nil, fmt.Errorf("line %d: %q: %w", n, line, err)
	}
	if len(words) == 0 {
		return nil, nil
	}
	step := &GuideStep{Line: n, Argv: words, Comment: comment}
	if m := captureRe.FindStringSubmatch(comment); m != nil {
		step.Capture = m[1]
	}
	return step, nil
}

// SplitWords splits a command line as a POSIX shell splits words, with single and double quotes,
// and returns what follows an unquoted # as the comment. It refuses what
// a shell would expand or connect, since no shell runs the result; a placeholder such as
// <chart version> is one piece of a word, spaces and all.
func SplitWords(line string) (words []string, comment string, err error) {
	var w strings.Builder
	inWord, quote := false, rune(0)
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case quote == '"':
			switch r {
			case '"':
				quote = 0
			case '$', '`', '\\':
				return nil, "", fmt.Errorf("%q inside double quotes: a shell would expand it", r)
			default:
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		case r == '<' && placeholderAt(rs[i:]) > 0:
			// A placeholder the reader fills in (<chart version>), not a redirection.
			n := placeholderAt(rs[i:])
			w.WriteString(string(rs[i : i+n]))
			i, inWord = i+n-1, true
		case r == '#' && !inWord:
			return words, strings.TrimSpace(string(rs[i+1:])), nil
		case strings.ContainsRune("$`|&;<>()\\{}*?[", r) || r == '~' && !inWord:
			return nil, "", fmt.Errorf("%q outside quotes: a shell would expand or connect it", r)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, "", errors.New("a quote that does not end")
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, "", nil
}
