package testutil

import (
	"slices"
	"strings"
)

// SortElements is a knftables Fake dump with its element lines sorted, after the other lines in
// their order: the Fake lists a set's elements in the order they were added, which differs
// between a fresh agent and one that got there by changes.
func SortElements(dump string) string {
	var other, elems []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, "add element ") {
			elems = append(elems, l)
		} else {
			other = append(other, l)
		}
	}
	slices.Sort(elems)
	return strings.Join(append(other, elems...), "\n")
}
