package strictjson

import (
	"errors"
	"testing"
)

func TestDecodeRefusesWhatTheTypeDoesNotHold(t *testing.T) {
	type msg struct {
		A int `json:"a"`
	}
	var m msg
	if err := Decode([]byte(`{"a":1}`), &m); err != nil || m.A != 1 {
		t.Fatalf("a whole value: %v %+v", err, m)
	}
	if err := Decode([]byte(`{"a":1,"b":2}`), &m); err == nil {
		t.Fatal("an unknown field was accepted")
	}
	if err := Decode([]byte(`{"a":1} {"a":2}`), &m); !errors.Is(err, ErrTrailing) {
		t.Fatalf("a second value: %v, want ErrTrailing", err)
	}
	if err := Decode([]byte(`{"a":`), &m); err == nil {
		t.Fatal("a cut value was accepted")
	}
}
