package stream

import (
	"fmt"

	"github.com/weirflow/weir/pkg/record"
	"github.com/weirflow/weir/pkg/state"
)

// Logic is operator code written against an environment interface E that
// *Context satisfies, such as window.Env or join.Env: the windowing and
// join libraries depend on the environment they need, not on the runtime.
type Logic[E any] interface {
	Process(env E, r record.Record) error
	OnTimer(env E, t state.Timer) error
	Families() []string
}

// Adapt runs logic written against E as an Operator. It fails if *Context
// does not implement E.
func Adapt[E any](l Logic[E]) (Operator, error) {
	if _, ok := any((*Context)(nil)).(E); !ok {
		var e *E
		return nil, fmt.Errorf("stream: *stream.Context does not implement %T", e)
	}
	return adapted[E]{l}, nil
}

type adapted[E any] struct{ l Logic[E] }

func (a adapted[E]) Process(c *Context, r record.Record) error { return a.l.Process(any(c).(E), r) }
func (a adapted[E]) OnTimer(c *Context, t state.Timer) error   { return a.l.OnTimer(any(c).(E), t) }
func (a adapted[E]) Families() []string                        { return a.l.Families() }
