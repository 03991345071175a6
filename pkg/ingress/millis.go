package ingress

import (
	"fmt"
	"strconv"
	"strings"
)

// parseMillisString reads integer milliseconds written as a decimal string.
func parseMillisString(s string) (int64, error) {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, fmt.Errorf("%q milliseconds do not fit in 64 bits", s)
		}
		return 0, fmt.Errorf("%q is not integer milliseconds", s)
	}
	return ms, nil
}

// parseMillis reads integer milliseconds from the text of a JSON number,
// exactly: 1.7e12 is 1700000000000, 1.5 is no integer, and 1e30 does not fit
// in 64 bits. It never goes through a float, whose 53 bits would round large
// values, and never builds a number from an exponent it does not need, so a
// hostile exponent such as 1e999999999 costs nothing.
func parseMillis(num string) (int64, error) {
	notInt := func() (int64, error) { return 0, fmt.Errorf("%s is not integer milliseconds", num) }
	tooBig := func() (int64, error) { return 0, fmt.Errorf("%s milliseconds do not fit in 64 bits", num) }
	if ms, err := strconv.ParseInt(num, 10, 64); err == nil {
		return ms, nil
	}
	s, neg := strings.CutPrefix(num, "-")
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" || !isDigits(intPart) || !isDigits(frac) {
		return notInt()
	}
	// The value is digits × 10^shift.
	shift := int64(-len(frac))
	if hasExp {
		sign := int64(1)
		if e, ok := strings.CutPrefix(exp, "-"); ok {
			sign, exp = -1, e
		} else {
			exp = strings.TrimPrefix(exp, "+")
		}
		if exp == "" || !isDigits(exp) {
			return notInt()
		}
		if exp = strings.TrimLeft(exp, "0"); len(exp) > 12 {
			exp = "999999999999" // past any number's own digits: the answer is the same
		}
		e, _ := strconv.ParseInt("0"+exp, 10, 64)
		shift += sign * e
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return 0, nil
	}
	trimmed := strings.TrimRight(digits, "0")
	shift += int64(len(digits) - len(trimmed))
	switch {
	case shift < 0:
		return notInt()
	case int64(len(trimmed))+shift > 19:
		return tooBig()
	}
	text := trimmed + strings.Repeat("0", int(shift))
	if neg {
		text = "-" + text
	}
	ms, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return tooBig()
	}
	return ms, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
