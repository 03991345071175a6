package contracts_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/weirflow/weir/contracts"
)

func ExampleLoad() {
	c, err := contracts.Load("nexmark-dedup.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	seen, _ := c.Family("seen")
	fmt.Println(c.Pipeline, c.Ingress.Stream, c.Ingress.Retention)
	fmt.Println(seen.Name, seen.Role, seen.TTL)
	for _, op := range c.Operators {
		fmt.Printf("%s: %s -> %s, keyed by %s, keeps %v\n", op.ID, op.Input, c.EdgeSubject(op.Output, 0), op.Keying, op.State)
	}

	_, err = contracts.Load("testdata/bad-dedup-ttl.yaml")
	var inv *contracts.Invalid
	if errors.As(err, &inv) {
		fmt.Println(inv.Problems[0].Field)
	}
	// Output:
	// nexmark NEXMARK 24h
	// seen dedup 26h
	// dedup: ingress -> weir.nexmark.deduped.0, keyed by id, keeps [seen]
	// publish: deduped -> weir.nexmark.events.0, keyed by key, keeps []
	// state.families[0].ttl
}

func ExampleLintFiles() {
	n, err := contracts.LintFiles(os.Stdout, "nexmark-dedup.yaml", "testdata/bad-fetch-over-ack.yaml")
	fmt.Println(n, err)
	// Output:
	// testdata/bad-fetch-over-ack.yaml:70: overload.fetch_batch: a fetch of 4096 messages can never be delivered whole while at most 1024 may be unacknowledged; fix: set fetch_batch to at most 1024, or raise max_ack_pending
	// 1 <nil>
}
