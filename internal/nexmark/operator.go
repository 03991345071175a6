package nexmark

import (
	"github.com/weirflow/weir/pkg/operator"
	"github.com/weirflow/weir/pkg/record"
)

// Bids is the operator the queries that read bids start with: it passes
// each bid on, reduced to the bid itself, under the key keyOf gives it.
// Persons and auctions are not a bid query's input and pass nowhere; an
// event that does not decode is poison (operator.PoisonOn), dead-lettered
// naming its payload.
func Bids(keyOf func(Bid) string) operator.Operator {
	return operator.Chain(operator.Func(func(env operator.Env, r record.Record) error {
		key, v, ok, err := KeyedBid(r.Value, keyOf)
		if err != nil || !ok {
			return err
		}
		return env.Emit(record.Record{Key: []byte(key), Value: v})
	}), operator.PoisonOn("payload", ErrInvalidEvent))
}
