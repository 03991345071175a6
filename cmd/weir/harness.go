//go:build !release

package main

import (
	"github.com/weirflow/weir/internal/catalog"
	"github.com/weirflow/weir/internal/harness"
)

// The development harness — weir demo, bench and chaos — is in every build
// but the release one (-tags release), which links neither it nor the
// embedded test server it runs (TestReleaseLinksNoHarness).

// harnessUsage lists the harness's commands in weir's usage.
const harnessUsage = harness.Usage

// harnessCommand is the harness's command called name, over the shipped
// queries; nil if it has none.
func harnessCommand(name string) harness.Command {
	return (&harness.Harness{Catalog: catalog.Shipped()}).Command(name)
}
