// Package strictjson decodes the JSON weir itself writes — control
// messages, outcomes, reports, markers — strictly: one value, no field the
// type does not have, nothing after it. Each wire format's owner decodes
// through Decode, so that "strict" means one thing everywhere.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// ErrTrailing is returned for data after the value.
var ErrTrailing = errors.New("data after the value")

// Decode decodes one JSON value from data into v, refusing unknown fields
// and anything after the value.
func Decode(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return ErrTrailing
	}
	return nil
}
