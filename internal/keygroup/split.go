package keygroup

import (
	"bytes"
	"hash/fnv"
	"strconv"
)

// splitMark separates a key from its salt in a split key.
const splitMark = 0x1f

// Split is the key a record takes on an edge that splits hot keys `ways`
// ways: its key, the byte 0x1f and a salt from its ID (FNV-1a modulo
// ways), so that one key's records spread over up to `ways` key groups —
// and instances — while each record keeps one salt however often it is
// replayed. A key that is empty, or ways below 2, is not split.
func Split(key []byte, id string, ways int) []byte {
	if ways < 2 || len(key) == 0 {
		return key
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return salted(key, int(h.Sum32()%uint32(ways)))
}

func salted(key []byte, salt int) []byte {
	out := make([]byte, 0, len(key)+4)
	out = append(append(out, key...), splitMark)
	return strconv.AppendUint(out, uint64(salt), 10)
}

// Forms are every key a key's records may take on an edge that splits
// hot keys `ways` ways: the key itself and each of its salted forms, as
// Split makes them. An erasure must find all of them.
func Forms(key []byte, ways int) [][]byte {
	forms := [][]byte{key}
	if ways < 2 || len(key) == 0 {
		return forms
	}
	for i := range ways {
		forms = append(forms, salted(key, i))
	}
	return forms
}

// Unsplit is the key a split key was made from: up to its last 0x1f, or
// the key itself when it has none.
func Unsplit(split []byte) []byte {
	if i := bytes.LastIndexByte(split, splitMark); i >= 0 {
		return split[:i]
	}
	return split
}
