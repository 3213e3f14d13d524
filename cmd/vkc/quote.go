package main

import (
	"strconv"
	"unicode/utf8"
)

// maxQuoted is how many bytes of a user's string a message shows.
const maxQuoted = 80

// quote quotes a string from the command line, a file or a model for a message: Go syntax, so
// control characters and invalid UTF-8 are escaped and the terminal sees neither escape
// sequences nor mojibake, and cut after maxQuoted bytes with the full length said.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
