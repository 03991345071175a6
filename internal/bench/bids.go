package bench

import (
	"bytes"
	"strconv"
	"time"

	"github.com/weirflow/weir/pkg/record"
)

// bidEpoch is the event time of bid 0; bids are a millisecond apart.
var bidEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// bid is a Nexmark bid. Its JSON encoding is about 200 bytes and starts with
// its id, so that a consumer can check delivery without decoding the rest.
type bid struct {
	id      uint64
	auction uint64
	bidder  uint64
	price   uint64
	time    time.Time
}

// mix is splitmix64: a cheap, deterministic spread of bid fields.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func makeBid(id uint64) bid {
	h := mix(id)
	return bid{
		id:      id,
		auction: 1000 + h%1000,
		bidder:  10000 + (h>>16)%50000,
		price:   100 + (h>>32)%100000,
		time:    bidEpoch.Add(time.Duration(id) * time.Millisecond),
	}
}

var channels = [...]string{"Google", "Facebook", "Baidu", "Apple"}

// key is the bid's business key, its auction.
func (b bid) key() []byte {
	return strconv.AppendUint([]byte("auction-"), b.auction, 10)
}

// appendJSON appends the bid's JSON encoding to buf.
func (b bid) appendJSON(buf []byte) []byte {
	buf = append(buf, `{"id":`...)
	buf = strconv.AppendUint(buf, b.id, 10)
	buf = append(buf, `,"key":"auction-`...)
	buf = strconv.AppendUint(buf, b.auction, 10)
	buf = append(buf, `","dateTime":"`...)
	buf = b.time.AppendFormat(buf, "2006-01-02T15:04:05.000Z07:00")
	buf = append(buf, `","auction":`...)
	buf = strconv.AppendUint(buf, b.auction, 10)
	buf = append(buf, `,"bidder":`...)
	buf = strconv.AppendUint(buf, b.bidder, 10)
	buf = append(buf, `,"price":`...)
	buf = strconv.AppendUint(buf, b.price, 10)
	buf = append(buf, `,"channel":"`...)
	buf = append(buf, channels[b.bidder%uint64(len(channels))]...)
	buf = append(buf, `","url":"https://www.nexmark.com/auction/`...)
	buf = strconv.AppendUint(buf, b.auction, 10)
	buf = append(buf, `/bid","extra":"v1"}`...)
	return buf
}

// record is the bid as weir carries it on an edge: the envelope plus the
// JSON payload, as read from an ingress stream.
func (b bid) record() record.Record {
	return record.Record{
		Kind:     record.Data,
		ID:       strconv.FormatUint(b.id, 10),
		Key:      b.key(),
		Producer: "nexmark",
		Time:     b.time,
		At:       record.Coordinate{Stream: "NEXMARK", Subject: "nexmark.bids", Seq: b.id + 1},
		Value:    b.appendJSON(make([]byte, 0, 224)),
	}
}

var idPrefix = []byte(`{"id":`)

// bidID reads the id at the start of a bid's JSON encoding.
func bidID(payload []byte) (uint64, bool) {
	rest, ok := bytes.CutPrefix(payload, idPrefix)
	if !ok {
		return 0, false
	}
	var id uint64
	n := 0
	for ; n < len(rest) && rest[n] >= '0' && rest[n] <= '9'; n++ {
		id = id*10 + uint64(rest[n]-'0')
	}
	return id, n > 0 && n < 20 && n < len(rest) && rest[n] == ','
}
