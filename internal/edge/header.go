package edge

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// EscapeHeader makes s safe to carry as a NATS header value without change:
// every byte the transport or a client might alter or drop — whitespace
// and control characters, ASCII or not (nats.go trims values and turns CR
// and LF into spaces; other clients trim Unicode space), and bytes that are
// not UTF-8 — is written %XX, as is '%' itself. Printable ASCII and printable
// UTF-8 pass as they are, so ordinary IDs read the same. Distinct strings
// always escape to distinct values: this is what makes a json edge's
// Nats-Msg-Id, built from a record's ID, unable to collide for two
// different IDs (JetStream would drop the second as a duplicate).
func EscapeHeader(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == '%' || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		c := s[i]
		if c > ' ' && c != '%' && c < 0x7f {
			b.WriteByte(c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if c >= utf8.RuneSelf && (r != utf8.RuneError || n > 1) && unicode.IsGraphic(r) && !unicode.IsSpace(r) {
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		for _, c := range []byte(s[i : i+n]) {
			fmt.Fprintf(&b, "%%%02X", c)
		}
		i += n
	}
	return b.String()
}

// maxIDPart bounds the bytes a record ID adds to a message ID.
const maxIDPart = 200

// IDPart is how a record's ID appears in a message ID: escaped
// (EscapeHeader), and when that is longer than 200 bytes, its first bytes,
// then "%~" and the SHA-256 of the whole ID in hex. Escaped text never holds
// "%~" (a '%' there always starts two hex digits), so a long ID's part can
// equal no short ID's: distinct IDs give distinct parts. The bound keeps a
// message whose ID a producer chose within any server's maximum payload.
func IDPart(id string) string {
	e := EscapeHeader(id)
	if len(e) <= maxIDPart {
		return e
	}
	sum := sha256.Sum256([]byte(id))
	prefix := e[:maxIDPart-2*len(sum)-2]
	for !utf8.ValidString(prefix) {
		prefix = prefix[:len(prefix)-1] // a character cut in two
	}
	return prefix + "%~" + hex.EncodeToString(sum[:])
}

// UnescapeHeader inverts EscapeHeader.
func UnescapeHeader(v string) (string, error) {
	if !strings.Contains(v, "%") {
		return v, nil
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			b.WriteByte(v[i])
			continue
		}
		if i+2 >= len(v) {
			return "", fmt.Errorf("edge: header value %q: %% at %d without two hex digits", v, i)
		}
		n, err := strconv.ParseUint(v[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("edge: header value %q: bad escape at %d", v, i)
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), nil
}
