package nexmark

import "testing"

// BenchmarkKeyedBid decodes a bid event and re-encodes its bid, as the
// Nexmark queries' first operator does for every event.
func BenchmarkKeyedBid(b *testing.B) {
	data := []byte(`{"id":"b-1029","kind":"bid","key":"1007","ts":1796168868736,"bid":{"auction":1007,"bidder":2044,"price":18271,"channel":"Google","url":"https://www.nexmark.com/q/cdb/item.htm","date_time":1796168868736}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok, err := KeyedBid(data, func(b Bid) string { return "k" }); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
