package record

import (
	"errors"
	"fmt"
	"time"
)

// The event-time domain. weir stores timers and joins records by Unix
// nanoseconds, which an int64 holds from 1677-09-21 to 2262-04-11; the
// domain keeps whole years inside that span, with months to spare on each
// side so that a watermark's out-of-orderness bound or a window's end
// computed from a time in the domain does not leave the span. An event time
// outside [MinTime, MaxTime) is bad input: the source dead-letters it,
// naming the field, instead of letting it wrap into another century.
var (
	MinTime = time.Date(1678, time.January, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(2262, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// ErrTimeRange is wrapped by CheckTime's errors.
var ErrTimeRange = errors.New("record: time outside the event-time domain")

// CheckTime reports whether t lies in the event-time domain.
func CheckTime(t time.Time) error {
	if t.Before(MinTime) || !t.Before(MaxTime) {
		return fmt.Errorf("%w: %s is outside [%s, %s)", ErrTimeRange, FormatTime(t),
			MinTime.Format(time.DateOnly), MaxTime.Format(time.DateOnly))
	}
	return nil
}

// FormatTime writes t in RFC 3339 with nanoseconds, in UTC; times whose
// year RFC 3339 cannot write (before year 0 or after 9999) keep Go's form.
func FormatTime(t time.Time) string {
	if y := t.Year(); y < 0 || y > 9999 {
		return t.UTC().String()
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Distance says how far b lies after a (negative: before) in words a person
// reads: a duration rounded to the millisecond while it fits in one, in days
// and years beyond (time.Duration saturates at about 292 years, and a
// saturated duration names a distance that is not the real one).
func Distance(a, b time.Time) string {
	const maxDays = 100_000 // about 273 years: well inside a Duration
	secs := b.Unix() - a.Unix()
	if days := secs / 86400; days > maxDays || days < -maxDays {
		return fmt.Sprintf("%d days (about %d years)", days, days*100/36525)
	}
	return b.Sub(a).Round(time.Millisecond).String()
}
